"""The Win/tie/loss page's tables: the pairwise preferences, turned towards one system, as stacked bars and a win-rate
matrix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from dashboard.analysis.frames import frame, pair_label, section_list

PREF_COLUMNS = [
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "n",
    "wins",
    "ties",
    "losses",
    "ties_inconsistent",
    "win_rate_pct",
    "tie_rate_pct",
    "loss_rate_pct",
    "win_rate",
    "win_rate_ci_low",
    "win_rate_ci_high",
    "mean_preference",
]


def preferences_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    rows = [{k: v for k, v in r.items() if k != "preference_distribution"} for r in section_list(report, "preferences")]
    return frame(rows, PREF_COLUMNS)


def orient(prefs: pd.DataFrame, focus: str | None) -> pd.DataFrame:
    """Pairs that involve ``focus`` turned so ``focus`` is system_a (wins/losses and rates swapped)."""
    if focus is None or prefs.empty:
        return prefs.copy()
    df = prefs[(prefs["system_a"] == focus) | (prefs["system_b"] == focus)].copy()
    flip = df["system_b"] == focus
    swaps = [("system_a", "system_b"), ("wins", "losses"), ("win_rate_pct", "loss_rate_pct")]
    for left, right in swaps:
        df.loc[flip, [left, right]] = df.loc[flip, [right, left]].to_numpy(copy=True)
    for column in ("win_rate", "win_rate_ci_low", "win_rate_ci_high"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    low, high = df.loc[flip, "win_rate_ci_low"].copy(), df.loc[flip, "win_rate_ci_high"].copy()
    df.loc[flip, "win_rate"] = 1 - df.loc[flip, "win_rate"]
    df.loc[flip, "win_rate_ci_low"] = 1 - high
    df.loc[flip, "win_rate_ci_high"] = 1 - low
    df["mean_preference"] = pd.to_numeric(df["mean_preference"], errors="coerce")
    df.loc[flip, "mean_preference"] = -df.loc[flip, "mean_preference"]
    return df.reset_index(drop=True)


def wtl_long(prefs: pd.DataFrame) -> pd.DataFrame:
    """Long win/tie/loss percentages per pair (for the stacked bars), pairs with n > 0 only."""
    rows = []
    for r in prefs.to_dict(orient="records"):
        n = r.get("n") or 0
        if not n:
            continue
        label = pair_label(r["system_a"], r["system_b"])
        for outcome, count_col in (("win", "wins"), ("tie", "ties"), ("loss", "losses")):
            count = int(r.get(count_col) or 0)
            rows.append(
                {
                    "pair": label,
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge"),
                    "outcome": outcome,
                    "count": count,
                    "pct": 100.0 * count / n,
                    "n": n,
                }
            )
    return frame(rows, ["pair", "aspect", "judge", "outcome", "count", "pct", "n"])


def winrate_matrix(prefs: pd.DataFrame) -> pd.DataFrame:
    """Long (row, column, win_rate, n): win rate of ``row`` over ``column`` (both orientations)."""
    rows = []
    for r in prefs.to_dict(orient="records"):
        rate = r.get("win_rate")
        if rate is None or not r.get("n") or (isinstance(rate, float) and np.isnan(rate)):
            continue
        rows.append({"row": r["system_a"], "column": r["system_b"], "win_rate": float(rate), "n": r["n"]})
        rows.append({"row": r["system_b"], "column": r["system_a"], "win_rate": 1.0 - float(rate), "n": r["n"]})
    return frame(rows, ["row", "column", "win_rate", "n"])
