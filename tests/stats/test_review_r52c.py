"""Review r52c of 2e7a36c (issue 39): ``validate_judgments`` promises a copy of the caller's frame (every column the
validated frame's own; a write to either frame never reaches the other, through any API, ``Series.array``
included), except for the repository's frame (``frame_columns.to_pandas``, marked ``F.OWNED``). Each test here fails
on 2e7a36c; each docstring states the promise it breaks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F
from tests.stats.test_review_r52b import _repository_frame


def _small(strings: object) -> pd.DataFrame:
    base = {"item_id": ["a", "b", "c"], "mode": "single", "system_a": "s", "aspect": "x", "judge": "j"}
    d = pd.DataFrame({**base, "status": "done", "score": [1.0, 2.0, 3.0]})
    for column in ("item_id", "system_a", "aspect", "judge"):
        d[column] = d[column].astype(strings)
    return d


PYTHON_STRINGS = [pd.StringDtype("python"), pd.StringDtype("python", na_value=np.nan)]


@pytest.mark.parametrize("strings", PYTHON_STRINGS, ids=["string[python]", "str[python]"])
def test_a_write_through_series_array_of_a_python_string_column_does_not_reach_the_validated_frame(
    strings: pd.StringDtype,
) -> None:
    """BUG (review r52c, 2e7a36c, minor): promise "a copy of the caller's frame ... a write to either frame never
    reaches the other, through any API, including ``Series.array``" (non-OWNED frame). ``_as_str`` keeps a column
    that already is a ``StringDtype`` as it is (``series.reset_index(drop=True)``) and ``text()`` copies only
    categoricals, so a python-storage string column (``string[python]``, ``str`` with python storage: a mutable
    numpy object array) is the caller's ExtensionArray itself: ``caller["judge"].array[0] = "other"`` renames the
    judge in the validated frame (its every later group-by), although the frame was not marked OWNED."""
    d = _small(strings)
    out = F.validate_judgments(d)
    d["judge"].array[0] = "other"
    d["item_id"].array[1] = "zz"
    assert out["judge"].tolist() == ["j", "j", "j"]
    assert out["item_id"].tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("strings", PYTHON_STRINGS, ids=["string[python]", "str[python]"])
def test_a_write_through_series_array_of_the_validated_frame_does_not_reach_the_callers_string_column(
    strings: pd.StringDtype,
) -> None:
    """BUG (review r52c, 2e7a36c, minor): the same promise in the other direction: ``out["aspect"].array[0] = v``
    on the validated frame rewrites the caller's python-storage string column."""
    d = _small(strings)
    out = F.validate_judgments(d)
    out["aspect"].array[0] = "changed"
    assert d["aspect"].tolist() == ["x", "x", "x"]


@pytest.mark.parametrize("how", ["setitem", "assign"])
def test_owned_does_not_follow_the_repository_frame_onto_a_column_of_the_callers_numpy_array(how: str) -> None:
    """BUG (review r52c, 2e7a36c, minor: no path in judge_api/ or dashboard/ does this; a library caller may):
    promise "OWNED is set only by ``to_pandas`` on the repository's frame; any other frame's columns are copied,
    numpy arrays the caller built its frame from included". ``attrs`` follow the frame through ``__setitem__`` /
    ``assign``, so the repository's frame with a column replaced by the caller's numpy data
    (``pd.Series(arr, copy=False)``) is still marked OWNED, and ``validate_judgments`` shares that column: a later
    ``arr[0] = v`` changes the validated frame (copy-on-write does not see numpy writes). The frame's arrays are no
    longer "its own", as ``OWNED`` asserts; the old code (and any unmarked frame) kept a copy."""
    frame = _repository_frame()
    cost = np.linspace(0.0, 1.0, len(frame))
    if how == "setitem":
        frame["cost_usd"] = pd.Series(cost, copy=False)
    else:
        frame = frame.assign(cost_usd=pd.Series(cost, copy=False))
    out = F.validate_judgments(frame)
    expected = out["cost_usd"].to_numpy(copy=True)
    cost[0] = 123.0
    np.testing.assert_array_equal(out["cost_usd"].to_numpy(), expected)
