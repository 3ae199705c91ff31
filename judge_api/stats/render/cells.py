"""How one figure reads in a table cell: ``-`` for a missing value, yes / no, tiny values in e-notation."""

from __future__ import annotations

from typing import Any


def fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != 0 and abs(v) < 10 ** (-digits):
            return f"{v:.1e}"
        return f"{v:.{digits}f}"
    return str(v)


def fmt_ci(lo: Any, hi: Any, digits: int = 2) -> str:
    if lo is None or hi is None:
        return "-"
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"
