"""Pure pandas: the report's ``memory_audit`` section (docs/facts.md) as the Memory audit page's tables and chart
frames (no Streamlit here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from dashboard.analysis import frame, section_list

FIGURES = {"precision": "precision", "recall": "recall", "f1": "F1"}
ERROR_TYPES = {"fabricated": "fabricated", "wrong_relationship": "wrong relationship", "missing": "missing"}
KEY_COLUMNS = ["system", "judge", "rubric_id"]
FIGURE_COLUMNS = [
    *KEY_COLUMNS,
    "n_items",
    "n_parsed",
    "n_unparseable",
    "n_failed",
    *[f"{name}{suffix}" for name in FIGURES for suffix in ("", "_ci_low", "_ci_high")],
]
ERROR_COLUMNS = [
    *KEY_COLUMNS,
    "errors",
    *[f"{kind}{suffix}" for kind in ERROR_TYPES for suffix in ("", "_share", "_share_ci_low", "_share_ci_high")],
]


def audit_systems(report: Mapping[str, Any] | None, judge: str | None = None) -> list[dict[str, Any]]:
    """The section's per-system records (one judge's, or every judge's with None)."""
    section = (report or {}).get("memory_audit")
    rows = section_list(section if isinstance(section, Mapping) else None, "systems")
    return [r for r in rows if judge is None or r.get("judge") == judge]


def judges(report: Mapping[str, Any] | None) -> list[str]:
    return sorted({str(r.get("judge")) for r in audit_systems(report)})


def figures_table(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """Per system: the audit counts and precision / recall / F1 with their CIs."""
    return frame(audit_systems(report, judge), FIGURE_COLUMNS)[FIGURE_COLUMNS]


def errors_table(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """Per system: the error counts and each error type's share of the errors with its CI."""
    return frame(audit_systems(report, judge), ERROR_COLUMNS)[ERROR_COLUMNS]


def figures_long(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """One row per system x figure (system, judge, figure, value, ci_low, ci_high, n_items): the chart's input."""
    rows = [
        {
            "system": r.get("system"),
            "judge": r.get("judge"),
            "figure": label,
            "value": r.get(name),
            "ci_low": r.get(f"{name}_ci_low"),
            "ci_high": r.get(f"{name}_ci_high"),
            "n_items": r.get("n_items"),
        }
        for r in audit_systems(report, judge)
        for name, label in FIGURES.items()
    ]
    return frame(rows, ["system", "judge", "figure", "value", "ci_low", "ci_high", "n_items"])


def shares_long(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """One row per system x error type with errors (system, judge, error_type, count, share): the chart's input."""
    rows = [
        {
            "system": r.get("system"),
            "judge": r.get("judge"),
            "error_type": label,
            "count": r.get(kind),
            "share": r.get(f"{kind}_share"),
        }
        for r in audit_systems(report, judge)
        for kind, label in ERROR_TYPES.items()
        if r.get(f"{kind}_share") is not None
    ]
    return frame(rows, ["system", "judge", "error_type", "count", "share"])


def no_audit_text(report: Mapping[str, Any] | None, audit_rubric_in_run: bool) -> str | None:
    """Why the page has no figure to show (None when some system has a parsed audit): no memory-audit judgment at
    all, none finished yet, or every one unparseable or failed."""
    rows = audit_systems(report)
    if any(int(r.get("n_items") or 0) > 0 for r in rows):
        return None
    if rows:
        unparseable = sum(int(r.get("n_unparseable") or 0) - int(r.get("n_failed") or 0) for r in rows)
        failed = sum(int(r.get("n_failed") or 0) for r in rows)
        total = unparseable + failed
        parts = ", ".join(f"{n:,} {what}" for n, what in ((unparseable, "unparseable"), (failed, "failed")) if n)
        return (
            f"This run has {total:,} memory-audit judgment{'s' if total != 1 else ''}, but none gave a parsed audit "
            f"({parts}) — see the **Item explorer** for the judge's replies and errors."
        )
    if audit_rubric_in_run:
        return (
            "This run's memory-audit judgments are not finished (pending, running or cancelled) — follow them on the "
            "**Runs** page."
        )
    return (
        "No memory-audit judgments in this run. Judge the systems' generated memories with the memory-audit rubric "
        "(`dialogue-judge submit memories.jsonl --rubric memory-audit --judge ...`, see docs/facts.md) to see their "
        "fact-level precision, recall, F1 and error types here."
    )
