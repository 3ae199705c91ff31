"""Hostile review of the issue-39 report speedups (4031ba8..d0f7841): cases where the promise "every figure of the
report identical, bit for bit, for every input" does not hold. Each test fails on d0f7841."""

from __future__ import annotations

import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.report import build_report
from judge_api.stats.scores import ITEM_KEYS, item_scores
from judge_api.stats.status_counts import status_counts_frame
from tests.stats.report_golden_cases import _small
from tests.stats.test_stats_report_shortcuts import _status_counts_by_group_by


def _groupby_item_scores(frame: pd.DataFrame) -> pd.DataFrame:
    """item_scores as 4031ba8 computed it: groupby(ITEM_KEYS, sort=False), which leaves out rows with a missing key."""
    df = F.validate_judgments(frame)
    mask = (df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna()
    keep = [F.ITEM_ID, F.SYSTEM_A, F.ASPECT, F.JUDGE, F.SCORE, F.LEN_A, F.SCALE_MIN, F.SCALE_MAX]
    df = df.loc[mask, keep].rename(columns={F.SYSTEM_A: "system"})
    out = (
        df.groupby(ITEM_KEYS, sort=False)
        .agg(
            score=(F.SCORE, "mean"),
            n_samples=(F.SCORE, "size"),
            length=(F.LEN_A, "mean"),
            scale_min=(F.SCALE_MIN, "first"),
            scale_max=(F.SCALE_MAX, "first"),
        )
        .reset_index()
    )
    return out[[*ITEM_KEYS, F.SCORE, "n_samples", "length", F.SCALE_MIN, F.SCALE_MAX]]


def test_item_scores_leaves_out_rows_with_a_missing_key_as_the_groupby_did() -> None:
    """Promise 6 (group_codes in item_scores = groupby(ITEM_KEYS, sort=False)) breaks on a missing key value.

    validate_judgments keeps a missing item_id / system_a / aspect / judge as NA (it never drops rows); the old
    groupby left such rows out, group_codes makes them a group of their own (its docstring says "callers pass none",
    but item_scores does not filter them). Here the single row with item_id None becomes an extra item score."""
    frame = _small()
    frame["item_id"] = frame["item_id"].astype(object)
    frame.loc[0, "item_id"] = None
    got = item_scores(frame)
    expected = _groupby_item_scores(frame)
    assert len(got) == len(expected), (len(got), len(expected))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False)


def test_report_scores_unchanged_by_a_single_row_without_item_id() -> None:
    """Promise: every report figure as on 4031ba8. With one single-mode row whose item_id is missing, 4031ba8's
    report had scores[A, coherence, j] n = 2 (the keyless row left out by the group-by); d0f7841 gives n = 3, a
    different histogram, CI and ci_warning (root cause: group_codes in item_scores, see the test above)."""
    frame = _small()
    frame["item_id"] = frame["item_id"].astype(object)
    frame.loc[0, "item_id"] = None
    report = build_report(frame, n_boot=50, seed=0)
    row = next(r for r in report["scores"] if r["system"] == "A")
    assert row["n"] == 2
    assert row["histogram"]["counts"][6] == 2


def test_report_does_not_raise_on_a_single_row_without_system() -> None:
    """Promise: every report figure as on 4031ba8, and no new exception. A single-mode row whose system_a is missing
    gave a report on 4031ba8 (the group-by left the row out); on d0f7841 item_scores keeps it as a group with a
    missing system, and paper_items' np.bincount(block * n_systems + system) gets a -1 code: "ValueError: 'list'
    argument must have no negative elements"."""
    frame = _small()
    frame["system_a"] = frame["system_a"].astype(object)
    frame.loc[1, "system_a"] = None
    report = build_report(frame, n_boot=50, seed=0)
    assert {r["system"] for r in report["scores"]} == {"A", "B", "C"}


def _big_categorical(values: list[str], n_unused: int = 70_000) -> pd.Categorical:
    """Categories sorted (as encode_strings / repository frames make them), most unused, the used ones last."""
    categories = sorted({f"c{i:05d}" for i in range(n_unused)} | set(values))
    return pd.Categorical(values, categories=categories)


def test_status_counts_frame_does_not_overflow_on_four_wide_keys() -> None:
    """Promise 7 (status_counts_frame = groupby(list(keys), sort=True).sum()) breaks when the product of the keys'
    numbers of values passes 2**63: the combined code ``group * n_values + code`` wraps around in int64 (group_codes
    renumbers before it could overflow, status_counts_frame does not), so groups merge / get other keys' names.
    Four keys of 70 004 categories each (a categorical's categories count, used or not): 2.4e19 > 9.2e18."""
    status = pd.Series(["done", "failed", "done", "pending"], dtype="str")
    keys = {
        "system_a": pd.Series(_big_categorical(["zA", "zA", "zB", "zC"])),
        "system_b": pd.Series(_big_categorical(["zB", "zB", "zD", "zD"])),
        "aspect": pd.Series(_big_categorical(["zx", "zx", "zx", "zy"])),
        "judge": pd.Series(_big_categorical(["zj", "zj", "zj", "zk"])),
    }
    got = status_counts_frame(status, keys)
    expected = _status_counts_by_group_by(status, keys)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True))


def test_report_preferences_of_an_encoded_frame_with_wide_categories() -> None:
    """Promise: every report figure as on 4031ba8, for every input (and, as before, an encoded frame's report equals
    the plain-string frame's). A frame marked ENCODED whose four pairwise key columns are categoricals with 70k
    categories: the preference status counts overflow (test above), so d0f7841's preferences rows name
    categories no row has ('c13248', ...) with n = 0, where 4031ba8 gave system_a 'zA', n = 2."""
    plain = _small()
    for col in ("system_a", "system_b", "aspect", "judge"):
        plain[col] = plain[col].map(lambda v: "z" + v if isinstance(v, str) else None)
    encoded = plain.copy()
    for col in ("system_a", "system_b", "aspect", "judge"):
        values = list(encoded[col])
        categories = _big_categorical([v for v in values if isinstance(v, str)]).categories
        encoded[col] = pd.Categorical(values, categories=categories)  # None: missing
    encoded.attrs[F.ENCODED] = True
    want = build_report(plain, n_boot=20, seed=0)["preferences"]
    got = build_report(encoded, n_boot=20, seed=0)["preferences"]
    assert [(r["system_a"], r["system_b"], r["n"]) for r in got] == [
        (r["system_a"], r["system_b"], r["n"]) for r in want
    ]


def test_report_paper_table_unchanged_by_a_single_row_without_aspect() -> None:
    """Promise: every report figure as on 4031ba8. With one single-mode row whose aspect is missing, 4031ba8's
    paper table (the keyless row left out) compared the systems on "each system's own items where the systems share
    none", A's n_items = 2; d0f7841 keeps the row as an item score with a missing aspect and gives "shared items",
    n_items = 3 (same root cause: group_codes in item_scores does not leave out missing keys)."""
    frame = _small()
    frame["aspect"] = frame["aspect"].astype(object)
    frame.loc[2, "aspect"] = None
    section = build_report(frame, n_boot=20, seed=0)["paper_table"]
    assert section["compared_on"] == "each system's own items where the systems share none"
    assert section["rows"][0]["n_items"] == 2
