"""Issue 39: the columnar report gives exactly what the row-by-row report gave on main, every section, CIs included.

The expected reports (``data/report_golden/*.json``) were written by ``make_report_golden.py`` from main's code
before the report was rewritten; the frames come from ``report_golden_cases.CASES`` (seeded). Equality is exact
for every string, int, bool and None, and for floats to ``FLOAT_RTOL`` (p-values to ``P_VALUE_RTOL``): JSON keeps
every float's repr, but numpy's vectorised loops (sums, exp / log in the Bradley-Terry fit, the correlations) are
dispatched by CPU (AVX2, AVX-512), and another CPU rounds a few of them differently in the last place (seen on an AMD
EPYC against the goldens written on another machine, review r39e: ranking up to 8 units in the last place, panel 1;
a p-value amplifies one unit of its statistic: ``agreement.scores[].pearson_p`` moved 417 units, 5.2e-14). A changed
statistic or a changed bootstrap draw moves figures by 1e-4 and more, far beyond either tolerance; an infinity is
never close to a finite figure."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judge_api.stats.report import SECTIONS, build_report
from tests.stats.report_golden_cases import CASES

GOLDEN = Path(__file__).resolve().parent / "data" / "report_golden"
FLOAT_RTOL = 1e-13
"""Relative tolerance of a float (~450 units in the last place): far above a CPU's rounding of a statistic, far below
any real change."""
P_VALUE_RTOL = 1e-9
"""Relative tolerance of a p-value (a field named ``p`` or ending in ``_p``): one unit in the last place of the
statistic moves it up to ~1e-12 (r = 0.9, n = 199: 2.1e-13)."""


def _same_float(a: float, b: float, rtol: float = FLOAT_RTOL) -> bool:
    if a == b:
        return True
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rtol * max(abs(a), abs(b))


def _is_p_value(path: str) -> bool:
    name = path.rsplit(".", 1)[-1]
    return name == "p" or name.endswith("_p")


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
    rtol = P_VALUE_RTOL if _is_p_value(path) else FLOAT_RTOL
    if isinstance(expected, float) and isinstance(got, float) and _same_float(expected, got, rtol):
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


def test_the_comparison_sees_a_changed_figure_and_not_a_cpus_last_place() -> None:
    expected = json.loads((GOLDEN / "synthetic_6000.json").read_text())
    assert _diff(expected, expected) is None
    low = expected["scores"][0]["ci_low"]
    for moved, seen in ((low + abs(low) * 1e-11, True), (float(np.nextafter(np.nextafter(low, 0.0), 0.0)), False)):
        changed = json.loads(json.dumps(expected))
        changed["scores"][0]["ci_low"] = moved
        assert (_diff(expected, changed) is not None) is seen, moved
    changed = json.loads(json.dumps(expected))
    changed["scores"][0]["n"] += 1  # counts stay exact
    assert _diff(expected, changed) is not None


@pytest.mark.parametrize(("expected", "got"), [(1.0, math.inf), (-3.5, -math.inf), (math.inf, -math.inf)])
def test_the_comparison_sees_a_figure_become_infinite(expected: float, got: float) -> None:
    assert _diff(expected, got, "x") is not None
    assert _diff({"pearson_p": expected}, {"pearson_p": got}) is not None


def test_a_p_value_moved_by_one_unit_of_its_statistic_passes_and_a_changed_one_does_not() -> None:
    from scipy import stats as sps

    n, r = 199, 0.9
    null = sps.beta(n / 2 - 1, n / 2 - 1, loc=-1, scale=2)  # scipy.stats.pearsonr's null law of r
    p0, p1 = float(2 * null.sf(r)), float(2 * null.sf(float(np.nextafter(r, 1.0))))
    assert p0 != p1
    assert _diff({"pearson_p": p0}, {"pearson_p": p1}) is None
    assert _diff({"pearson_p": p0}, {"pearson_p": p0 * (1 + 1e-7)}) is not None
    assert _diff({"pearson": 0.9}, {"pearson": 0.9 * (1 + 1e-11)}) is not None  # other floats stay tight
