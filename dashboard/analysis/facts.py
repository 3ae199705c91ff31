"""Fact-check judgments (docs/facts.md): a fact's source kind, the response with each fact's evidence highlighted, and
contradictions counted per system and source."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

FACT_COLORS = {"contradicted": "red", "supported": "green"}
"""Streamlit background colours of the evidence of each label (not addressed facts have none)."""
SOURCE_KINDS = ("persona.user", "persona.bot", "memory", "session")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def source_kind(source: Any) -> str:
    """The kind of a fact's source: ``persona.user``, ``persona.bot``, ``memory`` or ``session`` (any earlier
    session or turn); anything else is kept as it is."""
    text = str(source or "")
    return "session" if text == "session" or text.startswith("session ") else text


def escape_markdown(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def evidence_span(response: str, evidence: str) -> tuple[int, int] | None:
    """Where ``evidence`` occurs in ``response`` (case and runs of white space ignored), or None."""
    words = str(evidence or "").split()
    if not words:
        return None
    found = re.search(r"\s+".join(re.escape(w) for w in words), response, re.IGNORECASE)
    return (found.start(), found.end()) if found else None


def highlight_evidence(response: str, facts: Sequence[Mapping[str, Any]]) -> str:
    """The response as Markdown with each supported fact's evidence on a green and each contradicted fact's on a
    red background (a contradiction wins where spans overlap); the rest escaped as plain text."""
    paint: list[str | None] = [None] * len(response)
    ranked = sorted(facts, key=lambda f: f.get("label") == "contradicted")  # contradicted painted last
    for fact in ranked:
        color = FACT_COLORS.get(str(fact.get("label")))
        span = evidence_span(response, str(fact.get("evidence") or "")) if color else None
        if span:
            paint[span[0] : span[1]] = [color] * (span[1] - span[0])
    out: list[str] = []
    start = 0
    for end in range(1, len(response) + 1):
        if end == len(response) or paint[end] != paint[start]:
            chunk = response[start:end]
            color = paint[start]
            if color and chunk.strip():  # white space at the ends stays outside the highlight
                lead = " " if chunk[:1].isspace() else ""
                trail = " " if chunk[-1:].isspace() else ""
                out.append(f"{lead}:{color}-background[{escape_markdown(' '.join(chunk.split()))}]{trail}")
            else:
                out.append(escape_markdown(chunk))
            start = end
    return "".join(out)


def contradiction_counts(labels: pd.DataFrame) -> pd.DataFrame:
    """Contradicted facts per system and source kind (columns system, source_kind, contradictions)."""
    columns = ["system", "source_kind", "contradictions"]
    if labels.empty:
        return pd.DataFrame(columns=columns)
    kinds = labels.assign(source_kind=labels["source"].map(source_kind))
    counted = kinds.groupby(["system", "source_kind"], sort=True).size().rename("contradictions").reset_index()
    return counted[columns]


_RATE_COLUMNS = ["system", "judge", "rubric_id", "aspect", "n_items", "n_responses", "contradiction rate",
                "retention rate", "addressed rate"]  # fmt: skip


def _rate(row: Mapping[str, Any], name: str) -> str:
    """``0.124 [0.093, 0.153]``: a rate of the report's facts section with its interval, "n/a" where it has none."""
    value = row.get(name)
    if value is None:
        return "n/a"
    low, high = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    interval = f" [{float(low):.3f}, {float(high):.3f}]" if low is not None and high is not None else ""
    return f"{float(value):.3f}{interval}"


def fact_rates_frame(report: Mapping[str, Any]) -> pd.DataFrame:
    """The report's contradiction, retention and addressed rates per (system, judge, rubric, aspect), each with its
    95% bootstrap interval, as the report gives them."""
    systems = ((report.get("facts") or {}).get("systems")) or []
    rows = [
        {
            "system": s.get("system"),
            "judge": s.get("judge"),
            "rubric_id": s.get("rubric_id"),
            "aspect": s.get("aspect"),
            "n_items": s.get("n_items"),
            "n_responses": s.get("n_responses"),
            "contradiction rate": _rate(s, "contradiction_rate"),
            "retention rate": _rate(s, "retention_rate"),
            "addressed rate": _rate(s, "addressed_rate"),
        }
        for s in systems
    ]
    return pd.DataFrame(rows, columns=_RATE_COLUMNS)
