"""The Compare page: which runs can be compared and which pair to start with, and the score and win-rate deltas between
two runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dashboard.analysis.frames import frame

_INCOMPLETE = ("partial", "failed")
DELTA_COLUMNS = [
    "system",
    "aspect",
    "n_items",
    "baseline",
    "candidate",
    "delta",
    "ci_low",
    "ci_high",
    "n_worse",
    "n_better",
]
WORSE_COLUMNS = ["item_id", "system", "aspect", "baseline", "candidate", "delta"]


def comparable(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two runs can share scores only if they share a mode (a single-mode run has no pairwise verdicts)."""
    return bool(set(a.get("mode") or []) & set(b.get("mode") or []))


def default_pair(runs: Sequence[Mapping[str, Any]], current: str | None) -> tuple[int, int]:
    """(candidate, baseline) indexes into ``runs`` (newest first): the selected run against the most recent run
    comparable with it; without one, the two most recent comparable runs; else the two newest. A baseline is chosen
    among the runs that did not end partial or failed first (a half-judged baseline compares little)."""
    ids = [str(r["id"]) for r in runs]
    whole = [i for i, r in enumerate(runs) if str(r.get("outcome")) not in _INCOMPLETE]
    rest = [i for i in range(len(runs)) if i not in whole]
    if current in ids:
        cand = ids.index(current)
        for i in whole + rest:
            if i != cand and comparable(runs[cand], runs[i]):
                return cand, i
    for pool in (whole, rest):
        for i in range(len(runs)):
            for j in pool:
                if j > i and comparable(runs[i], runs[j]):
                    return i, j
    return 0, 1


def _item_means(items: pd.DataFrame) -> pd.DataFrame:
    """Average judges: one (item, system, aspect) score on a 0-100-comparable raw scale."""
    if items.empty:
        return frame([], ["item_id", "system", "aspect", "score"])
    return items.groupby(["item_id", "system", "aspect"], sort=True)["score"].mean().reset_index()


def compare_scores(
    base: pd.DataFrame, cand: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """Per (system, aspect): candidate - baseline mean on the shared items, paired bootstrap CI over items (from two
    runs' ``judge_item_scores``; the page reads the API's ``/score-deltas``, which computes the same figures from the
    database's per-key sums: ``judge_api.stats.compare``, held to this by tests/api/test_comparisons.py)."""
    columns = DELTA_COLUMNS
    merged = _item_means(base).merge(_item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    rng = np.random.default_rng(seed)
    rows = []
    alpha = (1 - ci) / 2
    for (system, aspect), g in merged.groupby(["system", "aspect"], sort=True):
        diff = (g["score_cand"] - g["score_base"]).to_numpy(dtype="float64")
        low = high = None
        if len(diff) > 1 and n_boot > 0:
            idx = rng.integers(0, len(diff), size=(n_boot, len(diff)))
            boots = diff[idx].mean(axis=1)
            low, high = float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))
        rows.append(
            {
                "system": system,
                "aspect": aspect,
                "n_items": len(diff),
                "baseline": float(g["score_base"].mean()),
                "candidate": float(g["score_cand"].mean()),
                "delta": float(diff.mean()),
                "ci_low": low,
                "ci_high": high,
                "n_worse": int((diff < 0).sum()),
                "n_better": int((diff > 0).sum()),
            }
        )
    return frame(rows, columns)


def worse_items(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """(item, system, aspect) whose score dropped from baseline to candidate, biggest drop first."""
    columns = WORSE_COLUMNS
    merged = _item_means(base).merge(_item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    merged = merged.rename(columns={"score_base": "baseline", "score_cand": "candidate"})
    merged["delta"] = merged["candidate"] - merged["baseline"]
    return merged[merged["delta"] < 0].sort_values(["delta", "item_id"])[columns].reset_index(drop=True)


def compare_preferences(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, aspect): candidate - baseline win rate, CI from the two Wilson half-widths combined."""
    columns = ["system_a", "system_b", "aspect", "baseline", "candidate", "delta", "ci_low", "ci_high"]
    keys = ["system_a", "system_b", "aspect"]
    if base.empty or cand.empty:
        return frame([], columns)

    def prep(df: pd.DataFrame) -> pd.DataFrame:
        d = df[df["n"].fillna(0) > 0].copy()
        for c in ("win_rate", "win_rate_ci_low", "win_rate_ci_high"):
            d[c] = pd.to_numeric(d[c], errors="coerce")
        d["half"] = (d["win_rate_ci_high"] - d["win_rate_ci_low"]) / 2
        return d.groupby(keys).agg(rate=("win_rate", "mean"), half=("half", "mean")).reset_index()

    merged = prep(base).merge(prep(cand), on=keys, suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    merged["baseline"], merged["candidate"] = merged["rate_base"], merged["rate_cand"]
    merged["delta"] = merged["candidate"] - merged["baseline"]
    half = np.sqrt(merged["half_base"] ** 2 + merged["half_cand"] ** 2)
    merged["ci_low"], merged["ci_high"] = merged["delta"] - half, merged["delta"] + half
    return merged[columns]
