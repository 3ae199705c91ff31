"""Two runs of the same items compared (the dashboard's Compare runs page, issue 39): per (system, aspect) the
candidate - baseline mean on the items both runs scored with a paired bootstrap CI over items, and the (item, system,
aspect) keys whose score dropped.

The input is each run's single-mode done scores summed per (item, system, aspect, judge) (``total``, ``n``: what the
database groups, one row per key instead of one per judgment). The figures are those the dashboard computed from the
two runs' whole frames before (``tests.compare_reference``, over
``judge_item_scores``): a judge's score of an item is the mean over its samples, an item's score the mean over its
judges, and the bootstrap draws the same index matrix from the same seed, group after group in (system, aspect)
order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

SUM_COLUMNS = ["item_id", "system", "aspect", "judge", "total", "n"]
MEAN_KEYS = ["item_id", "system", "aspect"]
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
_GATHER_CELLS = 1 << 22
"""Bootstrap rows are averaged this many index cells at a time (32 MB of gathered scores), not all at once."""


def sums_frame(rows: Sequence[Sequence[object]]) -> pd.DataFrame:
    """The (item, system, aspect, judge, total, n) rows as a frame with stable types."""
    frame = pd.DataFrame(rows, columns=SUM_COLUMNS)
    for column in ("item_id", "system", "aspect", "judge"):
        frame[column] = frame[column].astype(object)
    frame["total"] = frame["total"].astype("float64")
    frame["n"] = frame["n"].astype("int64")
    return frame


def item_means(sums: pd.DataFrame) -> pd.DataFrame:
    """One score per (item, system, aspect), sorted by those keys: each judge's mean over its samples, averaged over
    the judges (the judges in name order, as the frame's group-by had them)."""
    if sums.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c != "score" else "float64") for c in [*MEAN_KEYS, "score"]})
    judges = sums.sort_values([*MEAN_KEYS, "judge"], kind="stable")
    judges = judges.assign(score=judges["total"] / judges["n"])
    return judges.groupby(MEAN_KEYS, sort=True)["score"].mean().reset_index()


def _paired(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    return base.merge(cand, on=MEAN_KEYS, suffixes=("_base", "_cand"))


def _bootstrap_means(diff: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """The means of ``n_boot`` resamples of ``diff``: the (n_boot, n) index matrix drawn a block of rows at a time
    (the generator fills rows in order, so the draws are those of one ``rng.integers(0, n, (n_boot, n))``) and each
    block averaged before the next is drawn: at most ``_GATHER_CELLS`` indices held (review r39g: the whole matrix
    was 8 GB at 200k items and n_boot 5,000)."""
    n = len(diff)
    out = np.empty(n_boot, dtype="float64")
    step = max(1, _GATHER_CELLS // n)
    for start in range(0, n_boot, step):
        rows = min(step, n_boot - start)
        out[start : start + rows] = diff[rng.integers(0, n, size=(rows, n))].mean(axis=1)
    return out


def score_deltas(
    base: pd.DataFrame, cand: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """Per (system, aspect): candidate - baseline mean on the shared items, paired bootstrap CI over items
    (``base`` / ``cand``: ``item_means``)."""
    merged = _paired(base, cand)
    if merged.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DELTA_COLUMNS})
    rng = np.random.default_rng(seed)
    rows = []
    alpha = (1 - ci) / 2
    for (system, aspect), g in merged.groupby(["system", "aspect"], sort=True):
        diff = (g["score_cand"] - g["score_base"]).to_numpy(dtype="float64")
        low = high = None
        if len(diff) > 1 and n_boot > 0:
            boots = _bootstrap_means(diff, rng, n_boot)
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
    return pd.DataFrame(rows, columns=DELTA_COLUMNS)


def worse_items(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """(item, system, aspect) whose score dropped from baseline to candidate, biggest drop first (then by item)."""
    merged = _paired(base, cand)
    if merged.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in WORSE_COLUMNS})
    merged = merged.rename(columns={"score_base": "baseline", "score_cand": "candidate"})
    merged["delta"] = merged["candidate"] - merged["baseline"]
    return merged[merged["delta"] < 0].sort_values(["delta", "item_id"])[WORSE_COLUMNS].reset_index(drop=True)
