"""Issue 39: the columnar report gives exactly what the row-by-row report gave on main, every section, CIs included.

The expected reports (``data/report_golden/*.json``) were written by ``make_report_golden.py`` from main's code
before the report was rewritten; the frames come from ``report_golden_cases.CASES`` (seeded). Equality is exact:
JSON keeps every float's repr, so a changed last digit fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_api.stats.report import SECTIONS, build_report
from tests.stats.report_golden_cases import CASES

GOLDEN = Path(__file__).resolve().parent / "data" / "report_golden"


def _diff(expected: Any, got: Any, path: str = "") -> str | None:
    """The first place where two JSON values differ (for a readable failure), None when equal."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if list(expected) != list(got):
            return f"{path}: keys {list(expected)} != {list(got)}"
        for key in expected:
            found = _diff(expected[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{path}: {len(expected)} entries != {len(got)}"
        for i, (a, b) in enumerate(zip(expected, got, strict=True)):
            found = _diff(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if type(expected) is not type(got) or expected != got:
        return f"{path}: {expected!r} != {got!r}"
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_equals_the_golden_report(name: str) -> None:
    frame, ratings, kwargs = CASES[name]()
    expected = json.loads((GOLDEN / f"{name}.json").read_text())
    got = json.loads(json.dumps(build_report(frame, ratings, **kwargs), allow_nan=False))
    assert tuple(got) == SECTIONS
    for section in SECTIONS:
        assert _diff(expected[section], got[section], section) is None, _diff(expected[section], got[section], section)


def test_the_comparison_sees_a_changed_last_digit() -> None:
    expected = json.loads((GOLDEN / "synthetic_6000.json").read_text())
    changed = json.loads(json.dumps(expected))
    low = changed["scores"][0]["ci_low"]
    changed["scores"][0]["ci_low"] = low + abs(low) * 1e-15 + 1e-300
    assert _diff(expected, changed) is not None
    assert _diff(expected, expected) is None
