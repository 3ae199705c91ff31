"""Session 59's shortcuts in the report's sections (issue 39: a 10M-row report read in parts), each pinned to the
definition it replaces: the same figures to the last bit, for every input the definition takes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats.grouped import aggregated, sorted_groups, unique_inverse
from judge_api.stats.krippendorff import _sorted_values, krippendorff_alpha_long
from judge_api.stats.panel import Aggregate, _both, pairwise_votes, panel_coverage, panel_rows
from judge_api.stats.preferences import combine_orders
from judge_api.stats.ranking import _item_contributions
from judge_api.stats.scores import item_scores
from tests.stats.test_report_speed_r58 import _member_frames

FLOATS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e308, -1e308, 5e-324, 1 / 3, 0.1, 1e16, 1.0, 2.5]


@st.composite
def _keyed_frames(draw: Any) -> pd.DataFrame:
    """Three categorical keys (categories in any order, some unused), floats with every kind of hole, whole numbers
    and booleans; many rows to a group or one."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    n = draw(st.integers(0, 300))
    columns: dict[str, Any] = {}
    for name in ("a", "b", "c"):
        k = draw(st.integers(1, 5))
        categories = [f"{name}{i}" for i in range(k + draw(st.integers(0, 2)))]
        if draw(st.booleans()):
            categories = categories[::-1]
        columns[name] = pd.Categorical.from_codes(rng.integers(0, k, n), categories=categories)
    if draw(st.booleans()):
        columns["v"] = rng.choice(np.array(FLOATS), n)
    else:
        columns["v"] = rng.normal(size=n) * 10.0 ** rng.integers(-5, 15, n)
    columns["w"] = rng.integers(-3, 4, n)
    columns["flag"] = rng.random(n) < 0.5
    columns["f"] = np.where(rng.random(n) < 0.2, np.nan, rng.integers(-1, 2, n).astype("float64"))
    return pd.DataFrame(columns)


SPEC = {
    "mean": ("v", "mean"),
    "median": ("v", "median"),
    "low": ("v", "min"),
    "high": ("v", "max"),
    "w": ("w", "sum"),
    "flags": ("flag", "sum"),
    "f": ("f", "sum"),
    "n": ("v", "size"),
}


@settings(max_examples=300, deadline=None)
@given(_keyed_frames(), st.booleans())
def test_aggregated_is_the_group_by_to_the_last_bit(frame: pd.DataFrame, sort: bool) -> None:
    expected = frame.groupby(["a", "b", "c"], sort=sort).agg(**SPEC).reset_index()
    got = aggregated(frame, ["a", "b", "c"], SPEC, sort=sort)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    for name in ("mean", "median", "low", "high", "f"):  # -0.0 is not 0.0
        assert np.array_equal(np.signbit(got[name].to_numpy()), np.signbit(expected[name].to_numpy()))


@pytest.mark.parametrize("hole", ["a missing key", "a string key", "keys of many more values than rows"])
def test_aggregated_groups_with_pandas_where_the_codes_cannot(hole: str) -> None:
    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame(
        {
            "a": pd.Categorical(rng.choice(["x", "y", "z"], n)),
            "b": pd.Categorical(rng.choice(["p", "q"], n)),
            "v": rng.normal(size=n),
        }
    )
    if hole == "a missing key":
        frame.loc[::7, "a"] = None
    elif hole == "a string key":
        frame["b"] = frame["b"].astype(str)
    else:
        frame["b"] = pd.Categorical(frame["b"].astype(str), categories=[f"c{i}" for i in range(5000)] + ["p", "q"])
        frame["a"] = pd.Categorical(frame["a"].astype(str), categories=[f"d{i}" for i in range(500)] + ["x", "y", "z"])
    keys = [frame[k] for k in ("a", "b")]
    assert sorted_groups(keys) is None
    spec = {"mean": ("v", "mean"), "n": ("v", "size")}
    expected = frame.groupby(["a", "b"], sort=True).agg(**spec).reset_index()
    pd.testing.assert_frame_equal(aggregated(frame, ["a", "b"], spec), expected, check_exact=True)


def test_aggregated_refuses_a_function_it_does_not_make() -> None:
    frame = pd.DataFrame({"a": pd.Categorical(["x", "y"]), "v": [1.0, 2.0]})
    with pytest.raises(ValueError, match="'std' is not one of"):
        aggregated(frame, ["a"], {"s": ("v", "std")})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 2**40), max_size=200), st.booleans())
def test_unique_inverse_is_numpys(keys: list[int], small: bool) -> None:
    array = np.array([k % 1000 for k in keys] if small else keys, dtype=np.int64)
    values, inverse = unique_inverse(array)
    expected_values, expected_inverse = np.unique(array, return_inverse=True)
    assert np.array_equal(values, expected_values)
    assert np.array_equal(inverse, expected_inverse)
    assert values.dtype == expected_values.dtype


@pytest.mark.parametrize(
    "series",
    [
        pd.Series(["a", "b", None, "a"], dtype="category"),
        pd.Series(pd.Categorical(["b", "a"], categories=["b", "a", "c"])),
        pd.Series(["a", "b", None, "a"], dtype="str"),
        pd.Series(["a", "b", None, "a"], dtype=object),
        pd.Series([], dtype="category"),
    ],
)
@pytest.mark.parametrize("value", ["a", "c", "z"])
def test_is_value_is_the_comparison(series: pd.Series, value: str) -> None:
    assert np.array_equal(F.is_value(series, value), (series == value).to_numpy(dtype=bool))
    assert F.is_value(series, value).dtype == bool


