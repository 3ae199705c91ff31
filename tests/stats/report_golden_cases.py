"""The frames of the report's golden-equality test (issue 39): each case is a judgments frame, maybe ratings, and
the ``build_report`` arguments. ``make_report_golden.py`` wrote the reports these gave on main before the columnar
report (``data/report_golden/*.json``); ``test_stats_report_golden.py`` checks that today's code gives the same.

Every frame is made here from a seed (no file to go stale): single scores with self-consistency samples, pairwise
verdicts in both orders with samples, two and three judges (the panel, mean and median, a quorum), human score and
preference ratings, imported verdicts, a reference-metric judge, failures, small groups (interval warnings)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats.synthetic import synthetic_judgments

Case = tuple[pd.DataFrame, pd.DataFrame | None, dict[str, Any]]


def _ratings_for(frame: pd.DataFrame, seed: int, n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    done = frame[frame["status"] == "done"]
    single = done[done["mode"] == "single"].drop_duplicates(["item_id", "system_a", "aspect"]).head(n)
    noise = rng.normal(0, 1.5, len(single))
    pairs = done[done["mode"] == "pairwise"].drop_duplicates(["item_id", "system_a", "system_b", "aspect"]).head(n)
    scores = pd.DataFrame(
        {
            "item_id": single["item_id"].to_numpy(),
            "system": single["system_a"].to_numpy(),
            "aspect": single["aspect"].to_numpy(),
            "rater": np.where(rng.random(len(single)) < 0.5, "expert_1", "crowd_2"),
            "kind": "score",
            "value": np.clip(np.round((single["score"].to_numpy() - 1) / 9 * 10 + noise), 0, 10),
            "scale_min": 0.0,
            "scale_max": 10.0,
        }
    )
    prefs = pd.DataFrame(
        {
            "item_id": pairs["item_id"].to_numpy(),
            "system": pairs["system_a"].to_numpy(),
            "system_b": pairs["system_b"].to_numpy(),
            "aspect": pairs["aspect"].to_numpy(),
            "rater": np.where(rng.random(len(pairs)) < 0.5, "expert_1", "crowd_2"),
            "kind": "preference",
            "value": np.where(rng.random(len(pairs)) < 0.8, np.sign(pairs["preference"].to_numpy()), 0.0),
        }
    )
    return pd.concat([scores, prefs], ignore_index=True)


def _sampled(n_items: int, seed: int, judges: tuple[str, ...], samples: int = 3) -> pd.DataFrame:
    """Single and pairwise judgments with ``samples`` self-consistency samples per key, some failed."""
    rng = np.random.default_rng(seed)
    systems = ["alpha-gpt", "beta-claude", "gamma", "delta"]
    quality = {"alpha-gpt": 1.0, "beta-claude": 0.4, "gamma": 0.0, "delta": -0.6}
    rows: list[dict[str, Any]] = []
    for i in range(n_items):
        item = f"it-{i:04d}"
        for judge_i, judge in enumerate(judges):
            for system in systems:
                for aspect in ("coherence", "engagingness"):
                    base = 5.5 + 1.5 * quality[system] + 0.5 * judge_i + rng.normal(0, 1.5)
                    for s in range(samples):
                        status = rng.choice(["done", "done", "done", "done", "done", "done", "failed", "unparseable"])
                        score = float(np.clip(np.round(base + rng.normal(0, 0.8)), 1, 10))
                        rows.append(
                            {
                                "item_id": item,
                                "mode": "single",
                                "system_a": system,
                                "aspect": aspect,
                                "judge": judge,
                                "rubric_id": "r-single",
                                "sample_index": s,
                                "status": status,
                                "score": score if status == "done" else np.nan,
                                "scale_min": 1.0,
                                "scale_max": 10.0,
                                "len_a": float(rng.integers(50, 900)),
                                "input_tokens": int(rng.integers(100, 900)),
                                "output_tokens": int(rng.integers(5, 50)),
                                "cost_usd": float(rng.random() / 1000),
                                "latency_ms": float(rng.gamma(2.0, 300.0)),
                                "cached": bool(rng.random() < 0.1),
                            }
                        )
            for a, b in combinations(systems, 2):
                latent = quality[a] - quality[b] + rng.normal(0, 0.7)
                for order in ("ab", "ba"):
                    for s in range(samples if i % 3 else 1):
                        if rng.random() < 0.05:
                            continue  # an order not judged
                        sig = latent + rng.normal(0, 0.6) + (0.2 if order == "ab" else -0.2)
                        pref = float(np.select([sig > 1, sig > 0.3, sig >= -0.3, sig >= -1], [2, 1, 0, -1], -2))
                        status = "done" if rng.random() < 0.93 else "failed"
                        rows.append(
                            {
                                "item_id": item,
                                "mode": "pairwise",
                                "system_a": a,
                                "system_b": b,
                                "aspect": "overall",
                                "judge": judge,
                                "rubric_id": "r-pair",
                                "order": order,
                                "sample_index": s,
                                "status": status,
                                "preference": pref if status == "done" else np.nan,
                                "len_a": float(rng.integers(50, 900)),
                                "len_b": float(rng.integers(50, 900)),
                                "input_tokens": int(rng.integers(100, 900)),
                                "output_tokens": int(rng.integers(5, 50)),
                                "cost_usd": float(rng.random() / 1000),
                                "latency_ms": float(rng.gamma(2.0, 300.0)),
                            }
                        )
    frame = pd.DataFrame(rows)
    frame["run_id"] = "golden"
    frame["judgment_id"] = np.arange(len(frame))
    return frame


def _imported_and_reference(seed: int) -> pd.DataFrame:
    """Three judges, one of them imported (a ``source``), plus the reference metrics' pseudo-judge."""
    frame = _sampled(40, seed, ("openai:gpt-4o", "anthropic:claude-3-5-sonnet", "ext-judge"), samples=1)
    ext = (frame["judge"] == "ext-judge").to_numpy()
    frame["source"] = np.array(["sha256-of-file" if e else None for e in ext], dtype=object)
    ref = frame[(frame["judge"] == "openai:gpt-4o") & (frame["mode"] == "single") & (frame["aspect"] == "coherence")]
    ref = ref.assign(judge="reference", aspect="f1", score=np.round(np.random.default_rng(seed).random(len(ref)), 3))
    ref = ref.assign(scale_min=np.nan, scale_max=np.nan, status="done", cost_usd=0.0)
    out = pd.concat([frame, ref], ignore_index=True)
    out["judgment_id"] = np.arange(len(out))
    return out


