"""Issue 39: a run's report from its rows read in parts (``stats.parts``) equals the report of the whole frame.

Every section, CIs included, is the same to the last digit, except the cost section's float totals and means: with
one part those are equal too, with several they are sums of the parts' sums (``COST_RTOL``). The token counts and
every count are whole numbers: equal. On the golden cases (samples, panels mean and median with a quorum, ratings,
imported verdicts, a reference-metric judge, small groups), on random frames (hypothesis) split at random rows, and
on parts whose strings come encoded and plain. The rows' summed columns take no memory per row, and the report lets
the rows go before it makes the panel's rows."""

from __future__ import annotations

import itertools
import json
import math
import weakref
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats import report as report_module
from judge_api.stats.parts import ROW_COLUMNS, SUMMED_COLUMNS, RunParts, report_from_parts
from judge_api.stats.report import build_report, cost_section
from judge_api.stats.scores import item_scores
from judge_api.stats.synthetic import synthetic_judgments
from tests.stats.report_golden_cases import CASES
from tests.stats.test_stats_report_encoded import frames

COST_RTOL = 1e-12
"""The parts' sums against one sum over every row: a few units in the last place of a sum of thousands of floats."""


def _split(frame: pd.DataFrame, cuts: list[int]) -> list[pd.DataFrame]:
    bounds = [0, *sorted(set(cuts)), len(frame)]
    return [frame.iloc[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _differences(expected: Any, got: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every place where two JSON values differ, with their paths."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if list(expected) != list(got):
            return [(path, list(expected), list(got))]
        return [d for k in expected for d in _differences(expected[k], got[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [(path, len(expected), len(got))]
        return [
            d for i, (a, b) in enumerate(zip(expected, got, strict=True)) for d in _differences(a, b, f"{path}[{i}]")
        ]
    if type(expected) is not type(got) or expected != got:
        return [(path, expected, got)]
    return []


def _assert_same_report(expected: dict[str, Any], got: dict[str, Any], *, parts: int) -> None:
    assert json.dumps(got, allow_nan=False)  # JSON-safe
    for path, a, b in _differences(expected, got):
        # only the cost section's float sums and means may move, and only when summed over several parts
        assert parts > 1 and path.startswith(".cost."), (path, a, b)
        assert isinstance(a, float) and isinstance(b, float), (path, a, b)
        assert math.isclose(a, b, rel_tol=COST_RTOL, abs_tol=0.0), (path, a, b)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n_parts", [1, 3])
def test_the_golden_cases_read_in_parts_give_the_whole_frames_report(name: str, n_parts: int) -> None:
    frame, ratings, options = CASES[name]()
    whole = build_report(frame, ratings, **options)
    cuts = [len(frame) * k // n_parts for k in range(1, n_parts)]
    got = report_from_parts(_split(frame, cuts), ratings, **options)
    _assert_same_report(whole, got, parts=n_parts)
    if n_parts == 1:
        assert got == whole  # one part: every figure, the cost section's included


@settings(max_examples=40, deadline=None)
@given(frames(), st.lists(st.integers(0, 10_000), max_size=4), st.booleans())
def test_random_frames_split_at_random_rows(drawn: Any, cuts: list[int], encode_some: bool) -> None:
    judgments, _ = drawn
    whole = build_report(judgments, n_boot=30, seed=2)
    parts = _split(judgments, [c % (len(judgments) + 1) for c in cuts])
    if encode_some:  # the parts' strings as categoricals in one, plain in the next: the frame is the same
        parts = [F.encode_strings(F.validate_judgments(p)) if k % 2 == 0 else p for k, p in enumerate(parts)]
    _assert_same_report(whole, report_from_parts(parts, n_boot=30, seed=2), parts=len(parts))


def test_cost_sums_over_parts_are_the_whole_frames_within_the_bound() -> None:
    frame = synthetic_judgments(30_000, seed=4)
    whole = cost_section(frame)
    run = RunParts()
    for part in _split(frame, [7_001, 15_000, 22_222]):
        run.add(part)
    got = cost_section(run.frame(), sums=run.sums.cost_sums())
    for block, expected in [(got, whole), *zip(got["per_judge"], whole["per_judge"], strict=True)]:
        for key, value in expected.items():
            if key in ("saved_usd", "per_judge"):  # the judges' blocks are compared in turn
                continue
            if isinstance(value, float):
                assert math.isclose(block[key], value, rel_tol=COST_RTOL), key
            else:
                assert block[key] == value, key  # counts and token totals: whole numbers, equal
    assert got["input_tokens"] == int(frame["input_tokens"].sum())


def test_the_summed_columns_take_no_memory_per_row() -> None:
    frame = synthetic_judgments(5_000, seed=0)
    run = RunParts()
    for part in _split(frame, [1_000, 3_000]):
        run.add(part)
    parts_frame = run.frame()
    assert parts_frame.attrs[F.SUMMED] and set(ROW_COLUMNS) | set(SUMMED_COLUMNS) == set(F.JUDGMENT_COLUMNS)
    for col in SUMMED_COLUMNS:
        values = parts_frame[col].array
        data = values.codes if isinstance(values, pd.Categorical) else parts_frame[col].to_numpy()
        assert data.strides == (0,), col
    for col in ROW_COLUMNS:  # the kept columns are the rows' own values, in the run's order
        expected = F.validate_judgments(frame)[col]
        assert parts_frame[col].astype(object).equals(expected.astype(object)), col


def test_a_frame_of_parts_without_its_sums_is_refused() -> None:
    run = RunParts()
    run.add(synthetic_judgments(200, seed=0))
    with pytest.raises(ValueError, match="pass sums"):
        build_report(run.frame())


def test_parts_cannot_be_added_after_the_frame_is_taken() -> None:
    run = RunParts()
    run.add(synthetic_judgments(100, seed=0))
    run.frame()
    with pytest.raises(RuntimeError, match="already taken"):
        run.add(synthetic_judgments(100, seed=1))
    with pytest.raises(RuntimeError, match="already taken"):
        run.frame()


def test_a_bad_part_is_refused_as_the_whole_frame_is() -> None:
    frame = synthetic_judgments(300, seed=0)
    bad = frame.iloc[100:].copy()
    bad.attrs = {}  # a frame from elsewhere, not one validate_judgments made
    bad.loc[bad.index[5], "status"] = "exploded"
    run = RunParts()
    run.add(frame.iloc[:100])
    with pytest.raises(ValueError, match=r"'status'.*exploded"):
        run.add(bad)
    with pytest.raises(ValueError, match=r"'status'.*exploded"):
        report_from_parts([frame.iloc[:100], bad])


def test_no_parts_give_the_empty_report() -> None:
    assert report_from_parts([]) == build_report(F.empty_judgments())
    assert report_from_parts([synthetic_judgments(10, seed=0).iloc[:0]]) == build_report(F.empty_judgments())


def test_the_rows_are_let_go_before_the_panels_rows_are_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report of parts holds the only reference to its frame: it lets it go once the sections that read rows are
    made (issue 39: at 10M rows the item sections then run on 0.8 GB less)."""
    made: list[weakref.ref[pd.DataFrame]] = []
    alive_at_panel: list[bool] = []
    take_frame, with_panel = RunParts.frame, report_module._with_panel

    def frame(self: RunParts) -> pd.DataFrame:
        out = take_frame(self)
        made.append(weakref.ref(out))
        return out

    def panel_step(stored: pd.DataFrame | None, *args: Any, **kwargs: Any) -> Any:
        alive_at_panel.append(stored is not None or made[0]() is not None)
        return with_panel(stored, *args, **kwargs)

    monkeypatch.setattr(RunParts, "frame", frame)
    monkeypatch.setattr(report_module, "_with_panel", panel_step)
    report_from_parts([synthetic_judgments(2_000, seed=0)], n_boot=20)
    assert alive_at_panel == [False]


def test_the_validated_frames_missing_columns_are_constants() -> None:
    """A column the frame lacks is its neutral default repeated in no memory per row (issue 39: the panel's rows
    lack 13 of them); a write to it raises instead of reaching every row."""
    frame = pd.DataFrame(
        {
            "item_id": ["a", "b"],
            "mode": "single",
            "system_a": "s",
            "aspect": "x",
            "judge": "j",
            "status": "done",
            "score": [1.0, 2.0],
        }
    )
    for encoded in (False, True):
        out = F.validate_judgments(frame, encoded=encoded)
        assert out["cost_usd"].tolist() == [0.0, 0.0] and out["confidence"].tolist() == [1.0, 1.0]
        assert out["input_tokens"].tolist() == [0, 0] and out["cached"].tolist() == [False, False]
        assert out["latency_ms"].isna().all()
        for col in ("cost_usd", "latency_ms", "input_tokens", "cached"):
            values = out[col].to_numpy()
            assert values.strides == (0,), col
            with pytest.raises(ValueError, match="read-only"):
                values[0] = 1
        copy = out.copy()
        copy.loc[0, "cost_usd"] = 5.0  # a copy is an ordinary column
        assert copy["cost_usd"].tolist() == [5.0, 0.0] and out["cost_usd"].tolist() == [0.0, 0.0]


def reference_item_scores(df: pd.DataFrame) -> pd.DataFrame:
    """``item_scores`` as the group-by makes it: the reference of its one-row shortcut."""
    keys = ["item_id", "system_a", "aspect", "judge"]
    rows = df[(df["mode"] == "single") & (df["status"] == "done") & df["score"].notna()].dropna(subset=keys)
    return (
        rows.groupby(keys, sort=False, observed=True)
        .agg(
            score=("score", "mean"),
            n_samples=("score", "size"),
            length=("len_a", "mean"),
            scale_min=("scale_min", "first"),
            scale_max=("scale_max", "first"),
        )
        .reset_index()
        .rename(columns={"system_a": "system"})
    )


@pytest.mark.parametrize("encoded", [False, True])
def test_item_scores_of_one_row_per_group_equal_the_group_by(encoded: bool) -> None:
    """One sample per judgment takes the rows as they are: the same frame the group-by gives."""
    frame = F.validate_judgments(synthetic_judgments(4_000, seed=5))
    frame.loc[frame.index[:40], "len_a"] = np.nan
    frame.loc[frame.index[:20], "scale_min"] = np.nan
    if encoded:
        frame = F.encode_strings(frame)
    got = item_scores(frame, validated=True)
    single = frame[(frame["mode"] == "single") & (frame["status"] == "done") & frame["score"].notna()]
    assert not single.duplicated(["item_id", "system_a", "aspect", "judge"]).any()  # one row per group: the shortcut
    expected = reference_item_scores(frame)
    assert list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(
        got.astype({c: object for c in ("item_id", "system", "aspect", "judge")}),
        expected.astype({c: object for c in ("item_id", "system", "aspect", "judge")}),
    )
