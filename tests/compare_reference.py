"""The Compare runs page's figures computed the way the dashboard computed them before issue 39, from two runs' whole
frames (``dashboard.analysis.judge_item_scores``): the reference that ``judge_api.stats.compare`` (the API's
``/score-deltas`` and ``/worse-items``, from the database's per-key sums) is held to, draw for draw."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dashboard.analysis.compare import DELTA_COLUMNS, WORSE_COLUMNS
from dashboard.analysis.frames import frame


def item_means(items: pd.DataFrame) -> pd.DataFrame:
    """Average judges: one (item, system, aspect) score on a 0-100-comparable raw scale."""
    if items.empty:
        return frame([], ["item_id", "system", "aspect", "score"])
    return items.groupby(["item_id", "system", "aspect"], sort=True)["score"].mean().reset_index()


def compare_scores(
    base: pd.DataFrame, cand: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """Per (system, aspect): candidate - baseline mean on the shared items, paired bootstrap CI over items (from two
    runs' ``judge_item_scores``)."""
    columns = DELTA_COLUMNS
    merged = item_means(base).merge(item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
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
    merged = item_means(base).merge(item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    merged = merged.rename(columns={"score_base": "baseline", "score_cand": "candidate"})
    merged["delta"] = merged["candidate"] - merged["baseline"]
    return merged[merged["delta"] < 0].sort_values(["delta", "item_id"])[columns].reset_index(drop=True)
