"""``frames.left_join`` is ``DataFrame.merge(how="left")`` joined on a categorical's codes (issue 39): the same rows in
the same order, the same columns and values, on hostile keys (missing on either side, unknown to the left, several
matches, collisions of other columns) and on frames it hands to pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F

NA = np.nan


def _left(keys: dict[str, list[object]], **other: list[object]) -> pd.DataFrame:
    frame = pd.DataFrame({k: pd.Series(v, dtype="str") for k, v in keys.items()} | other)
    return F.encode_strings(frame, tuple(keys))


def _right(keys: dict[str, list[object]], **other: list[object]) -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series(v, dtype="str") for k, v in keys.items()} | other)


CASES = {
    "one key, some unmatched": (
        _left({"item": ["b", "a", "c", "a"]}, x=[1, 2, 3, 4]),
        _right({"item": ["a", "c", "z"]}, h=[9.0, 8.0, 7.0]),
        ["item"],
    ),
    "missing keys join missing keys": (
        _left({"item": ["a", NA, "b"], "sys": ["s", "s", NA]}, x=[1, 2, 3]),
        _right({"item": [NA, "b", "a"], "sys": ["s", NA, "t"]}, h=[1.5, 2.5, 3.5]),
        ["item", "sys"],
    ),
    "several matches, in the right's order": (
        _left({"item": ["a", "b", "a"]}, x=[1, 2, 3]),
        _right({"item": ["a", "b", "a", "a"]}, h=[1.0, 2.0, 3.0, 4.0]),
        ["item"],
    ),
    "a value the left has not, beside a missing one": (
        _left({"item": ["a", "b", NA], "asp": ["x", "y", NA]}, x=[1, 2, 3]),
        _right({"item": ["zz", NA, "a"], "asp": [NA, "x", "x"]}, h=[1.0, 2.0, 3.0]),
        ["item", "asp"],
    ),
    "other columns collide": (
        _left({"item": ["a", "b"]}, h=[1, 2]),
        _right({"item": ["b"]}, h=[5.0]),
        ["item"],
    ),
    "empty right": (_left({"item": ["a", "b"]}, x=[1, 2]), _right({"item": []}, h=[]), ["item"]),
    "empty left": (_left({"item": []}, x=[]), _right({"item": ["a"]}, h=[1.0]), ["item"]),
    "unicode and empty strings": (
        _left({"item": ["é", "", "日本"]}, x=[1, 2, 3]),
        _right({"item": ["", "日本", "e"]}, h=[1.0, 2.0, 3.0]),
        ["item"],
    ),
}


def _as_strings(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.assign(**{k: frame[k].astype("str") for k in keys})


@pytest.mark.parametrize("name", list(CASES))
def test_left_join_is_pandas_left_merge(name: str) -> None:
    left, right, keys = CASES[name]
    expected = left.merge(right, on=keys, how="left")
    got = F.left_join(left, right, keys)
    assert list(got.columns) == list(expected.columns)
    for key in keys:  # coded: the keys stay the left's categoricals (pandas gives strings)
        assert isinstance(got[key].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(_as_strings(got, keys), _as_strings(expected, keys))


@pytest.mark.parametrize(
    "left, right",
    [
        (pd.DataFrame({"item": ["a", "b"], "x": [1, 2]}), _right({"item": ["a"]}, h=[1.0])),  # left not categorical
        (_left({"item": ["a", "b"]}, x=[1, 2]), F.encode_strings(_right({"item": ["a"]}, h=[1.0]), ("item",))),
        (_left({"item": ["a", "b"]}, x=[1, 2]), pd.DataFrame({"item": pd.Series(["a"], dtype=object), "h": [1.0]})),
    ],
    ids=["plain-left", "categorical-right", "object-right"],
)
def test_other_frames_are_joined_by_pandas(left: pd.DataFrame, right: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(F.left_join(left, right, ["item"]), left.merge(right, on=["item"], how="left"))
