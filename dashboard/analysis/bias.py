"""The Bias page's tables: each judge's headline bias figures and the report's flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from dashboard.analysis.frames import frame


def bias_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per judge with the headline bias figures."""
    per_judge = ((report or {}).get("bias") or {}).get("per_judge") or {}
    rows = []
    for judge, rec in per_judge.items():
        rec = rec or {}
        pos, swap, length = rec.get("position") or {}, rec.get("swap") or {}, rec.get("length") or {}
        use, fail, selfp = (
            rec.get("score_use") or {},
            rec.get("failures") or {},
            rec.get("self_preference") or {},
        )
        rows.append(
            {
                "judge": judge,
                "p_first_wins": pos.get("p_first_wins"),
                "position_n": pos.get("n"),
                "swap_flip_rate": swap.get("rate"),
                "swap_n": swap.get("n"),
                "p_longer_wins": length.get("p_longer_wins"),
                "length_n": length.get("n_pairs"),
                "score_length_spearman": length.get("score_length_spearman"),
                "scale_used": use.get("distinct_fraction"),
                "entropy_norm": use.get("entropy_norm"),
                "unparseable_rate": fail.get("unparseable_rate"),
                "failure_rate": fail.get("failure_rate"),
                "self_pref_score_diff": selfp.get("score_diff_scaled"),
                "self_pref_win_rate": selfp.get("win_rate_same"),
            }
        )
    return frame(
        rows,
        [
            "judge",
            "p_first_wins",
            "position_n",
            "swap_flip_rate",
            "swap_n",
            "p_longer_wins",
            "length_n",
            "score_length_spearman",
            "scale_used",
            "entropy_norm",
            "unparseable_rate",
            "failure_rate",
            "self_pref_score_diff",
            "self_pref_win_rate",
        ],
    )


def flags_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    flags = ((report or {}).get("bias") or {}).get("flags") or []
    return frame([f for f in flags if isinstance(f, Mapping)], ["name", "value", "threshold", "message"])
