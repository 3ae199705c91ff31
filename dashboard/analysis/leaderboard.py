"""The Leaderboard page's tables: scores, their histograms, the paper's table, reference metrics, the ranking, paired
differences; the run's judges and what the panel's figures stand on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from dashboard.analysis.frames import frame, section_list

SCORE_COLUMNS = [
    "system",
    "aspect",
    "judge",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "ci_warning",
    "median",
    "std",
    "n_total",
    "n_done",
    "n_failed",
    "n_unparseable",
    "n_pending",
]
RANK_COLUMNS = [
    "aspect",
    "judge",
    "rank",
    "system",
    "elo",
    "elo_ci_low",
    "elo_ci_high",
    "ci_unbounded",
    "component",
    "strength",
    "n_comparisons",
    "wins",
    "ties",
    "losses",
]
PANEL = "panel"
REFERENCE = "reference"
METRIC_LABELS = {"f1": "F1", "bleu-1": "BLEU-1", "bleu-2": "BLEU-2", "bertscore": "BERTScore"}


def judges_of(report: Mapping[str, Any] | None) -> list[str]:
    counts = (report or {}).get("counts") or {}
    judges = counts.get("judges") or []
    if not judges:
        found = {r.get("judge") for name in ("scores", "preferences", "ranking") for r in section_list(report, name)}
        judges = sorted(j for j in found if j)
    judges = [str(j) for j in judges]
    if (report or {}).get("panel") and PANEL not in judges:
        judges.append(PANEL)  # the panel pseudo-judge: the run's judges aggregated (it has no stored rows)
    return judges


def panel_coverage_text(report: Mapping[str, Any] | None) -> str | None:
    """What the panel's figures stand on: its quorum and the units with a panel verdict (None without a panel)."""
    panel = (report or {}).get("panel") or {}
    coverage = panel.get("coverage") or {}
    if not panel or not coverage.get("n_units"):
        return None
    n, total = int(coverage["n_verdicts"]), int(coverage["n_units"])
    return (
        f"Panel: quorum {panel.get('quorum')} of {len(panel.get('members') or [])} judges; "
        f"coverage {n}/{total} units ({100 * n / total:.1f} %). Units judged by fewer members "
        f"({coverage.get('n_below_quorum', 0)}) or split evenly with a member missing ({coverage.get('n_split', 0)}) "
        "are left out of the panel's scores, comparisons and ranking."
    )


def scores_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    rows = [{k: v for k, v in r.items() if k != "histogram"} for r in section_list(report, "scores")]
    return frame(rows, SCORE_COLUMNS)


def histogram_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Long histogram rows (system, aspect, judge, bin_start, bin_end, count) from the scores section."""
    rows: list[dict[str, Any]] = []
    for r in section_list(report, "scores"):
        hist = r.get("histogram") or {}
        edges, counts = hist.get("edges") or [], hist.get("counts") or []
        for i, count in enumerate(counts):
            if i + 1 < len(edges):
                rows.append(
                    {
                        "system": r.get("system"),
                        "aspect": r.get("aspect"),
                        "judge": r.get("judge"),
                        "bin_start": edges[i],
                        "bin_end": edges[i + 1],
                        "count": count,
                    }
                )
    return frame(rows, ["system", "aspect", "judge", "bin_start", "bin_end", "count"])


def paper_frame(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """The seed paper's table: System x F1/BLEU-1/BLEU-2 (reference metrics, when the items have references) x
    Engagingness/Coherence/Consistency/... + Average of the judge's aspects (one judge; the ``reference``
    pseudo-judge: the metrics alone)."""
    table = (report or {}).get("paper_table") or {}
    metrics = [str(m) for m in table.get("metrics") or []]
    aspects = [] if judge == REFERENCE else [str(a) for a in table.get("aspects") or []]
    rows = []
    seen: set[Any] = set()
    for r in table.get("rows") or []:
        if judge == REFERENCE:
            if r.get("system") in seen:
                continue
            seen.add(r.get("system"))
        elif judge is not None and r.get("judge") != judge:
            continue
        values = r.get("values") or {}
        row: dict[str, Any] = {"Judge": judge if judge == REFERENCE else r.get("judge"), "System": r.get("system")}
        row.update({METRIC_LABELS.get(m, m): (r.get("metrics") or {}).get(m) for m in metrics})
        row.update({f"{METRIC_LABELS.get(m, m)} n": (r.get("metrics_n") or {}).get(m) for m in metrics})
        row.update({a.capitalize(): values.get(a) for a in aspects})
        row.update({f"{a.capitalize()} n": (r.get("n") or {}).get(a) for a in aspects})
        row["Average"] = r.get("average") if judge != REFERENCE else None
        row["Items"] = r.get("n_items")
        rows.append(row)
    columns = [
        "Judge",
        "System",
        *[METRIC_LABELS.get(m, m) for m in metrics],
        *[a.capitalize() for a in aspects],
        "Average",
        "Items",
        *[f"{METRIC_LABELS.get(m, m)} n" for m in metrics],
        *[f"{a.capitalize()} n" for a in aspects],
    ]
    df = frame(rows, columns)
    return df.sort_values("Average", ascending=False, na_position="last").reset_index(drop=True) if len(df) else df


def reference_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """The reference metrics per system (mean over items, 95% bootstrap CI): the ``reference`` pseudo-judge's scores."""
    rows = [
        {
            "System": r.get("system"),
            "Metric": METRIC_LABELS.get(str(r.get("aspect")), r.get("aspect")),
            "Mean": r.get("mean"),
            "CI low": r.get("ci_low"),
            "CI high": r.get("ci_high"),
            "Items": r.get("n"),
            "CI note": r.get("ci_warning") or "",
        }
        for r in section_list(report, "scores")
        if r.get("judge") == REFERENCE
    ]
    return frame(rows, ["System", "Metric", "Mean", "CI low", "CI high", "Items", "CI note"])


def ranking_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(section_list(report, "ranking"), RANK_COLUMNS)


def components_text(ranking: pd.DataFrame) -> str | None:
    """When the ranking has systems never linked by comparisons (several ``component`` values): which groups were
    fitted apart, so strengths from different groups are not read as one scale. None for one group."""
    if ranking.empty or "component" not in ranking or ranking["component"].nunique() < 2:
        return None
    groups = [
        ", ".join(str(s) for s in g.sort_values("rank")["system"]) for _, g in ranking.groupby("component", sort=True)
    ]
    return (
        f"{len(groups)} groups of systems were never compared with each other ({'; '.join(groups)}): each group is "
        "ranked on its own (rank 1 in each), and strengths from different groups are not comparable."
    )


def paired_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        section_list(report, "paired"),
        [
            "aspect",
            "judge",
            "system_x",
            "system_y",
            "n_pairs",
            "mean_x",
            "mean_y",
            "mean_diff",
            "ci_low",
            "ci_high",
            "ci_warning",
            "p_value",
        ],
    )
