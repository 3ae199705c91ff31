"""Session 58's shortcuts in the report's sections (issue 39: a 10M-row report read in parts), each pinned to the
definition it replaces: the same figures to the last bit, for every input the definition takes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from judge_api.stats import frames as F
from judge_api.stats.agreement import average_ranks, correlations, spearman
from judge_api.stats.parts import RunParts
from judge_api.stats.report import _COST_TOTALS, BATCH_SAVED_NOISE, cost_sums
from judge_api.stats.scores import PAPER_ITEM_COLUMNS, _scale_width, _scale_widths, item_scores, paper_items
from judge_api.stats.status_counts import status_counts_frame
from judge_api.stats.synthetic import synthetic_judgments
from tests.stats.test_stats_report_shortcuts import _status_counts_by_group_by


def _scipy_spearman(x: np.ndarray, y: np.ndarray) -> tuple[float | None, float | None]:
    res = sps.spearmanr(x, y)
    stat, p = float(res[0]), float(res[1])
    return (stat if np.isfinite(stat) else None), (p if np.isfinite(p) else None)


VALUES = st.lists(st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, 7.0, -3.25, 1e9, 5e-324]), min_size=2, max_size=60)


@settings(max_examples=200, deadline=None)
@given(VALUES, VALUES)
def test_spearman_is_scipys_to_the_last_bit(xs: list[float], ys: list[float]) -> None:
    n = min(len(xs), len(ys))
    x, y = np.array(xs[:n]), np.array(ys[:n])
    got = spearman(x, y)
    if np.all(x == x[0]) or np.all(y == y[0]):
        assert got == (None, None)
        return
    assert got == _scipy_spearman(x, y)
    assert np.array_equal(average_ranks(x), sps.rankdata(x))


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.arange(200_000) % 10 * 1.0, np.arange(200_000) % 997 * 1.0),  # few distinct scores, many lengths
        (np.random.default_rng(1).normal(size=5000), np.random.default_rng(2).normal(size=5000)),  # no ties
        (np.r_[np.zeros(40), np.ones(40)], np.r_[np.ones(40), -np.zeros(40)]),  # -0.0 ties 0.0, as in a sort
        (np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])),  # three rows: one degree of freedom
    ],
)
def test_spearman_on_large_and_tied_inputs(x: np.ndarray, y: np.ndarray) -> None:
    assert spearman(x, y) == _scipy_spearman(x, y)


def test_spearman_leaves_out_rows_not_finite_and_is_none_below_two() -> None:
    x = np.array([1.0, np.nan, 2.0, 3.0, np.inf, 4.0])
    y = np.array([2.0, 5.0, 1.0, 4.0, 1.0, 3.0])
    ok = np.isfinite(x) & np.isfinite(y)
    assert spearman(x, y) == _scipy_spearman(x[ok], y[ok])
    two = (np.array([1.0, 2.0]), np.array([2.0, 1.0]))
    assert spearman(*two) == _scipy_spearman(*two)  # scipy's figures from two rows on (review r58a)
    assert spearman(np.array([1.0]), np.array([2.0])) == (None, None)
    assert spearman(np.array([1.0, 1.0, 1.0]), np.array([2.0, 1.0, 3.0])) == (None, None)


def test_correlations_take_the_same_spearman_and_permutation_p_below_30() -> None:
    rng = np.random.default_rng(5)
    big_x, big_y = rng.integers(1, 6, 400).astype(float), rng.integers(1, 6, 400).astype(float)
    got = correlations(big_x, big_y)
    assert (got["spearman"], got["spearman_p"]) == _scipy_spearman(big_x, big_y)
    small_x, small_y = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    small = correlations(small_x, small_y)
    assert small["spearman"] == pytest.approx(1.0)
    assert small["spearman_p"] == pytest.approx(1 / 60)  # the exact permutation p, not the t approximation


STATUS_VALUES = [*F.STATUSES, None]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(STATUS_VALUES), st.sampled_from(["b", "a", None]), st.sampled_from(["x", "y"])),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from(["str", "categories"]),
)
def test_status_counts_by_code_equal_the_group_by(rows: list[tuple[Any, Any, str]], kind: str) -> None:
    """A missing status counts in n_total only; a missing key leaves its row out; both as the group-by does."""
    df = pd.DataFrame(rows, columns=["status", "k1", "k2"]).astype("str")
    if kind == "categories":
        df = F.encode_strings(df, ("status", "k1", "k2"))
    keys = {"k1": df["k1"], "k2": df["k2"]}
    got = status_counts_frame(df["status"], keys)
    pd.testing.assert_frame_equal(got, _status_counts_by_group_by(df["status"], keys))


def test_status_counts_of_wide_keys_take_the_sorting_path_with_the_same_counts() -> None:
    """Two keys of 3,000 categories each: 9M groups could be named, more than a bincount should span for 6 rows."""
    categories = [f"c{i:04d}" for i in range(3000)]
    status = pd.Series(["done", "failed", "done", "running", None, "cancelled"], dtype="str")
    keys = {
        "k1": pd.Series(pd.Categorical(["c0001", "c2999", "c0001", "c0500", "c0500", "c2999"], categories=categories)),
        "k2": pd.Series(pd.Categorical(["c0002", "c0000", "c0002", "c0001", "c0001", "c0000"], categories=categories)),
    }
    got = status_counts_frame(status, keys)
    pd.testing.assert_frame_equal(got, _status_counts_by_group_by(status, keys))


def _cost_sums_by_definition(df: pd.DataFrame, rows: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """b3c1d0e's ``_cost_sums`` of ``rows``: ``np.nansum`` per column, ``np.nan_to_num`` in the batch saving."""

    def col(name: str) -> np.ndarray:
        return np.asarray(df[name].to_numpy()[rows], dtype="float64")

    totals = {name: float(np.nansum(col(name))) for name in _COST_TOTALS}  # the columns, not how they are summed
    listed = col(F.LIST_COST_USD)
    listed = np.where(np.isfinite(listed), listed, col(F.COST_USD))
    totals["listed"] = float(np.nansum(listed))
    batch = np.nan_to_num(listed) - np.nan_to_num(col(F.COST_USD)) - np.nan_to_num(col(F.CACHE_SAVED_USD))
    batch = np.where(batch > BATCH_SAVED_NOISE * np.abs(np.nan_to_num(listed)), batch, 0.0)
    totals["batch_saved"] = float(batch.sum())
    called = (df[F.STATUS].isin(F.FINISHED_STATUSES) & df[F.SOURCE].isna()).to_numpy()[rows]
    means = {}
    for name in (F.INPUT_TOKENS, F.OUTPUT_TOKENS, F.COST_USD, F.LATENCY_MS):
        vals = col(name)[called]
        means[name] = float(vals[np.isfinite(vals)].sum())
    return totals, means