def _small() -> pd.DataFrame:
    """A handful of items: one-item groups, all-equal scores, a system pair never compared."""
    return pd.DataFrame(
        {
            "item_id": ["1", "1", "2", "2", "3", "3", "1", "1", "2", "4"],
            "mode": ["single"] * 6 + ["pairwise"] * 4,
            "system_a": ["A", "B", "A", "B", "A", "C", "A", "A", "A", "C"],
            "system_b": [None] * 6 + ["B", "B", "B", "D"],
            "aspect": "coherence",
            "judge": "j",
            "order": [None] * 6 + ["ab", "ba", "ab", "ab"],
            "status": ["done"] * 9 + ["failed"],
            "score": [7.0, 5.0, 7.0, 5.0, 7.0, 9.0, np.nan, np.nan, np.nan, np.nan],
            "preference": [np.nan] * 6 + [2.0, -1.0, 1.0, np.nan],
            "scale_min": 1.0,
            "scale_max": 10.0,
            "len_a": [100.0, 200.0, 120.0, 220.0, 130.0, 90.0, 100.0, 100.0, 300.0, 50.0],
            "len_b": [np.nan] * 6 + [150.0, 150.0, 80.0, 60.0],
        }
    )


CASES: dict[str, Callable[[], Case]] = {
    "synthetic_6000": lambda: (synthetic_judgments(6000, seed=1), None, {"n_boot": 200, "seed": 0}),
    "synthetic_20000_ci90": lambda: (synthetic_judgments(20_000, seed=3), None, {"n_boot": 300, "seed": 7, "ci": 0.9}),
    "synthetic_pairwise_only": lambda: (
        synthetic_judgments(4000, seed=2, single_fraction=0.0),
        None,
        {"n_boot": 150, "seed": 1},
    ),
    "synthetic_single_only_no_panel": lambda: (
        synthetic_judgments(3000, seed=4, single_fraction=1.0),
        None,
        {"n_boot": 100, "seed": 2, "panel": {"enabled": False}},
    ),
    "sampled_ratings": lambda: (
        (f := _sampled(60, 5, ("openai:gpt-4o", "anthropic:claude-3-5-sonnet"))),
        _ratings_for(f, 5),
        {"n_boot": 200, "seed": 3},
    ),
    "sampled_ratings_prefix_median_panel": lambda: (
        (f := _sampled(50, 6, ("openai:gpt-4o", "anthropic:claude-3-5-sonnet", "llama-judge"))),
        _ratings_for(f, 6),
        {
            "n_boot": 120,
            "seed": 4,
            "human_prefix": "expert_",
            "panel": {"aggregate": "median", "quorum": 3},
        },
    ),
    "imported_and_reference": lambda: (_imported_and_reference(8), None, {"n_boot": 100, "seed": 5}),
    "small_groups": lambda: (_small(), None, {"n_boot": 50, "seed": 0}),
}
