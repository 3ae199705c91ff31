"""The report's panel without copies (issue 39, session 55): the real judges' rows are a view of the rows before the
panel's, and the panel's rows keep only the columns the report reads from them. Both give what they replace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F
from judge_api.stats.panel import PANEL_JUDGE
from judge_api.stats.preferences import STATUS_ROW_COLUMNS as PREFERENCE_STATUS_COLUMNS
from judge_api.stats.preferences import pairwise_rows
from judge_api.stats.report import PANEL_ROW_COLUMNS, _panel_frames, _without_pseudo_judges, panel_config
from judge_api.stats.scores import STATUS_ROW_COLUMNS as SCORE_STATUS_COLUMNS
from judge_api.stats.scores import single_rows
from judge_api.stats.synthetic import synthetic_judgments


def _stored(n: int = 3000, seed: int = 5) -> pd.DataFrame:
    return F.encode_strings(F.validate_judgments(synthetic_judgments(n, seed=seed)))


def _filtered(frame: pd.DataFrame) -> pd.DataFrame:
    """What ``_without_pseudo_judges`` gave before: the real judges' rows by a boolean mask."""
    pseudo = frame[F.JUDGE].isin(["panel", "reference"]).to_numpy()
    return frame[~pseudo] if pseudo.any() else frame


def test_the_real_judges_before_the_panel_are_a_view_of_the_same_rows() -> None:
    stored = _stored()
    _, _, _, items, combined = _panel_frames(stored, panel_config(None), {}, stack=False)
    for frame in (items, combined):
        assert (frame[F.JUDGE] == PANEL_JUDGE).any()  # the panel's rows are there, after the stored ones
        got = _without_pseudo_judges(frame)
        pd.testing.assert_frame_equal(got, _filtered(frame))
        # no copy: a numeric column's data is the stacked frame's own
        col = "n_orders" if "n_orders" in got.columns else "n_samples"
        assert np.shares_memory(got[col].to_numpy(), frame[col].to_numpy())
        assert len(got) < len(frame)


@pytest.mark.parametrize(
    "judges",
    [
        ["a", "panel", "b", "panel"],  # interleaved: a mask, not a slice
        ["panel", "panel", "a", "a"],  # pseudo first
        ["a", "b", "reference", "panel"],  # both pseudo judges at the tail
        ["a", "b", "c", "d"],  # none: the frame itself
        ["panel", "panel", "panel", "panel"],  # nothing but the panel
    ],
)
def test_without_pseudo_judges_equals_the_mask_in_every_layout(judges: list[str]) -> None:
    frame = pd.DataFrame({F.JUDGE: pd.Series(judges, dtype="category"), "x": np.arange(4.0)})
    got = _without_pseudo_judges(frame)
    pd.testing.assert_frame_equal(got, _filtered(frame))
    if "panel" not in judges and "reference" not in judges:
        assert got is frame


def test_the_narrow_panel_rows_give_the_full_rows_item_scores_outcomes_and_status_rows() -> None:
    stored = _stored(4000, seed=11)
    settings = panel_config(None)
    members_n, _, narrow, items_n, combined_n = _panel_frames(stored, settings, {}, stack=False)
    members_f, stacked, full, items_f, combined_f = _panel_frames(stored, settings, {}, stack=True)
    assert members_n == members_f and len(members_n) >= 2 and stacked is not None
    assert list(narrow.columns) == [*PANEL_ROW_COLUMNS, F.JUDGMENT_ID]
    assert len(full.columns) == len(F.JUDGMENT_COLUMNS) and len(narrow) == len(full)
    pd.testing.assert_frame_equal(items_n, items_f)
    pd.testing.assert_frame_equal(combined_n, combined_f)
    # the status rows the report appends to the stored ones: the same from the narrow rows as from the full ones
    pd.testing.assert_frame_equal(single_rows(narrow, SCORE_STATUS_COLUMNS), single_rows(full, SCORE_STATUS_COLUMNS))
    pd.testing.assert_frame_equal(
        pairwise_rows(narrow, PREFERENCE_STATUS_COLUMNS), pairwise_rows(full, PREFERENCE_STATUS_COLUMNS)
    )


def test_a_stored_judge_named_like_the_panel_keeps_the_full_rows() -> None:
    plain = F.validate_judgments(synthetic_judgments(2000, seed=2))
    named = plain.head(50).assign(**{F.JUDGE: PANEL_JUDGE, F.JUDGMENT_ID: np.arange(10_000, 10_050)})
    stored = F.encode_strings(F.validate_judgments(pd.concat([plain, named], ignore_index=True)))
    _, df, rows, _, _ = _panel_frames(stored, panel_config(None), {}, stack=False)
    assert not rows.empty and df is not None  # the rows are stacked with the stored frame: every contract column
    assert len(rows.columns) == len(F.JUDGMENT_COLUMNS)
