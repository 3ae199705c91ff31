"""The gate's reports: a Markdown summary (pull-request comment, ``$GITHUB_STEP_SUMMARY``), JUnit XML (one test
case per aspect) and the JSON report, the number formatting the headline shares with them, and ``write_outputs``
(the ``--markdown`` / ``--junit`` / ``--json`` files).

Only renders: it reads a finished ``GateOutcome`` and imports no other gate module but ``outcome``.
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from dialogue_judge.gate.outcome import AspectReport, GateOutcome

ICONS = {"pass": "✅", "regression": "❌", "undecided": "⚠️", "error": "⚠️"}
TITLES = {"pass": "no regression", "regression": "regression", "undecided": "undecided", "error": "could not run"}
VERDICTS = {
    "regression": "❌ regression",
    "no_regression": "✅ no regression",
    "undecided": "⚠️ undecided",
    "not_decided": "· not decided (stopped at a regression)",
}


# -- formatting shared by the headline and the reports -----------------------------------------------------------


def fmt_num(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def fmt_p(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 0.001:
        return f"{value:.3f}"
    return f"{value:.1e}"


def fmt_level(level: float | None) -> str:
    if level is None:
        return ""
    text = f"{100 * level:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def describe(report: AspectReport, mode: str) -> str:
    """``mean drop 14.60 points, 98.75% CI [11.20, 18.00]`` / ``loss rate 0.920, 98.75% CI [0.800, 0.970]``."""
    digits = 2 if mode == "single" else 3
    what = f"mean {report.change}" if mode == "single" else "loss rate"
    unit = " points" if mode == "single" and report.change == "drop" else ""
    ci = ""
    if report.ci_low is not None and report.ci_high is not None:
        ci = f", {fmt_level(report.ci_level)} CI [{fmt_num(report.ci_low, digits)}, {fmt_num(report.ci_high, digits)}]"
    return f"{what} {fmt_num(report.estimate, digits)}{unit}{ci}"


# -- Markdown ------------------------------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _code(text: object) -> str:
    return "`" + str(text).replace("`", "'") + "`"


def _aspect_row(report: AspectReport, result: GateOutcome) -> list[str]:
    digits = 2 if result.mode == "single" else 3
    ci = "n/a"
    if report.ci_low is not None and report.ci_high is not None:
        ci = f"[{fmt_num(report.ci_low, digits)}, {fmt_num(report.ci_high, digits)}] ({fmt_level(report.ci_level)})"
    if result.mode == "single":
        effect = (
            f"{report.effect_size_name} {fmt_num(report.effect_size, 2)}" if report.effect_size is not None else "n/a"
        )
        places = 1 if report.change == "drop" else 3
        means = f"{fmt_num(report.baseline_mean, places)} → {fmt_num(report.candidate_mean, places)}"
    else:
        effect = f"{report.losses} L / {report.ties} T / {report.wins} W"
        means = ""
    decided = report.decided_by or "—"
    if report.look is not None:
        decided += f" (look {report.look})"
    failed = report.n_failed + report.n_unparseable
    row = [
        report.aspect,
        VERDICTS.get(report.verdict, report.verdict),
        fmt_num(report.estimate, digits),
        ci,
        f"≤ {fmt_num(report.threshold, digits)}",
        fmt_p(report.p_value),
        effect,
    ]
    if result.mode == "single":
        row.append(means)
    row += [str(report.n), f"{failed} / {report.n_judgments}", decided]
    return [_cell(c) for c in row]


def to_markdown(result: GateOutcome) -> str:
    lines = [
        f"## {ICONS[result.status]} dialogue-judge gate: {TITLES[result.status]}",
        "",
        f"**{result.headline}**",
        "",
    ]
    setup = [f"baseline {_code(result.baseline)}", f"candidate {_code(result.candidate)}"]
    if result.judge:
        setup.append(f"judge {_code(result.judge)}")
    if result.rubric:
        setup.append(f"rubric {_code(result.rubric)}")
    setup.append(f"{result.mode} mode")
    if result.n_items:
        setup.append(f"{result.n_items} items")
    setup.append(f"alpha {result.alpha:g}")
    if result.threshold is not None:
        name = {"max_drop": "max drop", "max_increase": "max increase"}.get(result.threshold_name, "max loss rate")
        setup.append(f"{name} {result.threshold:g}")
    lines += [" · ".join(setup), ""]
    if result.aspects:
        what = f"mean {result.aspects[0].change}" if result.mode == "single" else "loss rate"
        headers = ["aspect", "verdict", what, "CI", "allowed", "p (adj.)", "effect size"]
        if result.mode == "single":
            headers.append(
                "mean score baseline → candidate"
                if result.aspects[0].change == "drop"
                else f"mean {result.aspects[0].aspect} baseline → candidate"
            )
        headers += ["items", "failed / judged", "decided by"]
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "|".join("---" for _ in headers) + "|")
        for report in result.aspects:
            lines.append("| " + " | ".join(_aspect_row(report, result)) + " |")
        lines.append("")
    calls = result.calls
    if calls.reused:
        lines.append(f"**Judge calls:** none: the verdicts of {', '.join(map(_code, calls.run_ids))} were reused.")
    elif calls.planned or calls.run_ids:
        text = (
            f"**Judge calls:** {calls.judged} judgments of {calls.planned} planned "
            f"({calls.provider_calls} provider calls, {calls.cached} answered from the cache"
        )
        if calls.cost_usd:
            text += f", ${calls.cost_usd:.4f}"
        text += (
            f"); {calls.items_judged} of {result.n_items} items in {calls.looks_done} of {calls.looks_planned} looks."
        )
        if calls.saved:
            share = 100.0 * calls.saved / max(calls.planned, 1)
            text += f" The early stop saved **{calls.saved} judge calls** ({share:.0f}%)."
        lines.append(text)
        if calls.run_ids:
            lines.append(f"Runs: {', '.join(map(_code, calls.run_ids))}.")
    lines.append("")
    for report in result.aspects:
        if not report.worst:
            continue
        title = (
            "Worst regressed items" if report.verdict == "regression" else f"Largest {report.change}s (for information)"
        )
        if result.mode == "pairwise" and report.verdict != "regression":
            title = "Losses (for information)"
        lines.append(f"### {title}: {report.aspect}")
        lines.append("")
        if result.mode == "single":
            lines.append(f"| item | baseline | candidate | {report.change} | judge's explanation (candidate) |")
            lines.append("|---|---|---|---|---|")
            places = 0 if report.change == "drop" else 2
            for row in report.worst:
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(c)
                        for c in (
                            _code(row["item_id"]),
                            fmt_num(row["baseline_score"], places),
                            fmt_num(row["candidate_score"], places),
                            fmt_num(row["drop"], places),
                            row["explanation"][:300] or "—",
                        )
                    )
                    + " |"
                )
        else:
            lines.append("| item | outcome | orders (ab / ba) | judge's explanation |")
            lines.append("|---|---|---|---|")
            for row in report.worst:
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(c)
                        for c in (
                            _code(row["item_id"]),
                            row["outcome"],
                            f"{row['outcome_ab']} / {row['outcome_ba']}",
                            row["explanation"][:300] or "—",
                        )
                    )
                    + " |"
                )
        lines.append("")
    lines += calibration_lines(result.calibration)
    for note in result.notes:
        lines.append(f"- {note}")
    if result.notes:
        lines.append("")
    if result.aspects:
        lines += [
            "<details><summary>How the gate decides</summary>",
            "",
            "Items are judged in a seeded random order (seed "
            f"{result.seed}), in batches. Early stops use an anytime-valid betting confidence sequence; when the "
            "items run out, one fixed-sample interval (a betting test valid for any distribution of the drops or "
            "loss values on their bounded scale) decides. Alpha is split "
            "between the two and across aspects, so the gate is wrong in either direction with probability at "
            "most alpha however early it stops. *regression*: the interval lies above the tolerance; "
            "*no regression*: below it; otherwise the gate cannot decide (exit 2). "
            "The p-value is adjusted to be compared with alpha directly."
            + (
                ""
                if result.sequential
                else " This gate ran without early stopping: the fixed-sample test alone, at the full alpha."
            )
            + (
                " With calibrate: human the verdict is the calibrated (PPI++) drop's instead: the humans' labels and "
                "the judge's scores on every item, a t interval at the same level; the table above keeps the "
                "judge-only figures for comparison."
                if result.calibration and any(e.get("estimate") is not None for e in result.calibration)
                else ""
            ),
            "",
            "</details>",
            "",
        ]
    lines.append(f"<sub>dialogue-judge gate · exit code {result.exit_code} · {fmt_num(result.duration_s, 1)} s</sub>")
    return "\n".join(lines) + "\n"


def _fmt3(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def calibration_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The summary's section on the calibrated decision (``gate.calibrate``)."""
    if not entries:
        return []
    lines = [
        "### Calibrated on human labels (PPI++)",
        "",
        "| aspect | verdict | method | labels baseline / candidate (both) | calibrated drop | CI | allowed "
        "| human-only drop | judge-only drop | judge-only verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        judge = e["judge_only"]
        mapped = judge.get("on_human_scale") or {}
        level = f"{100 * e['ci_level']:.2f}".rstrip("0").rstrip(".")
        ci = "n/a" if e["ci_low"] is None else f"[{_fmt3(e['ci_low'])}, {_fmt3(e['ci_high'])}] ({level}%)"
        human = e["human_only"]
        human_text = (
            "n/a"
            if human is None
            else f"{_fmt3(human['estimate'])} [{_fmt3(human['ci_low'])}, {_fmt3(human['ci_high'])}]"
        )
        judge_text = "n/a"
        if mapped.get("estimate") is not None:
            judge_text = (
                f"{_fmt3(mapped['estimate'])} [{_fmt3(mapped['ci_low'])}, {_fmt3(mapped['ci_high'])}] "
                f"({'' if judge['estimate'] is None else format(judge['estimate'], '.2f')} judge points)"
            )
        method = e.get("design") or "n/a"
        row = [
            e["aspect"],
            e["verdict"].replace("_", " "),
            method,
            f"{e['n_labels_baseline']} / {e['n_labels_candidate']} ({e['n_labels_both']})",
            _fmt3(e["estimate"]),
            ci,
            "n/a" if e["threshold"] is None else f"≤ {_fmt3(e['threshold'])}",
            human_text,
            judge_text,
            judge["verdict"].replace("_", " "),
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
        if e["reason"]:
            lines.append("")
            lines.append(f"{e['aspect']}: {e['reason']}.")
    lines.append("")
    scale = next((e["human_scale"] for e in entries if e["human_scale"]), None)
    if scale:
        lines.append(
            f"Drops are on the humans' {scale[0]:g}-{scale[1]:g} scale (baseline - candidate); the judge's scores and "
            "the allowed drop are mapped onto it with the fixed map of the two stated scales."
        )
        lines.append("")
    return lines


# -- JUnit XML -----------------------------------------------------------------------------------------------------


def to_junit(result: GateOutcome) -> str:
    """JUnit XML: one ``testcase`` per aspect (a ``gate`` case when the gate could not get that far)."""
    suite = ET.Element("testsuite", name="dialogue-judge gate", time=f"{result.duration_s:.3f}")
    failures = errors = skipped = 0
    if not result.aspects:  # the gate failed before it knew its aspects (bad input, unknown rubric ...)
        case = ET.SubElement(
            suite, "testcase", classname="dialogue_judge.gate", name="gate", time=f"{result.duration_s:.3f}"
        )
        if result.status == "error":
            element = ET.SubElement(case, "error", message=result.headline, type="GateError")
            element.text = result.headline
            errors += 1
    for report in result.aspects:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"dialogue_judge.gate.{result.rubric or 'gate'}",
            name=report.aspect,
            time=f"{result.duration_s:.3f}",
        )
        message = f"{report.aspect}: {describe(report, result.mode)} (allowed {report.threshold:g})"
        if result.status == "error":
            element = ET.SubElement(case, "error", message=result.headline, type="GateError")
            element.text = result.headline
            errors += 1
        elif report.verdict == "regression":
            element = ET.SubElement(case, "failure", message=f"regression in {message}", type="Regression")
            element.text = result.headline
            failures += 1
        elif report.verdict == "undecided":
            element = ET.SubElement(case, "error", message=f"undecided: {message}", type="Undecided")
            element.text = result.headline
            errors += 1
        elif report.verdict == "not_decided":
            ET.SubElement(case, "skipped", message=f"not decided (the gate stopped at a regression): {message}")
            skipped += 1
        out = ET.SubElement(case, "system-out")
        out.text = message
    suite.set("tests", str(len(suite.findall("testcase"))))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element(
        "testsuites",
        name="dialogue-judge",
        tests=suite.get("tests", "0"),
        failures=str(failures),
        errors=str(errors),
        time=f"{result.duration_s:.3f}",
    )
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# -- JSON ----------------------------------------------------------------------------------------------------------


def to_json_dict(result: GateOutcome) -> dict[str, Any]:
    """The JSON report: every field of the result plus ``exit_code``; NaN and infinities become ``null``."""
    data = asdict(result)
    data["exit_code"] = result.exit_code
    jsonable: dict[str, Any] = _jsonable(data)
    return jsonable


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


# -- files -----------------------------------------------------------------------------------------------------------


def write_outputs(
    result: GateOutcome,
    *,
    markdown: Path | None = None,
    junit: Path | None = None,
    json_path: Path | None = None,
    step_summary: bool = True,
) -> list[str]:
    """Write the requested report files (and append to ``$GITHUB_STEP_SUMMARY``); returns error messages."""
    problems = []
    text = to_markdown(result)
    targets: list[tuple[Path, str, str]] = []
    if markdown is not None:
        targets.append((markdown, text, "w"))
    if junit is not None:
        targets.append((junit, to_junit(result), "w"))
    if json_path is not None:
        targets.append((json_path, json.dumps(to_json_dict(result), indent=2, allow_nan=False) + "\n", "w"))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and summary:
        targets.append((Path(summary), text + "\n", "a"))
    for path, content, mode in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open(mode, encoding="utf-8") as handle:
                handle.write(content)
        except OSError as exc:
            problems.append(f"could not write {path}: {exc}")
    return problems
