"""The Agreement page's tables from the report: judges (and the panel) vs humans, sets of judges, inter-judge
agreement, preference and score agreement, Krippendorff's alpha, the judge-by-human confusions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from dashboard.analysis.frames import frame

JUDGES_HUMAN_COLUMNS = [
    "judge",
    "aspect",
    "n_scores",
    "spearman",
    "kendall",
    "qwk",
    "n_votes",
    "s1",
    "s2",
    "kappa",
    "cost_usd",
]


def judges_human_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Judges (and the panel, and the reference metrics) x aspects: agreement with humans beside the cost."""
    judges = ((report or {}).get("agreement") or {}).get("judges") or {}
    return frame(judges.get("matrix") or [], JUDGES_HUMAN_COLUMNS)


def judge_sets_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Every set of the panel's judges aggregated like the panel, vs humans, cheapest first."""
    judges = ((report or {}).get("agreement") or {}).get("judges") or {}
    rows = [{**r, "judges": " + ".join(r.get("judges") or [])} for r in judges.get("sets") or []]
    return frame(rows, ["judges", *JUDGES_HUMAN_COLUMNS[1:]])


def inter_judge_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """The panel's inter-judge agreement: alpha over all members and each judge pair, per aspect."""
    inter = ((report or {}).get("panel") or {}).get("inter_judge") or {}
    rows: list[dict[str, Any]] = []
    for r in inter.get("scores") or []:
        rows.append(
            {
                "aspect": r["aspect"],
                "mode": "scores",
                "judges": "all",
                "n": r["n_units"],
                "alpha": r["alpha_interval"],
                "alpha (ordinal)": r["alpha_ordinal"],
            }
        )
        rows += [
            {
                "aspect": r["aspect"],
                "mode": "scores",
                "judges": f"{p['judge_a']} ~ {p['judge_b']}",
                "n": p["n"],
                "spearman": p["spearman"],
                "QWK": p["qwk"],
            }
            for p in r.get("pairs") or []
        ]
    for r in inter.get("preferences") or []:
        rows.append(
            {"aspect": r["aspect"], "mode": "pairwise", "judges": "all", "n": r["n_units"], "alpha": r["alpha_nominal"]}
        )
        rows += [
            {
                "aspect": r["aspect"],
                "mode": "pairwise",
                "judges": f"{p['judge_a']} ~ {p['judge_b']}",
                "n": p["n"],
                "agreement": p["agreement"],
                "kappa": p["kappa"],
            }
            for p in r.get("pairs") or []
        ]
    return frame(
        rows, ["aspect", "mode", "judges", "n", "alpha", "alpha (ordinal)", "spearman", "QWK", "agreement", "kappa"]
    )


def _agreement(report: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (report or {}).get("agreement") or {}


def pref_agreement_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    prefs = _agreement(report).get("preferences") or {}
    rows = []
    for who, key in (("judge vs human", "judge_vs_human"), ("human vs human", "human_vs_human")):
        for r in prefs.get(key) or []:
            s1, s2 = r.get("s1") or {}, r.get("s2") or {}
            rows.append(
                {
                    "comparison": who,
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge", "-"),
                    "S1 agree": s1.get("agree"),
                    "S1 total": s1.get("total"),
                    "S1 rate": s1.get("rate"),
                    "S2 agree": s2.get("agree"),
                    "S2 total": s2.get("total"),
                    "S2 rate": s2.get("rate"),
                    "kappa S1": r.get("kappa_s1"),
                    "kappa S2": r.get("kappa_s2"),
                    "keys": r.get("n_keys"),
                }
            )
    return frame(
        rows,
        [
            "comparison",
            "aspect",
            "judge",
            "S1 agree",
            "S1 total",
            "S1 rate",
            "S2 agree",
            "S2 total",
            "S2 rate",
            "kappa S1",
            "kappa S2",
            "keys",
        ],
    )


def score_agreement_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        list(_agreement(report).get("scores") or []),
        [
            "aspect",
            "judge",
            "n",
            "n_human_raters",
            "spearman",
            "kendall",
            "pearson",
            "qwk",
            "system_spearman",
            "system_kendall",
        ],
    )


def alpha_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        list(_agreement(report).get("alpha") or []),
        [
            "aspect",
            "n_units",
            "n_raters_human",
            "n_judges",
            "alpha_interval_humans",
            "alpha_ordinal_humans",
            "alpha_interval_all",
            "alpha_ordinal_all",
        ],
    )


def pref_confusions(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{aspect, judge, labels, matrix}]`` judge (rows) x human (columns) vote counts."""
    prefs = _agreement(report).get("preferences") or {}
    out = []
    for r in prefs.get("judge_vs_human") or []:
        confusion = r.get("confusion") or {}
        matrix = confusion.get("judge_by_human")
        if matrix:
            out.append(
                {
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge"),
                    "labels": list(confusion.get("labels") or ["b wins", "tie", "a wins"]),
                    "matrix": matrix,
                }
            )
    return out


SCORES_TAB, PREFERENCES_TAB, JUDGES_TAB = "Scores", "Preferences", "Judges"


def agreement_tabs(report: Mapping[str, Any] | None) -> tuple[list[str], str]:
    """The Human agreement page's tabs and the one it opens on. Judges appears when there is a judges-vs-humans
    matrix or a panel's inter-judge agreement to show; the page opens on Scores when the judge and the humans share
    scores, else on Preferences when they share votes, else on Scores (which says what is missing)."""
    labels = [SCORES_TAB, PREFERENCES_TAB]
    if not judges_human_frame(report).empty or not inter_judge_frame(report).empty:
        labels.append(JUDGES_TAB)
    agreement = _agreement(report)
    votes = (agreement.get("preferences") or {}).get("judge_vs_human")
    return labels, PREFERENCES_TAB if votes and not agreement.get("scores") else SCORES_TAB
