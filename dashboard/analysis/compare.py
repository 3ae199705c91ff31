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
