"""The building blocks every table of the pages is made with: a report section as rows, rows as a frame with the
expected columns, the aspects in the paper's order, a pair's label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

PAPER_ASPECTS = ("engagingness", "coherence", "consistency")


def section_list(report: Mapping[str, Any] | None, name: str) -> list[dict[str, Any]]:
    value = (report or {}).get(name)
    return [dict(v) for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """Rows as a frame with at least ``columns`` (missing ones filled with None), in that order first."""
    df = pd.DataFrame([dict(r) for r in rows])
    for column in columns:
        if column not in df:
            df[column] = None
    return df[[*columns, *[c for c in df.columns if c not in columns]]]


def aspect_order(aspects: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(a for a in aspects if a))
    return [a for a in PAPER_ASPECTS if a in present] + sorted(a for a in present if a not in PAPER_ASPECTS)


def pair_label(a: Any, b: Any) -> str:
    return f"{a} vs {b}"
