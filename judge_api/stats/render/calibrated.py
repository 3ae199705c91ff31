"""The ``calibrated`` section's tables: judge-only, human-only and calibrated (PPI++) intervals side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judge_api.stats.render.cells import fmt, fmt_ci

Table = tuple[str, list[str], list[list[str]]]


def _judge_only(scores: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    return {(str(r["judge"]), str(r["aspect"]), str(r["system"])): r for r in scores}


def calibrated_tables(report: Mapping[str, Any], ci_label: str) -> list[Table]:
    """None without human ratings; otherwise the scores, differences, win rates and judges tables."""
    section = report.get("calibrated")
    if not section:
        return []
    judge_only = _judge_only(report.get("scores") or [])
    scores = []
    for r in section.get("scores") or []:
        own = judge_only.get((str(r["judge"]), str(r["aspect"]), str(r["system"]))) or {}
        human = r.get("human_only") or {}
        scale = r.get("human_scale")
        scores.append(
            [
                str(r["system"]),
                str(r["aspect"]),
                str(r["judge"]),
                "-" if not scale else f"{fmt(scale[0], 1)}-{fmt(scale[1], 1)}",
                f"{fmt(own.get('mean'))} {fmt_ci(own.get('ci_low'), own.get('ci_high'))}",
                f"{fmt(human.get('estimate'), 3)} {fmt_ci(human.get('ci_low'), human.get('ci_high'), 3)}",
                f"{fmt(r['estimate'], 3)} {fmt_ci(r['ci_low'], r['ci_high'], 3)}",
                f"{fmt(r['n_labeled'])}/{fmt(r['n_judged'])}",
                fmt(r.get("lambda"), 2),
                fmt(r.get("effective_labels"), 0),
                r.get("note") or "",
            ]
        )
    differences = [
        [
            f"{d['system_a']} - {d['system_b']}",
            str(d["aspect"]),
            str(d["judge"]),
            f"{fmt(d['estimate'], 3)} {fmt_ci(d['ci_low'], d['ci_high'], 3)}",
            f"{fmt(d['n_labeled'])}/{fmt(d['n_judged'])}",
            d.get("note") or "",
        ]
        for d in section.get("differences") or []
    ]
    win_rates = [
        [
            f"{w['system_a']} vs {w['system_b']}",
            str(w["aspect"]),
            str(w["judge"]),
            f"{fmt((w.get('human_only') or {}).get('estimate'), 3)}",
            f"{fmt(w['estimate'], 3)} {fmt_ci(w['ci_low'], w['ci_high'], 3)}",
            f"{fmt(w['n_labeled'])}/{fmt(w['n_judged'])}",
            w.get("note") or "",
        ]
        for w in section.get("win_rates") or []
    ]
    judges = [
        [
            str(j["judge"]),
            str(j["aspect"]),
            fmt(j["n_labeled"]),
            fmt(j.get("kappa"), 2),
            fmt(j.get("bias"), 3),
            fmt(j.get("effective_labels"), 0),
            fmt(j.get("usd_per_1k"), 2),
        ]
        for j in section.get("judges") or []
    ]
    label = f"estimate {ci_label}"
    tables: list[Table] = [
        (
            "Calibrated to people (PPI++): judge-only, human-only and calibrated estimates",
            [
                "system",
                "aspect",
                "judge",
                "human scale",
                f"judge-only {ci_label} (judge's scale)",
                f"human-only {label}",
                f"calibrated {label}",
                "labeled/judged",
                "lambda",
                "eff. labels",
                "note",
            ],
            scores,
        ),
        (
            "Calibrated differences",
            ["pair", "aspect", "judge", f"calibrated {label}", "labeled/judged", "note"],
            differences,
        ),
    ]
    if win_rates:
        tables.append(
            (
                "Calibrated win rates",
                ["pair", "aspect", "judge", "human-only", f"calibrated {label}", "labeled/judged", "note"],
                win_rates,
            )
        )
    tables.append(
        (
            "Which judge to trust, per dollar (labeled items)",
            ["judge", "aspect", "labeled", "kappa", "bias (human scale)", "eff. labels", "USD per 1k"],
            judges,
        )
    )
    notes = [[n] for n in section.get("notes") or []]
    if notes:
        tables.append(("Calibration notes", ["note"], notes))
    return tables
