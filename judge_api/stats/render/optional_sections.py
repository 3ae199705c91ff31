"""The tables of the sections only some runs have: fact-check, memory audit, adaptive planning, and how the
reference metrics tokenised the items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judge_api.stats.render.cells import fmt, fmt_ci


def facts_tables(facts: Mapping[str, Any] | None, ci_label: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Fact-check runs: contradiction, retention and addressed rates per system, and the most-contradicted facts."""
    if not facts:
        return []
    systems = facts.get("systems") or []
    rates = [
        [
            r["system"],
            r["judge"],
            r["rubric_id"],
            fmt(r["n_responses"]),
            fmt(r["n_unparseable"]),
            f"{r['supported']}/{r['contradicted']}/{r['not_addressed']}",
            fmt(r["contradiction_rate"], 3),
            fmt_ci(r["contradiction_rate_ci_low"], r["contradiction_rate_ci_high"], 3),
            fmt(r["retention_rate"], 3),
            fmt_ci(r["retention_rate_ci_low"], r["retention_rate_ci_high"], 3),
            fmt(r.get("n_na")),
            fmt(r.get("addressed_rate"), 3),
            fmt_ci(r.get("addressed_rate_ci_low"), r.get("addressed_rate_ci_high"), 3),
        ]
        for r in systems
    ]
    top = [
        [f["item_id"], f["fact_id"], f["source"], fmt(f["count"]), ", ".join(f["systems"]), f["text"] or "-"]
        for f in facts.get("most_contradicted") or []
    ]
    return [
        (
            "Facts (fact-check)",
            [
                "system",
                "judge",
                "rubric",
                "responses",
                "unparseable",
                "sup/contr/n.a.",
                "contradiction rate",
                ci_label,
                "retention rate",
                ci_label,
                "score n/a",
                "addressed rate",
                ci_label,
            ],
            rates,
        ),
        ("Most-contradicted facts", ["item", "fact", "source", "count", "systems", "text"], top),
    ]


def memory_audit_tables(audit: Mapping[str, Any] | None, ci_label: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Memory-audit runs: fact-level precision / recall / F1 per system, and the shares of the error types."""
    if not audit:
        return []
    systems = audit.get("systems") or []
    figures = [
        [
            r["system"],
            r["judge"],
            r["rubric_id"],
            fmt(r["n_items"]),
            fmt(r["n_parsed"]),
            fmt(r["n_unparseable"]),
            *[
                cell
                for name in ("precision", "recall", "f1")
                for cell in (fmt(r[name], 3), fmt_ci(r[f"{name}_ci_low"], r[f"{name}_ci_high"], 3))
            ],
        ]
        for r in systems
    ]
    errors = [
        [
            r["system"],
            r["judge"],
            fmt(r["errors"]),
            *[
                cell
                for kind in audit.get("error_types") or []
                for cell in (
                    fmt(r[kind]),
                    fmt(r[f"{kind}_share"], 3),
                    fmt_ci(r[f"{kind}_share_ci_low"], r[f"{kind}_share_ci_high"], 3),
                )
            ],
        ]
        for r in systems
    ]
    type_headers = [
        header for kind in audit.get("error_types") or [] for header in (kind.replace("_", " "), "share", ci_label)
    ]
    return [
        (
            "Memory audit (judge-based, fact level)",
            [
                "system",
                "judge",
                "rubric",
                "items",
                "parsed",
                "unparsed",
                "precision",
                ci_label,
                "recall",
                ci_label,
                "F1",
                ci_label,
            ],
            figures,
        ),
        ("Memory audit: error types (share of all errors)", ["system", "judge", "errors", *type_headers], errors),
    ]


def economy_tables(economy: Mapping[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """Adaptive runs: calls used against round robin / a fixed sample count, why planning stopped, the ranking
    with its confidence-sequence intervals."""
    if not economy:
        return []
    out: list[tuple[str, list[str], list[list[str]]]] = []
    pairing = economy.get("pairing")
    if pairing:
        target = pairing.get("target") or {}
        out.append(
            (
                "Adaptive pairing",
                ["stop", "calls", "round robin", "share", "comparisons", "confidence", "by"],
                [
                    [
                        str(pairing.get("stop") or "running"),
                        fmt(pairing.get("calls")),
                        fmt(pairing.get("round_robin_calls")),
                        "-" if pairing.get("share") is None else f"{100 * pairing['share']:.1f}%",
                        f"{pairing.get('comparisons')}/{pairing.get('round_robin_comparisons')}",
                        fmt(pairing.get("confidence"), 3),
                        f"{target.get('aspect', '-')} / {target.get('judge', '-')}",
                    ]
                ],
            )
        )
        gaps = {g["upper"]: g for g in pairing.get("gaps") or []}
        out.append(
            (
                "Adaptive ranking (intervals: the stopping rule's confidence sequence)",
                ["rank", "system", "strength", "interval", "comparisons", "vs next", "z / needed"],
                [
                    [
                        fmt(r["rank"]),
                        r["system"],
                        fmt(r["strength"], 3),
                        fmt_ci(r.get("ci_low"), r.get("ci_high"), 3),
                        fmt(r.get("comparisons")),
                        "-" if r["system"] not in gaps else ("separated" if gaps[r["system"]]["separated"] else "open"),
                        "-"
                        if r["system"] not in gaps
                        else f"{fmt(gaps[r['system']]['z'], 2)} / {fmt(gaps[r['system']]['z_needed'], 2)}",
                    ]
                    for r in pairing.get("ranking") or []
                ],
            )
        )
    samples = economy.get("samples")
    if samples:
        histogram = ", ".join(f"{k}: {v}" for k, v in (samples.get("histogram") or {}).items())
        out.append(
            (
                "Adaptive samples",
                ["judgments", "samples", "fixed count", "fixed samples", "saving", "samples taken: judgments"],
                [
                    [
                        fmt(samples.get("judgments")),
                        fmt(samples.get("samples")),
                        fmt(samples.get("fixed")),
                        fmt(samples.get("fixed_samples")),
                        f"{100 * float(samples.get('saving') or 0):.1f}%",
                        histogram or "-",
                    ]
                ],
            )
        )
    return out


def reference_tokens_tables(section: Mapping[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    if not section:
        return []
    counts = section.get("by_tokenisation") or {}
    rows = [
        [str(name), str((section.get("versions") or {}).get(name, "")), fmt(c["n_items"]), fmt(c["n_unspaced"])]
        for name, c in counts.items()
        if c.get("n_items")
    ]
    title = f"Reference metric tokens (tokenize: {section.get('tokenize') or 'unknown'})"
    return [(title, ["tokens", "version", "items", "mostly CJK references"], rows)]
