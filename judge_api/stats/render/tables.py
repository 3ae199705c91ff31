"""Every table of a report, in the order the renderers show them: (title, headers, rows), cells as text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judge_api.stats import frames as F
from judge_api.stats.render.calibrated import calibrated_tables
from judge_api.stats.render.cells import fmt, fmt_ci
from judge_api.stats.render.judges import agreement_tables, panel_judge_label, panel_tables, who
from judge_api.stats.render.optional_sections import (
    economy_tables,
    facts_tables,
    memory_audit_tables,
    reference_tokens_tables,
)
from judge_api.stats.report import METRIC_LABELS


def report_tables(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of every table the renderers show."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    ci_label = f"{round(100 * float((report.get('meta') or {}).get('ci', 0.95)))}% CI"
    panel_label = panel_judge_label(report)
    c = report.get("counts") or {}
    by_status = c.get("by_status") or {}
    out.append(
        (
            "Counts",
            ["rows", "items", *F.STATUSES],
            [
                [
                    fmt(c.get("n_rows", 0)),
                    fmt(c.get("n_items", 0)),
                    *[fmt(by_status.get(s, 0)) for s in F.STATUSES],
                ]
            ],
        )
    )
    out.append(
        (
            "Scores (single mode)",
            [
                "system",
                "aspect",
                "judge",
                "n",
                "mean",
                ci_label,
                "median",
                "std",
                "CI note",
                "failed",
                "unparseable",
                "pending",
                "cancelled",
            ],
            [
                [
                    r["system"],
                    r["aspect"],
                    who(r, panel_label),
                    fmt(r["n"]),
                    fmt(r["mean"]),
                    fmt_ci(r["ci_low"], r["ci_high"]),
                    fmt(r["median"]),
                    fmt(r["std"]),
                    r.get("ci_warning") or "",
                    fmt(r["n_failed"]),
                    fmt(r["n_unparseable"]),
                    fmt(r["n_pending"]),
                    fmt(r["n_cancelled"]),
                ]
                for r in report.get("scores") or []
            ],
        )
    )
    pt = report.get("paper_table") or {"aspects": [], "rows": []}
    metrics = pt.get("metrics") or []
    out.append(
        (
            "Paper table (mean scores)",
            [
                "judge",
                "system",
                *[METRIC_LABELS.get(m, m) for m in metrics],
                *[a.capitalize() for a in pt["aspects"]],
                "Average",
            ],
            [
                [
                    who(r, panel_label),
                    r["system"],
                    *[with_n(fmt((r.get("metrics") or {}).get(m), 3), r, "metrics_n", m) for m in metrics],
                    *[with_n(fmt(r["values"].get(a)), r, "n", a) for a in pt["aspects"]],
                    fmt(r["average"]),
                ]
                for r in pt["rows"]
            ],
        )
    )
    out += reference_tokens_tables(report.get("reference_metrics"))
    out.append(
        (
            "Paired comparisons (x - y)",
            ["aspect", "judge", "x", "y", "pairs", "mean diff", ci_label, "Wilcoxon p", "CI note"],
            [
                [
                    r["aspect"],
                    who(r, panel_label),
                    r["system_x"],
                    r["system_y"],
                    fmt(r["n_pairs"]),
                    fmt(r["mean_diff"]),
                    fmt_ci(r["ci_low"], r["ci_high"]),
                    fmt(r["p_value"], 3),
                    r.get("ci_warning") or "",
                ]
                for r in report.get("paired") or []
            ],
        )
    )
    out.append(
        (
            "Preferences (pairwise, orders combined)",
            ["a", "b", "aspect", "judge", "n", "win %", "tie %", "loss %", "incons.", "win rate", ci_label],
            [
                [
                    r["system_a"],
                    r["system_b"],
                    r["aspect"],
                    who(r, panel_label),
                    fmt(r["n"]),
                    fmt(r["win_rate_pct"], 1),
                    fmt(r["tie_rate_pct"], 1),
                    fmt(r["loss_rate_pct"], 1),
                    fmt(r["ties_inconsistent"]),
                    fmt(r["win_rate"], 3),
                    fmt_ci(r["win_rate_ci_low"], r["win_rate_ci_high"], 3),
                ]
                for r in report.get("preferences") or []
            ],
        )
    )
    out.append(
        (
            "Ranking (Bradley-Terry)",
            ["aspect", "judge", "group", "rank", "system", "elo", ci_label, "comparisons", "never compared with"],
            [
                [
                    r["aspect"],
                    who(r, panel_label),
                    fmt(r.get("component")),
                    fmt(r["rank"]),
                    r["system"],
                    fmt(r["elo"], 0),
                    fmt_elo_ci(r),
                    fmt(r["n_comparisons"]),
                    ", ".join(r.get("not_compared_with") or []),
                ]
                for r in report.get("ranking") or []
            ],
        )
    )
    out += economy_tables((report.get("run") or {}).get("economy"))
    panel = report.get("panel")
    if panel:
        out += panel_tables(panel)
    agr = report.get("agreement")
    if agr:
        out += agreement_tables(agr)
    bias = report.get("bias") or {}
    brows = []
    for judge, rec in (bias.get("per_judge") or {}).items():
        pos = rec.get("position") or {}
        swap = rec.get("swap") or {}
        length = rec.get("length") or {}
        use = rec.get("score_use") or {}
        fail = rec.get("failures") or {}
        brows.append(
            [
                judge,
                fmt(pos.get("p_first_wins"), 3),
                fmt(swap.get("rate"), 3),
                fmt(length.get("p_longer_wins"), 3),
                fmt(length.get("score_length_spearman"), 3),
                fmt(use.get("distinct_fraction"), 3),
                fmt(use.get("entropy_norm"), 3),
                fmt(fail.get("unparseable_rate"), 3),
                fmt(fail.get("failure_rate"), 3),
            ]
        )
    out.append(
        (
            "Bias diagnostics",
            [
                "judge",
                "P(first wins)",
                "swap flips",
                "P(longer wins)",
                "rho(score,len)",
                "scale used",
                "entropy",
                "unparseable",
                "failed",
            ],
            brows,
        )
    )
    out.append(
        (
            "Bias flags",
            ["flag", "value", "threshold", "message"],
            [[f["name"], fmt(f["value"], 3), fmt(f["threshold"], 3), f["message"]] for f in bias.get("flags") or []],
        )
    )
    cost = report.get("cost") or {}
    out.append(
        (
            "Cost",
            [
                "judgments",
                "cached",
                "input tokens",
                "from prompt cache",
                "output tokens",
                "cost USD",
                "list price USD",
                "saved by caching",
                "saved by batch",
                "mean latency ms",
            ],
            [
                [
                    fmt(cost.get("n_finished", 0)),
                    fmt(cost.get("n_cached", 0)),
                    fmt(cost.get("input_tokens", 0)),
                    fmt(cost.get("cached_input_tokens", 0)),
                    fmt(cost.get("output_tokens", 0)),
                    fmt(cost.get("cost_usd"), 4),
                    fmt(cost.get("list_cost_usd", cost.get("cost_usd")), 4),
                    fmt((cost.get("saved_usd") or {}).get("cache", 0.0), 4),
                    fmt((cost.get("saved_usd") or {}).get("batch", 0.0), 4),
                    fmt(cost.get("mean_latency_ms"), 0),
                ]
            ],
        )
    )
    out += calibrated_tables(report, ci_label)
    out += facts_tables(report.get("facts"), ci_label)
    out += memory_audit_tables(report.get("memory_audit"), ci_label)
    sampled = report.get("self_consistency") or []
    if sampled:
        out.append(
            (
                "Self-consistency (samples per judgment)",
                ["mode", "system", "vs", "aspect", "judge", "keys", "samples", "mean conf.", "min conf."],
                [
                    [
                        r["mode"],
                        r["system_a"],
                        r.get("system_b") or "-",
                        r["aspect"],
                        r["judge"],
                        fmt(r["keys"]),
                        fmt(r["samples_per_key"], 1),
                        fmt(r["mean_confidence"], 3),
                        fmt(r["min_confidence"], 3),
                    ]
                    for r in sampled
                ],
            )
        )
    return out


def fmt_elo_ci(row: Mapping[str, Any]) -> str:
    """The Elo interval; a side with no bound (the system won or lost every comparison) reads as infinite."""
    low, high = row.get("elo_ci_low"), row.get("elo_ci_high")
    if row.get("ci_unbounded") and (low is not None or high is not None):
        return f"[{'-inf' if low is None else fmt(low, 0)}, {'+inf' if high is None else fmt(high, 0)}]"
    return fmt_ci(low, high, 0)


def with_n(text: str, row: Mapping[str, Any], counts: str, column: str) -> str:
    """A paper-table cell with the items behind it, and a mark when they are not the set the systems share."""
    n = (row.get(counts) or {}).get(column)
    if n is None or text == "-":
        return text
    shared = (row.get("shared") or {}).get(column)
    return f"{text} ({n}{'' if shared is not False else ', not shared'})"
