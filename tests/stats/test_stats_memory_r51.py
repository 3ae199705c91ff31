"""Session 51 (issue 39): the self-consistency section finds the repeated keys by sorting their codes, without a
copy of the key columns or a hash table of a million keys; ``frames.key_codes`` names equal tuples equally."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats.consistency import KEY, _repeated_done, self_consistency_section
from tests.stats.report_golden_cases import _sampled

VALUES: dict[str, list[str | None]] = {
    F.ITEM_ID: ["i1", "i2", "i3"],
    F.MODE: ["single", "pairwise"],
    F.SYSTEM_A: ["a", "b"],
    F.SYSTEM_B: ["b", None],
    F.ASPECT: ["coherence"],
    F.JUDGE: ["j1", "j2"],
    F.ORDER: ["ab", "ba", None],
    F.STATUS: ["done", "done", "failed"],
}


def _reference(df: pd.DataFrame) -> np.ndarray:
    """The done rows whose key (a missing value a value of its own) has another done row, by a group-by."""
    keys = df[KEY].astype(object).fillna("\0missing")
    done = (df[F.STATUS] == F.DONE).to_numpy()
    sizes = keys[done].groupby(KEY, sort=False).transform("size") if done.any() else pd.Series(dtype=int)
    out = np.zeros(len(df), dtype=bool)
    out[np.flatnonzero(done)] = (sizes.to_numpy() >= 2) if done.any() else []
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(*(st.sampled_from(v) for v in VALUES.values())), min_size=1, max_size=40),
    st.booleans(),
)
def test_repeated_done_equals_the_group_by(rows: list[tuple[object, ...]], encoded: bool) -> None:
    df = pd.DataFrame(rows, columns=list(VALUES))
    if encoded:
        df = F.encode_strings(df)
    np.testing.assert_array_equal(_repeated_done(df), _reference(df))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3)), min_size=1, max_size=50))
def test_key_codes_are_equal_exactly_for_equal_tuples(rows: list[tuple[str | None, int]]) -> None:
    df = pd.DataFrame(rows, columns=["k1", "k2"])
    codes = F.key_codes(df, ["k1", "k2"])
    assert (codes >= 0).all()
    tuples = [(str(a), b) for a, b in rows]
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (tuples[i] == tuples[j])


def test_the_section_on_sampled_judgments_is_unchanged_by_encoding() -> None:
    frame = _sampled(30, seed=3, judges=("openai:gpt-4o", "anthropic:claude"))
    plain = self_consistency_section(frame)
    encoded = self_consistency_section(F.encode_strings(F.validate_judgments(frame)), validated=True)
    assert plain and plain == encoded
    assert all(row["keys"] > 0 and 0.0 <= row["min_confidence"] <= row["mean_confidence"] <= 1.0 for row in plain)


def test_no_done_row_and_no_repeat_give_no_row() -> None:
    df = pd.DataFrame([dict(zip(VALUES, (v[0] for v in VALUES.values()), strict=True))] * 3)
    df[F.STATUS] = "failed"
    assert not _repeated_done(df).any()
    df[F.STATUS] = "done"
    assert _repeated_done(df).all()
    assert not _repeated_done(df.iloc[:1]).any()
