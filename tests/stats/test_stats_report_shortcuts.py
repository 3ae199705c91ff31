"""The report's shortcuts give what the code they replace gave (issue 39): outcome codes looked up per distinct
value, unit numbers counted instead of sorted, a missing string column filled encoded, the paper items found once,
groups numbered on integer codes, distinct values hashed, the intervals drawn on threads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import bootstrap
from judge_api.stats import frames as F
from judge_api.stats.bootstrap import map_in_order
from judge_api.stats.krippendorff import _ranks, _sorted_values, coincidence_matrix
from judge_api.stats.report import build_report
from judge_api.stats.scores import item_scores, paper_cell_counts, paper_items, paper_table
from judge_api.stats.status_counts import status_counts_frame
from judge_api.stats.synthetic import synthetic_judgments

OUTCOME_SERIES = [
    pd.Series(["win", "tie", None, "loss", "bogus"], dtype="str"),
    pd.Series(["win", "tie", None, "loss"], dtype=object),
    pd.Series(["loss", None, "win", "win"], dtype="str").astype("category"),
    pd.Series(["tie", "tie"], dtype="str").astype("category").cat.add_categories(["win"]),
    pd.Series([], dtype="str"),
    pd.Series([None, None], dtype=object),
]


@pytest.mark.parametrize("outcomes", OUTCOME_SERIES)
def test_outcome_codes_equal_the_map_they_replace(outcomes: pd.Series) -> None:
    got = F.outcome_codes(outcomes)
    expected = outcomes.map(F.OUTCOME_CODE).to_numpy(dtype="float64")
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=200))
def test_ranks_equal_the_inverse_of_unique(codes: list[int]) -> None:
    u = np.asarray(codes, dtype=np.int64)
    np.testing.assert_array_equal(_ranks(u), np.unique(u, return_inverse=True)[1])


def test_coincidence_matrix_on_sparse_unit_codes() -> None:
    # units 7 and 900 only: the counted numbering must give the two units 0 and 1, as sorting them did
    o, vals = coincidence_matrix([900, 7, 900, 7, 3], [1.0, 2.0, 1.0, 3.0, 5.0])
    np.testing.assert_array_equal(vals, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(o, [[2.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])


def test_a_missing_string_column_filled_encoded_equals_the_encoded_fill() -> None:
    frame = synthetic_judgments(200, seed=3).drop(columns=[F.RUN_ID, F.RUBRIC_VERSION, F.SOURCE])
    plain = F.encode_strings(F.validate_judgments(frame))
    encoded = F.validate_judgments(F.encode_strings(frame), encoded=True)
    for col in (F.RUN_ID, F.RUBRIC_VERSION, F.SOURCE):
        assert isinstance(encoded[col].dtype, pd.CategoricalDtype), col
        pd.testing.assert_series_equal(encoded[col], plain[col], check_names=True)
    assert encoded[F.RUN_ID].eq("").all() and encoded[F.SOURCE].isna().all()
    for col in (F.SAMPLE_INDEX, F.INPUT_TOKENS, F.LATENCY_MS):
        pd.testing.assert_series_equal(encoded[col], plain[col])


def test_paper_items_given_once_equal_the_tables_found_alone() -> None:
    items = item_scores(synthetic_judgments(3000, seed=5))
    paper = paper_items(items)
    pd.testing.assert_frame_equal(paper_table(None, items=items, paper=paper), paper_table(None, items=items))
    pd.testing.assert_frame_equal(paper_cell_counts(items, paper=paper), paper_cell_counts(items))
    judge = str(items[F.JUDGE].iloc[0])
    # one judge's table ignores the whole run's paper items: it finds its own
    pd.testing.assert_frame_equal(
        paper_table(None, judge, items=items, paper=paper), paper_table(None, judge, items=items)
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), st.integers(0, 3)),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_group_codes_equal_ngroup(rows: list[tuple[str, str, int]], encoded: bool) -> None:
    df = pd.DataFrame(rows, columns=["k1", "k2", "k3"]).astype({"k1": "str", "k2": "str"})
    if encoded:
        df = df.astype({"k1": "category", "k2": "category"})
    expected = df.groupby(["k1", "k2", "k3"], sort=False, observed=True).ngroup().to_numpy()
    got = F.group_codes(df, ["k1", "k2", "k3"])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(F.first_rows(got), np.unique(expected, return_index=True)[1])


def test_group_codes_renumber_before_the_product_overflows() -> None:
    # four keys of 2**17 distinct values each: their product passes 2**62, the codes must still be the groups'
    n = 2**17
    rng = np.random.default_rng(0)
    df = pd.DataFrame({f"k{i}": rng.permutation(n) for i in range(4)})
    df = pd.concat([df, df.iloc[:5]], ignore_index=True)  # five groups seen twice
    got = F.group_codes(df, ["k0", "k1", "k2", "k3"])
    np.testing.assert_array_equal(got[:n], np.arange(n))
    np.testing.assert_array_equal(got[n:], np.arange(5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.25, 1.0, 1 / 3, 7.5, -2.0]), min_size=1, max_size=80))
def test_sorted_values_equal_unique(values: list[float]) -> None:
    x = np.asarray(values, dtype="float64")
    vals, codes = _sorted_values(x)
    expected_vals, expected_codes = np.unique(x, return_inverse=True)
    np.testing.assert_array_equal(vals, expected_vals)
    np.testing.assert_array_equal(codes, expected_codes)


def test_map_in_order_gives_the_loops_results_and_raises_its_error() -> None:
    jobs = list(range(40))
    assert map_in_order(lambda k: k * k, jobs, threads=4) == [k * k for k in jobs]
    assert map_in_order(lambda k: k, [], threads=4) == []

    def fail_on_7(k: int) -> int:
        if k == 7:
            raise ValueError("job 7")
        return k

    with pytest.raises(ValueError, match="job 7"):
        map_in_order(fail_on_7, jobs, threads=4)


def test_the_report_on_threads_equals_the_report_in_one(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = synthetic_judgments(4000, seed=11)
    monkeypatch.setattr(bootstrap, "interval_threads", lambda: 1)
    one = build_report(frame, n_boot=200, seed=4)
    monkeypatch.setattr(bootstrap, "interval_threads", lambda: 4)
    assert build_report(frame, n_boot=200, seed=4) == one


def _status_counts_by_group_by(status: pd.Series, keys: dict[str, pd.Series]) -> pd.DataFrame:
    """The definition ``status_counts_frame`` keeps: one 0/1 column per status, grouped and summed."""
    flags = pd.DataFrame(
        {
            "n_total": np.ones(len(status), dtype="int64"),
            "n_done": (status == F.DONE).to_numpy().astype("int64"),
            "n_failed": (status == F.FAILED).to_numpy().astype("int64"),
            "n_unparseable": (status == F.UNPARSEABLE).to_numpy().astype("int64"),
            "n_pending": status.isin([F.PENDING, F.RUNNING]).to_numpy().astype("int64"),
            "n_cancelled": (status == F.CANCELLED).to_numpy().astype("int64"),
        }
    )
    for name, values in keys.items():
        flags[name] = values.reset_index(drop=True)
    return flags.groupby(list(keys), sort=True).sum().reset_index()[[*keys, *F.STATUS_COLUMNS]]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(F.STATUSES)),
            st.sampled_from(["b", "a", "c", None]),
            st.sampled_from(["x", "y"]),
        ),
        min_size=1,
        max_size=50,
    ),
    st.sampled_from(["str", "sorted categories", "unsorted categories"]),
)
def test_status_counts_equal_the_group_by(rows: list[tuple[str, str | None, str]], kind: str) -> None:
    df = pd.DataFrame(rows, columns=["status", "k1", "k2"]).astype("str")
    if kind == "sorted categories":
        df = F.encode_strings(df, ("status", "k1", "k2"))
    elif kind == "unsorted categories":
        df = df.astype({"k1": pd.CategoricalDtype(["c", "b", "a"]), "k2": pd.CategoricalDtype(["y", "x", "z"])})
    keys = {"k1": df["k1"], "k2": df["k2"]}
    expected = _status_counts_by_group_by(df["status"], keys)
    got = status_counts_frame(df["status"], keys)
    pd.testing.assert_frame_equal(got, expected)
