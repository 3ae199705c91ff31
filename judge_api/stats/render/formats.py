"""A report as Markdown (pipe tables) or fixed-width plain text, and the agreement section alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judge_api.stats.render.calibrated import calibrated_tables
from judge_api.stats.render.judges import agreement_tables
from judge_api.stats.render.tables import report_tables


def _warnings(report: Mapping[str, Any]) -> list[str]:
    """What a reader must see before the figures (the reference metrics' tokens not fitting the references)."""
    section = report.get("reference_metrics") or {}
    return [str(section["warning"])] if section.get("warning") else []


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def report_to_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: one ``##`` section with a pipe table per part (empty parts say so)."""
    lines = ["# Evaluation report", ""]
    lines += [line for warning in _warnings(report) for line in (f"> **Warning:** {_escape(warning)}", "")]
    return _markdown(lines, report_tables(report))


def _markdown(lines: list[str], tables: list[tuple[str, list[str], list[list[str]]]]) -> str:
    for title, headers, rows in tables:
        lines += [f"## {title}", ""]
        if not rows:
            lines += ["_no data_", ""]
            continue
        lines.append("| " + " | ".join(_escape(h) for h in headers) + " |")
        lines.append("|" + "|".join("---" for _ in headers) + "|")
        lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _fixed(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    numeric = [all(_looks_numeric(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *[line(r) for r in rows]]


def _looks_numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return cell == "-"
    return True


def _plain(tables: list[tuple[str, list[str], list[list[str]]]]) -> str:
    lines: list[str] = []
    for title, headers, rows in tables:
        lines += [title, "=" * len(title)]
        lines += _fixed(headers, rows) if rows else ["(no data)"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report_to_table(report: Mapping[str, Any]) -> str:
    """The report as fixed-width plain text (one titled block per part)."""
    warnings = "".join(f"WARNING: {w}\n\n" for w in _warnings(report))
    return warnings + _plain(report_tables(report))


def agreement_to_table(agreement: Mapping[str, Any] | None) -> str:
    """The report's ``agreement`` section alone as fixed-width plain text."""
    if not agreement:
        return "No agreement figures: the run has no human ratings.\n"
    return _plain(agreement_tables(agreement))


NO_CALIBRATED = "No calibrated estimates: the run has no human ratings."


def _ci_label(report: Mapping[str, Any]) -> str:
    return f"{round(100 * float((report.get('meta') or {}).get('ci', 0.95)))}% CI"


def calibrated_to_table(report: Mapping[str, Any]) -> str:
    """The report's ``calibrated`` section alone (with the judge-only intervals of its ``scores``) as plain text."""
    if not report.get("calibrated"):
        return NO_CALIBRATED + "\n"
    return _plain(calibrated_tables(report, _ci_label(report)))


def calibrated_to_markdown(report: Mapping[str, Any]) -> str:
    """The report's ``calibrated`` section alone as Markdown."""
    if not report.get("calibrated"):
        return f"# Calibrated estimates\n\n_{NO_CALIBRATED}_\n"
    return _markdown(["# Calibrated estimates", ""], calibrated_tables(report, _ci_label(report)))
