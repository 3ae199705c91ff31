"""Synthetic judgments frames with planted effects, for tests, benchmarks and demos.

``synthetic_judgments(n_rows)`` returns a contract-conforming judgments frame of exactly ``n_rows``
rows, a mix of single-mode rows (every item x system x aspect x judge, 1-100 scale) and pairwise rows
(every item x system pair x both orders x judge).  Planted effects: system quality
``SYSTEM_QUALITY`` (single scores rise 8 points per quality unit; pairwise preferences follow the
quality difference), a small first-position advantage in pairwise verdicts, and a fraction of failed /
unparseable / pending rows.  Fully vectorised and seeded.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from judge_api.stats import frames as F

SYSTEM_QUALITY: dict[str, float] = {
    "gpt-4o-mini-rsum": 1.0,
    "claude-3-haiku": 0.5,
    "llama-3.1-8b": 0.0,
    "qwen2.5-7b": -0.5,
}
ASPECTS = ("engagingness", "coherence", "consistency")
JUDGES = ("openai:gpt-4o", "anthropic:claude-3-5-sonnet")


def _status(rng: np.random.Generator, n: int, failed: float, unparseable: float, pending: float) -> np.ndarray:
    u = rng.random(n)
    return np.select(
        [u < failed, u < failed + unparseable, u < failed + unparseable + pending],
        [F.FAILED, F.UNPARSEABLE, F.PENDING],
        default=F.DONE,
    ).astype(object)


def synthetic_judgments(
    n_rows: int,
    *,
    seed: int = 0,
    single_fraction: float = 0.5,
    failed: float = 0.02,
    unparseable: float = 0.01,
    pending: float = 0.005,
    first_position_bonus: float = 0.15,
) -> pd.DataFrame:
    """A validated judgments frame of exactly ``n_rows`` rows (see the module docstring)."""
    rng = np.random.default_rng(seed)
    systems = np.array(list(SYSTEM_QUALITY), dtype=object)
    quality = np.array(list(SYSTEM_QUALITY.values()))
    aspects = np.array(ASPECTS, dtype=object)
    judges = np.array(JUDGES, dtype=object)
    s, a, j = len(systems), len(aspects), len(judges)
    n_single = round(n_rows * single_fraction)
    n_pair = n_rows - n_single
    frames = []

    per_item = s * a * j
    n_items = -(-n_single // per_item) if n_single else 0
    if n_single:
        idx = np.arange(n_items * per_item)[:n_single]
        item, rest = np.divmod(idx, per_item)
        sys_i, rest = np.divmod(rest, a * j)
        asp_i, jud_i = np.divmod(rest, j)
        noise = rng.normal(0.0, 12.0, n_single)
        score = np.clip(np.round(60.0 + 8.0 * quality[sys_i] + 3.0 * jud_i + noise), 1, 100)
        status = _status(rng, n_single, failed, unparseable, pending)
        frames.append(
            pd.DataFrame(
                {
                    F.ITEM_ID: np.char.add("item-", item.astype(str)),
                    F.MODE: F.SINGLE,
                    F.SYSTEM_A: systems[sys_i],
                    F.SYSTEM_B: None,
                    F.ASPECT: aspects[asp_i],
                    F.JUDGE: judges[jud_i],
                    F.ORDER: None,
                    F.STATUS: status,
                    F.SCORE: np.where(status == F.DONE, score, np.nan),
                    F.SCALE_MIN: 1.0,
                    F.SCALE_MAX: 100.0,
                    F.LEN_A: rng.lognormal(6.0, 0.5, n_single).round(),
                }
            )
        )
    if n_pair:
        pairs = np.array(list(combinations(range(s), 2)))
        per_item_p = len(pairs) * 2 * j
        n_items_p = -(-n_pair // per_item_p)
        idx = np.arange(n_items_p * per_item_p)[:n_pair]
        item, rest = np.divmod(idx, per_item_p)
        pair_i, rest = np.divmod(rest, 2 * j)
        order_i, jud_i = np.divmod(rest, j)
        ia, ib = pairs[pair_i, 0], pairs[pair_i, 1]
        # Per (item, pair) latent preference shared by both orders, plus per-verdict noise.
        latent = (quality[ia] - quality[ib]) + rng.normal(0.0, 0.8, n_items_p * len(pairs))[item * len(pairs) + pair_i]
        shown_first_a = order_i == 0
        signal = latent + rng.normal(0.0, 0.5, n_pair) + np.where(shown_first_a, 1.0, -1.0) * first_position_bonus
        pref = np.select([signal > 1.0, signal > 0.3, signal >= -0.3, signal >= -1.0], [2.0, 1.0, 0.0, -1.0], -2.0)
        outcome = np.select([pref >= 2, pref <= -2], [F.WIN, F.LOSS], F.TIE).astype(object)
        status = _status(rng, n_pair, failed, unparseable, pending)
        done = status == F.DONE
        frames.append(
            pd.DataFrame(
                {
                    F.ITEM_ID: np.char.add("pair-item-", item.astype(str)),
                    F.MODE: F.PAIRWISE,
                    F.SYSTEM_A: systems[ia],
                    F.SYSTEM_B: systems[ib],
                    F.ASPECT: "overall",
                    F.JUDGE: judges[jud_i],
                    F.ORDER: np.where(shown_first_a, F.ORDER_AB, F.ORDER_BA).astype(object),
                    F.STATUS: status,
                    F.PREFERENCE: np.where(done, pref, np.nan),
                    F.OUTCOME: pd.Series(outcome).where(done, None).to_numpy(),
                    F.LEN_A: rng.lognormal(6.0, 0.5, n_pair).round(),
                    F.LEN_B: rng.lognormal(6.0, 0.5, n_pair).round(),
                }
            )
        )
    if not frames:
        return F.empty_judgments()
    df = pd.concat(frames, ignore_index=True)
    n = len(df)
    df[F.RUN_ID] = "synthetic"
    df[F.JUDGMENT_ID] = np.arange(n)
    df[F.RUBRIC_ID] = "synthetic-rubric"
    df[F.SAMPLE_INDEX] = 0
    finished = df[F.STATUS].to_numpy() != F.PENDING
    df[F.INPUT_TOKENS] = np.where(finished, rng.integers(500, 2000, n), 0)
    df[F.OUTPUT_TOKENS] = np.where(finished, rng.integers(5, 200, n), 0)
    df[F.LATENCY_MS] = np.where(finished, rng.gamma(2.0, 400.0, n), np.nan)
    df[F.CACHED] = finished & (rng.random(n) < 0.1)
    df[F.COST_USD] = np.where(df[F.CACHED], 0.0, (df[F.INPUT_TOKENS] * 2.5 + df[F.OUTPUT_TOKENS] * 10.0) / 1e6)
    return F.validate_judgments(df)