@pytest.mark.parametrize("holes", ["none", "nan", "nan and inf"])
def test_cost_sums_equal_the_definition_to_the_last_bit(holes: str) -> None:
    df = F.validate_judgments(synthetic_judgments(6000, seed=8))
    rng = np.random.default_rng(4)
    n = len(df)
    df[F.LIST_COST_USD] = df[F.COST_USD] * rng.choice([1.0, 2.0, 1.0000000001], n)
    df[F.CACHE_SAVED_USD] = rng.random(n) * 1e-4
    if holes != "none":
        for name in (F.COST_USD, F.LIST_COST_USD, F.CACHE_SAVED_USD, F.LATENCY_MS):
            values = df[name].to_numpy(dtype="float64").copy()
            values[rng.random(n) < 0.1] = np.nan
            if holes == "nan and inf":
                values[rng.random(n) < 0.02] = rng.choice([np.inf, -np.inf])
            df[name] = values
    with np.errstate(invalid="ignore", over="ignore"):  # an infinite price overflows the batch saving, as it did
        overall, per_judge = cost_sums(df)
        blocks = [(overall, np.ones(n, dtype=bool))]
        blocks += [(per_judge[str(j)], (df[F.JUDGE] == j).to_numpy()) for j in df[F.JUDGE].unique()]
        for sums, rows in blocks:
            totals, means = _cost_sums_by_definition(df, rows)
            assert repr(sums.totals) == repr(totals)  # repr: NaN equals NaN, -0.0 is not 0.0
            assert repr(sums.mean_sums) == repr(means)