def _both_by_definition(grp: pd.DataFrame, a: str, b: str, value: str) -> tuple[np.ndarray, np.ndarray]:
    judge = grp[F.JUDGE].to_numpy()
    keys = grp["unit_key"].to_numpy("int64")
    values = grp[value].to_numpy("float64")
    sides = [((judge == name) & np.isfinite(values)) for name in (a, b)]
    (ka, va), (kb, vb) = ((keys[m], values[m]) for m in sides)
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    return va[ia], vb[ib]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([10, 1000, 2**45]), st.booleans())
def test_both_judges_units_are_intersect1ds(seed: int, spread: int, categorical: bool) -> None:
    rng = np.random.default_rng(seed)
    n_units = int(rng.integers(0, 60))
    keys = rng.choice(max(spread, n_units), n_units, replace=False).astype(np.int64)
    rows = []
    for judge in ("ja", "jb", "jc"):
        mine = keys[rng.random(n_units) < 0.7]
        rng.shuffle(mine)
        for k in mine:
            rows.append((judge, int(k), rng.choice([np.nan, np.inf, 0.25, -0.0, 3.0])))
    grp = pd.DataFrame(rows, columns=[F.JUDGE, "unit_key", "unit"])
    grp["unit_key"] = grp["unit_key"].astype("int64")
    if categorical:
        grp[F.JUDGE] = grp[F.JUDGE].astype("category")
    got = _both(grp, "ja", "jb", "unit")
    expected = _both_by_definition(grp, "ja", "jb", "unit")
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g, e) and np.array_equal(np.signbit(g), np.signbit(e))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 0.25, 1e300, -7.5, 5e-324, 3.0]), max_size=80))
def test_sorted_values_are_unique_and_searchsorted(values: list[float]) -> None:
    x = np.array(values, dtype="float64")
    got_values, got_codes = _sorted_values(x)
    expected_values = np.sort(pd.unique(x))
    assert np.array_equal(got_values, expected_values)
    assert np.array_equal(np.signbit(got_values), np.signbit(expected_values))
    assert np.array_equal(got_codes, np.searchsorted(expected_values, x))


def test_krippendorff_alpha_keeps_its_published_value() -> None:
    # Krippendorff (2011), the nominal example with missing values: alpha = 0.743
    data = np.array(
        [
            [1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
            [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan],
        ]
    )
    units = np.broadcast_to(np.arange(data.shape[1]), data.shape).ravel()
    assert round(krippendorff_alpha_long(units, data.ravel(), "nominal") or 0.0, 3) == 0.743


def _wtl_by_definition(combined: pd.DataFrame, systems: list[str]) -> np.ndarray:
    index = {name: i for i, name in enumerate(systems)}
    a = combined[F.SYSTEM_A].map(index).to_numpy(dtype=np.int64)
    b = combined[F.SYSTEM_B].map(index).to_numpy(dtype=np.int64)
    outcome = combined[F.OUTCOME].to_numpy()

    def count(side: np.ndarray, label: str) -> np.ndarray:
        return np.bincount(side[outcome == label], minlength=len(systems))

    return np.stack(
        [
            count(a, F.WIN) + count(b, F.LOSS),
            count(a, F.TIE) + count(b, F.TIE),
            count(a, F.LOSS) + count(b, F.WIN),
        ]
    ).astype(np.int64)


@pytest.mark.parametrize("encoded", [False, True])
def test_bradley_terry_counts_are_the_definitions(encoded: bool) -> None:
    rng = np.random.default_rng(5)
    n = 500
    systems = ["s1", "s2", "s3", "s4"]
    pairs = [tuple(rng.choice(systems, 2, replace=False)) for _ in range(n)]
    combined = pd.DataFrame(
        {
            F.ITEM_ID: [f"i{k % 40}" for k in range(n)],
            F.SYSTEM_A: [p[0] for p in pairs],
            F.SYSTEM_B: [p[1] for p in pairs],
            # an outcome that is none of the three counts nowhere and wins nothing, as it did
            F.OUTCOME: rng.choice(np.array([F.WIN, F.TIE, F.LOSS, "tie_inconsistent", None], dtype=object), n),
        }
    )
    if encoded:
        combined = F.encode_strings(combined, (F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.OUTCOME))
    contrib, wtl = _item_contributions(combined, systems)
    assert np.array_equal(wtl, _wtl_by_definition(combined, systems))
    outcome = combined[F.OUTCOME].to_numpy()
    win_a = np.where(outcome == F.WIN, 1.0, np.where(outcome == F.TIE, 0.5, 0.0))
    halves = np.asarray(contrib.sum(axis=1)).ravel()
    item = pd.factorize(combined[F.ITEM_ID])[0]
    assert np.array_equal(halves, np.bincount(item, weights=win_a + (1.0 - win_a)))


@settings(max_examples=80, deadline=None)
@given(_member_frames(), st.sampled_from([None, 1, 2, 3]), st.sampled_from(["mean", "median"]))
def test_the_panel_made_of_given_votes_is_the_panel(frame: pd.DataFrame, quorum: int | None, how: Aggregate) -> None:
    members = sorted(F.distinct(frame[F.JUDGE]))
    encoded = F.encode_strings(frame)
    items, combined = item_scores(encoded, validated=True), combine_orders(encoded, validated=True)
    votes = pairwise_votes(combined, members)
    kwargs: dict[str, Any] = {"quorum": quorum, "items": items, "combined": combined, "encoded": True}
    pd.testing.assert_frame_equal(
        panel_rows(encoded, members, how, votes=votes, **kwargs), panel_rows(encoded, members, how, **kwargs)
    )
    with_votes = panel_coverage(encoded, members, quorum, items=items, combined=combined, votes=votes)
    assert with_votes == panel_coverage(encoded, members, quorum, items=items, combined=combined)
    assert with_votes == panel_coverage(frame, members, quorum)  # plain strings: the group-by and the merge
