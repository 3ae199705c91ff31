"""Review r52a of 18da42a / 1bf55d6 (issue 39): ``frames.left_join`` promises ``left.merge(right, on=keys,
how="left")`` (the same rows, order, columns and values), and ``calibrated_section`` (which now joins by it) promises
the report it gave before (a298ad8). Each test here failed on 1bf55d6."""

from __future__ import annotations

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.report import build_report
from tests.stats.report_golden_cases import _ratings_for, _sampled


def _encoded_with_reversed_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """The validated frame with its key strings as categoricals whose categories run backwards, marked encoded: the
    report keeps such a frame's categoricals as they are (``validate_judgments`` / ``encode_strings``)."""
    out = F.validate_judgments(frame).copy()
    for column in (F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE):
        coded = out[column].astype("category")
        out[column] = coded.cat.set_categories(list(coded.cat.categories)[::-1])
    out.attrs = {F.ENCODED: True}
    return out


def test_calibrated_rows_keep_their_order_on_an_encoded_frame_whose_categories_are_not_sorted() -> None:
    """BUG (review r52a, 1bf55d6): ``calibrated_section`` joined the judge's item scores to the human means with
    ``DataFrame.merge``, which gave the keys back as strings, so ``_score_rows`` / ``_difference_rows`` grouped them
    with ``sort=True`` in string order, whatever the frame's categories. ``frames.left_join`` keeps the left's
    categoricals, so the groups now follow the categories' order: on a frame marked encoded whose categories are not
    sorted, the ``calibrated`` section's ``scores`` and ``differences`` come out in another order than a298ad8 gave
    (there the section was the same as for the plain frame, here it is reversed). Promise broken: "the same report"."""
    frame = _sampled(12, 7, ("openai:gpt-4o",), samples=1)
    ratings = _ratings_for(frame, 7)
    plain = build_report(frame, ratings, n_boot=20)["calibrated"]
    encoded = build_report(_encoded_with_reversed_categories(frame), ratings, n_boot=20)["calibrated"]
    assert plain is not None and encoded is not None

    def keys(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
        return [(r.get("judge"), r.get("aspect"), r.get("system")) for r in rows]

    assert keys(encoded["scores"]) == keys(plain["scores"])  # a298ad8: string order, as for the plain frame
    assert keys(encoded["differences"]) == keys(plain["differences"])
    assert encoded == plain


def test_left_join_takes_one_key_named_by_a_string_as_merge_does() -> None:
    """BUG (review r52a, 1bf55d6, minor): ``left_join(left, right, keys)`` promises ``left.merge(right, on=keys,
    how="left")``; ``merge`` takes a single key as a string (``on="item"``), and a ``str`` is a ``Sequence[str]``, but
    ``left_join`` turns it into its characters (``list(keys)``) and fails with ``KeyError: 'i'``."""
    left = F.encode_strings(pd.DataFrame({"item": pd.Series(["a", "b"], dtype="str"), "x": [1, 2]}), ("item",))
    right = pd.DataFrame({"item": pd.Series(["a"], dtype="str"), "h": [1.0]})
    expected = left.merge(right, on="item", how="left")
    got = F.left_join(left, right, "item")
    pd.testing.assert_frame_equal(got.assign(item=got["item"].astype("str")), expected)


def test_left_join_keeps_columns_named_like_its_own_join_columns() -> None:
    """BUG (review r52a, 1bf55d6, minor): on the coded path ``left_join`` adds ``__left_join_0``... to both frames and
    drops them after the merge: a column of either frame with that name is overwritten and then dropped, where
    ``merge`` keeps it (a column lost without an error; the promise is "the same columns and values")."""
    left = F.encode_strings(
        pd.DataFrame({"item": pd.Series(["a", "b"], dtype="str"), "__left_join_0": [1, 2]}), ("item",)
    )
    right = pd.DataFrame({"item": pd.Series(["a"], dtype="str"), "h": [np.float64(1.0)]})
    expected = left.merge(right, on=["item"], how="left")
    got = F.left_join(left, right, ["item"])
    assert list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(
        got.assign(item=got["item"].astype("str")), expected.assign(item=expected["item"].astype("str"))
    )