def test_scale_widths_are_each_blocks_scale_width() -> None:
    items = item_scores(synthetic_judgments(5000, seed=2))
    items.loc[items.index[:50], [F.SCALE_MIN, F.SCALE_MAX]] = np.nan  # a block partly without a scale
    widths = _scale_widths(items)
    expected = {key: _scale_width(group) for key, group in items.groupby([F.ASPECT, F.JUDGE], sort=False)}
    assert widths == expected
    assert None not in widths.values() or any(v is None for v in expected.values())


def test_paper_items_keep_the_columns_their_readers_read() -> None:
    items = item_scores(synthetic_judgments(5000, seed=3))
    used, _ = paper_items(items)
    assert list(used.columns) == PAPER_ITEM_COLUMNS
    assert list(paper_items(items.iloc[:0])[0].columns) == PAPER_ITEM_COLUMNS


def test_parts_with_the_same_categories_join_as_parts_with_others() -> None:
    """A part whose categories begin the union's keeps its own codes; any other is recoded: the same frame."""
    frame = F.encode_strings(F.validate_judgments(synthetic_judgments(3000, seed=6)), F.ENCODED_COLUMNS)
    frame.attrs[F.ENCODED] = True
    same, other = RunParts(), RunParts()
    for part in (frame.iloc[:1000], frame.iloc[1000:]):
        same.add(part)
    plain = F.validate_judgments(synthetic_judgments(3000, seed=6))
    for part in (plain.iloc[:1000], plain.iloc[1000:]):  # each part's own, fewer categories
        other.add(part)
    joined, recoded = same.frame(), other.frame()
    for col in ("item_id", "system_a", "judge", "outcome"):
        pd.testing.assert_series_equal(joined[col], recoded[col])
        assert joined[col].cat.categories.is_monotonic_increasing


