"""Issue 39: the report's sections computed on integer codes give what the frame-based path gave, exactly.

Inter-judge agreement used to join item and system ids into one string per unit and pivot a frame per judge pair;
the paired comparisons unstacked the item scores into a wide frame. Both now work on integer keys
(``panel.unit_keys``, ``scores._wide_blocks``). On random frames (hypothesis), with item ids chosen so that one is
a prefix of another and upper / lower case and non-ASCII letters mix, the new path equals the old one (kept here as
the reference), on plain and on dictionary-encoded frames."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats import panel
from judge_api.stats.agreement import correlations, to_bins, to_unit
from judge_api.stats.preferences import combine_orders
from judge_api.stats.scores import _wide, _wide_blocks, item_scores
from tests.stats.test_stats_report_encoded import frames

# one id a prefix of another, a separator-like character, upper / lower case, non-ASCII
TRICKY_IDS = ("a", "a1", "a10", "a-1", "a 1", "A", "b", "\u00e4", "1")


def _tricky(frame: pd.DataFrame) -> pd.DataFrame:
    mapping = {f"it{i}": name for i, name in enumerate(TRICKY_IDS)}
    return frame.assign(item_id=frame["item_id"].map(mapping))


def _frames_both_ways(frame: pd.DataFrame) -> list[pd.DataFrame]:
    plain = F.validate_judgments(_tricky(frame))
    return [plain, F.encode_strings(plain)]


# --- the reference: inter-judge agreement as written before issue 39 ---------------------------------------------
def _score_units_by_strings(items: pd.DataFrame, members: list[str], n_bins: int) -> pd.DataFrame:
    sub = items[items[F.JUDGE].isin(list(members))]
    unit = to_unit(sub[F.SCORE], sub[F.SCALE_MIN], sub[F.SCALE_MAX])
    return pd.DataFrame(
        {
            F.ASPECT: F.column(sub[F.ASPECT]),
            F.JUDGE: F.column(sub[F.JUDGE]),
            "unit_key": (sub[F.ITEM_ID].astype(str) + "\x1f" + sub["system"].astype(str)).to_numpy(),
            "unit": unit,
            "bin": to_bins(unit, 0.0, 1.0, n_bins),
        }
    )


def _outcome_units_by_strings(combined: pd.DataFrame, members: list[str]) -> pd.DataFrame:
    sub = combined[combined[F.JUDGE].isin(list(members))]
    key = sub[F.ITEM_ID].astype(str) + "\x1f" + sub[F.SYSTEM_A].astype(str) + "\x1f" + sub[F.SYSTEM_B].astype(str)
    return pd.DataFrame(
        {
            F.ASPECT: F.column(sub[F.ASPECT]),
            F.JUDGE: F.column(sub[F.JUDGE]),
            "unit_key": key.to_numpy(),
            "code": sub[F.OUTCOME].map(F.OUTCOME_CODE).to_numpy("float64"),
        }
    )


def _pivot_both(grp: pd.DataFrame, a: str, b: str, value: str) -> tuple[np.ndarray, np.ndarray]:
    wide = grp.pivot_table(index="unit_key", columns=F.JUDGE, values=value, aggfunc="first")
    both = wide[[a, b]].dropna() if {a, b} <= set(wide.columns) else pd.DataFrame(columns=[a, b])
    return both[a].to_numpy("float64"), both[b].to_numpy("float64")


def _inter_judge_by_strings(frame: pd.DataFrame, members: list[str]) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(panel, "_score_units", _score_units_by_strings)
        patch.setattr(panel, "_outcome_units", _outcome_units_by_strings)
        patch.setattr(panel, "_both", _pivot_both)
        return panel.inter_judge_agreement(frame, members)


def _equal(a: Any, b: Any) -> bool:
    """Equality of nested figures with NaN equal to NaN (and no tolerance)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return type(a) is type(b) and a == b


@settings(max_examples=12, deadline=None)
@given(frames())
def test_inter_judge_agreement_on_integer_keys_equals_the_string_keys(case: tuple[pd.DataFrame, Any]) -> None:
    for frame in _frames_both_ways(case[0]):
        members = F.distinct(frame[F.JUDGE])
        got = panel.inter_judge_agreement(frame, members)
        expected = _inter_judge_by_strings(frame, members)
        assert _equal(got, expected), (got, expected)


