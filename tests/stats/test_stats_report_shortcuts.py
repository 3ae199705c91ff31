"""The report's shortcuts give what the code they replace gave (issue 39): outcome codes looked up per distinct
value, unit numbers counted instead of sorted, a missing string column filled encoded, the paper items found once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats.krippendorff import _ranks, coincidence_matrix
from judge_api.stats.scores import item_scores, paper_cell_counts, paper_items, paper_table
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