@st.composite
def _member_frames(draw: Any) -> pd.DataFrame:
    """Two or three judges' single and pairwise rows over a few items, some keys missing, some rows not done."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    judges = ["j1", "j2", "j3"][: draw(st.integers(2, 3))]
    rows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        for judge in judges:
            for system in ("s1", "s2", "s3"):
                for aspect in ("coherence", "consistency"):
                    if rng.random() < 0.3:
                        continue
                    done = rng.random() < 0.8
                    rows.append(
                        {
                            "item_id": f"i{i}" if rng.random() > 0.05 else None,
                            "mode": "single",
                            "system_a": system,
                            "aspect": aspect if rng.random() > 0.05 else None,
                            "judge": judge,
                            "status": "done" if done else "failed",
                            "score": float(rng.integers(1, 11)) if done else np.nan,
                            "scale_min": 1.0,
                            "scale_max": 10.0,
                        }
                    )
            for a, b in (("s1", "s2"), ("s1", "s3")):
                for order in ("ab", "ba"):
                    if rng.random() < 0.3:
                        continue
                    rows.append(
                        {
                            "item_id": f"i{i}",
                            "mode": "pairwise",
                            "system_a": a,
                            "system_b": b,
                            "aspect": "overall",
                            "judge": judge,
                            "order": order,
                            "status": "done",
                            "preference": float(rng.choice([-2, 0, 2])),
                        }
                    )
    return F.validate_judgments(pd.DataFrame(rows)) if rows else F.empty_judgments()


@settings(max_examples=120, deadline=None)
@given(_member_frames(), st.sampled_from(["sorted", "unsorted and unused"]), st.sampled_from([None, 1, 2, 3]))
def test_panel_coverage_on_codes_equals_the_merge(frame: pd.DataFrame, categories: str, quorum: int | None) -> None:
    from judge_api.stats import panel

    frame = F.encode_strings(frame)
    if categories == "unsorted and unused":
        for col in ("item_id", "system_a", "system_b", "aspect"):
            cats = list(frame[col].cat.categories)
            frame[col] = frame[col].cat.set_categories(["zz-unused", *reversed(cats)])
    members = sorted({str(j) for j in frame["judge"].dropna()})
    if len(members) < 2:
        return
    original = panel._coverage_rows_by_code
    taken: list[bool] = []

    def recorded(*args: Any) -> Any:
        out = original(*args)
        taken.append(out is not None)
        return out

    try:
        panel._coverage_rows_by_code = recorded  # type: ignore[assignment]
        got = panel.panel_coverage(frame, members, quorum)
        assert taken[0]  # the single units of a run's frame: always on codes
        panel._coverage_rows_by_code = lambda *args: None
        expected = panel.panel_coverage(frame, members, quorum)
    finally:
        panel._coverage_rows_by_code = original
    assert got == expected


def test_coverage_codes_match_judged_units_by_value_not_by_code() -> None:
    """Judged units whose categories differ from the asked ones': matched by value; a value the asked units never
    have matches nothing (not the units whose value is missing, which share the missing code)."""
    from judge_api.stats import panel

    asked_items = pd.Series(pd.Categorical(["a", "b", None, "c"], categories=["a", "b", "c"]))
    asked_aspect = pd.Series(pd.Categorical(["x"] * 4, categories=["x"]))
    judged = pd.DataFrame(
        {
            "item_id": pd.Categorical(["c", "zz", "a"], categories=["zz", "c", "a"]),
            "aspect": pd.Categorical(["x", "x", "x"], categories=["x", "y"]),
            "verdict": [True, True, False],
            "split": [False, False, True],
        }
    )
    rows = panel._coverage_rows_by_code(
        [asked_items, asked_aspect], np.ones(4, dtype=bool), judged, ["item_id", "aspect"], "single"
    )
    assert rows == [
        {
            "mode": "single",
            "aspect": "x",
            "n_units": 4,
            "n_verdicts": 1,  # c
            "n_below_quorum": 2,  # b and the unit without an item ("zz" is not it)
            "n_split": 1,  # a
            "coverage": 0.25,
        }
    ]


def _group_scale_by_frame(items: pd.DataFrame) -> tuple[float, float]:
    """b3c1d0e's ``scores._group_scale`` of one group's frame (the definition ``_scale_of`` keeps)."""
    lo = items[F.SCALE_MIN].dropna()
    hi = items[F.SCALE_MAX].dropna()
    lo_v = float(lo.iloc[0]) if len(lo) else float(items[F.SCORE].min())
    hi_v = float(hi.iloc[0]) if len(hi) else float(items[F.SCORE].max())
    return lo_v, hi_v


SCALE_VALUES = st.sampled_from([np.nan, 1.0, 0.0, -0.0, 10.0, np.inf])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([np.nan, 3.0, 7.5, -0.0]), SCALE_VALUES, SCALE_VALUES), min_size=1))
def test_a_groups_scale_from_arrays_is_its_frames(rows: list[tuple[float, float, float]]) -> None:
    from judge_api.stats.scores import _scale_of

    frame = pd.DataFrame(rows, columns=[F.SCORE, F.SCALE_MIN, F.SCALE_MAX])
    got = _scale_of(*(frame[c].to_numpy(dtype="float64") for c in (F.SCORE, F.SCALE_MIN, F.SCALE_MAX)))
    assert repr(got) == repr(_group_scale_by_frame(frame))


@pytest.mark.parametrize(
    "codes",
    [
        [5, 3, 5, 0, 3, 9],
        [2**31 - 1, -(2**31), 0, 2**31 - 1],  # the int32 bounds: narrowed
        [2**31, 1, 2**31, 7],  # past them: hashed as int64
        [-(2**31) - 1, 4, 4],
        [],
    ],
)
def test_factorize_codes_equal_pandas(codes: list[int]) -> None:
    array = np.array(codes, dtype=np.int64)
    labels, uniques = F.factorize_codes(array)
    expected_labels, expected_uniques = pd.factorize(array)
    assert np.array_equal(labels, expected_labels)
    assert np.array_equal(uniques, expected_uniques) and uniques.dtype == np.int64