def test_the_reference_sees_a_changed_unit() -> None:
    """The comparison can fail: a unit whose key changes moves it out of the pair's common units."""
    rows: list[dict[str, Any]] = []
    for judge, scores in (("j1", (5.0, 3.0, 4.0, 1.0)), ("j2", (4.0, 3.0, 5.0, 2.0))):
        for i, score in enumerate(scores):
            rows.append(
                {"item_id": f"i{i}", "mode": "single", "system_a": "s", "aspect": "x", "judge": judge}
                | {"status": "done", "score": score, "scale_min": 1.0, "scale_max": 5.0}
            )
    frame = F.validate_judgments(pd.DataFrame(rows))
    changed = frame.copy()
    changed.loc[7, F.ITEM_ID] = "elsewhere"
    got = panel.inter_judge_agreement(frame, ["j1", "j2"])
    assert got["scores"][0]["pairs"][0]["n"] == 4
    assert _equal(got, _inter_judge_by_strings(frame, ["j1", "j2"]))
    assert not _equal(got, panel.inter_judge_agreement(changed, ["j1", "j2"]))


@settings(max_examples=12, deadline=None)
@given(frames())
def test_the_paired_tables_on_codes_equal_the_unstacked_frame(case: tuple[pd.DataFrame, Any]) -> None:
    for frame in _frames_both_ways(case[0]):
        items = item_scores(frame, validated=True)
        if items.empty:
            continue
        expected = []
        for (aspect, judge), block in _wide(items).groupby(level=[0, 1], sort=True):
            block = block.dropna(axis=1, how="all")
            systems = sorted(block.columns)
            expected.append(((str(aspect), str(judge)), [str(s) for s in systems], block[systems].to_numpy("float64")))
        got = _wide_blocks(items)
        assert [(k, s) for k, s, _ in got] == [(k, s) for k, s, _ in expected]
        for (_, _, table), (_, _, want) in zip(got, expected, strict=True):
            np.testing.assert_array_equal(table, want)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(TRICKY_IDS), st.sampled_from(("x", "y", "xy", "Y"))),
        min_size=1,
        max_size=30,
    )
)
def test_unit_keys_name_the_tuples_and_sort_as_the_joined_strings(pairs: list[tuple[str, str]]) -> None:
    items = pd.Series([p[0] for p in pairs], dtype="str")
    systems = pd.Series([p[1] for p in pairs], dtype="str")
    for a, b in ((items, systems), (items.astype("category"), systems.astype("category"))):
        keys = panel.unit_keys(a, b)
        joined = [f"{i}\x1f{s}" for i, s in pairs]
        for k in range(len(pairs)):
            for m in range(len(pairs)):
                assert (keys[k] == keys[m]) == (pairs[k] == pairs[m])
                assert (keys[k] < keys[m]) == (joined[k] < joined[m])


def test_correlations_without_kendall_keep_spearman_and_pearson() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=200), rng.normal(size=200)
    full, short = correlations(x, y), correlations(x, y, kendall=False)
    assert "kendall" in full and "kendall" not in short
    assert {k: v for k, v in full.items() if not k.startswith("kendall")} == short


def test_combined_outcome_units_follow_the_pairs() -> None:
    """Units of the pairwise outcomes are (item, system a, system b): the same item and pair in another judge's
    verdict is the same unit, another pair is another."""
    rows: list[dict[str, Any]] = []
    for judge in ("j1", "j2"):
        for a, b in combinations(("p", "q", "r"), 2):
            rows.append(
                {"item_id": "i", "mode": "pairwise", "system_a": a, "system_b": b, "aspect": "overall"}
                | {"judge": judge, "order": "ab", "status": "done", "preference": 2.0}
            )
    combined = combine_orders(F.validate_judgments(pd.DataFrame(rows)))
    units = panel._outcome_units(combined, ["j1", "j2"])
    assert units["unit_key"].nunique() == 3
    assert units.groupby("unit_key")[F.JUDGE].nunique().eq(2).all()
