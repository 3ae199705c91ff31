"""Validation of the judgments / ratings frames and the JSON helper."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F


def _judgments(**overrides: object) -> pd.DataFrame:
    base: dict[str, object] = {
        "item_id": ["i1", "i2"],
        "mode": ["single", "pairwise"],
        "system_a": ["x", "x"],
        "system_b": [None, "y"],
        "aspect": ["coherence", "overall"],
        "judge": ["openai:gpt-4o", "openai:gpt-4o"],
        "status": ["done", "done"],
    }
    base.update(overrides)
    return pd.DataFrame(base)


def test_empty_frames_have_every_contract_column() -> None:
    j = F.empty_judgments()
    r = F.empty_ratings()
    assert list(j.columns) == list(F.JUDGMENT_COLUMNS)
    assert list(r.columns) == list(F.RATING_COLUMNS)
    assert len(j) == 0 and len(r) == 0
    assert j[F.SCORE].dtype == np.float64


def test_missing_optional_columns_get_defaults() -> None:
    df = F.validate_judgments(_judgments(preference=[np.nan, 2.0]))
    assert list(df.columns) == list(F.JUDGMENT_COLUMNS)
    assert df[F.SAMPLE_INDEX].tolist() == [0, 0]
    assert df[F.CACHED].tolist() == [False, False]
    assert df[F.JUDGMENT_ID].tolist() == [0, 1]
    assert math.isnan(df[F.SCORE].iloc[0])
    assert df[F.SYSTEM_B].isna().tolist() == [True, False]


@pytest.mark.parametrize(
    ("preference", "outcome", "expected_pref", "expected_outcome"),
    [
        (2.0, None, 2.0, "win"),
        (1.0, None, 1.0, "tie"),
        (0.0, None, 0.0, "tie"),
        (-1.0, None, -1.0, "tie"),
        (-2.0, None, -2.0, "loss"),
        (np.nan, "win", 2.0, "win"),
        (np.nan, "loss", -2.0, "loss"),
        (1.0, "win", 1.0, "win"),  # a rubric's own outcome mapping is kept
    ],
)
def test_outcome_and_preference_fill_each_other(
    preference: float, outcome: str | None, expected_pref: float, expected_outcome: str
) -> None:
    df = F.validate_judgments(_judgments(preference=[np.nan, preference], outcome=[None, outcome]))
    assert df[F.PREFERENCE].iloc[1] == expected_pref
    assert df[F.OUTCOME].iloc[1] == expected_outcome
    assert pd.isna(df[F.OUTCOME].iloc[0])  # single rows are left alone


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"status": ["done", "exploded"]}, "status"),
        ({"mode": ["single", "triple"]}, "mode"),
        ({"order": [None, "abc"]}, "order"),
        ({"outcome": [None, "draw"]}, "outcome"),
        ({"system_b": [None, None]}, "system_b"),
    ],
)
def test_bad_values_raise(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        F.validate_judgments(_judgments(**overrides))


def test_missing_required_column_raises() -> None:
    with pytest.raises(ValueError, match="judge"):
        F.validate_judgments(_judgments().drop(columns=["judge"]))
    with pytest.raises(ValueError, match="rater"):
        F.validate_ratings(pd.DataFrame({"item_id": ["a"], "system": ["x"], "aspect": ["c"]}))


def test_cancelled_status_is_accepted() -> None:
    df = F.validate_judgments(_judgments(status=["cancelled", "done"]))
    assert df[F.STATUS].tolist() == ["cancelled", "done"]


def test_validated_frame_passes_through_unchanged() -> None:
    df = F.validate_judgments(_judgments())
    assert F.validate_judgments(df) is df


def test_an_owned_frames_typed_columns_are_shared_and_a_write_reaches_neither_frame() -> None:
    """A frame marked ``OWNED`` (the repository's) has the columns that already have their type taken as they are
    (issue 39: 150 MB at 1M rows), and pandas' copy-on-write keeps a write to either frame out of the other; any
    other frame's columns are copied."""
    from judge_api.stats.synthetic import synthetic_judgments

    raw = F.encode_strings(F.validate_judgments(synthetic_judgments(200, seed=3)))
    raw = pd.DataFrame({c: raw[c] for c in raw.columns})  # the same columns, no longer marked validated
    raw["len_a"] = raw["len_a"].fillna(0).astype("int64")  # a column that must be converted
    plain = F.validate_judgments(raw, encoded=True)
    assert not any(np.shares_memory(plain[c].to_numpy(), raw[c].to_numpy()) for c in ("score", "input_tokens"))
    F.owned_columns(raw)
    out = F.validate_judgments(raw, encoded=True)
    assert out is not raw
    for col in ("score", "cost_usd", "input_tokens", "judgment_id"):
        assert np.shares_memory(out[col].to_numpy(), raw[col].to_numpy())
    assert out["len_a"].dtype == "float64" and not np.shares_memory(out["len_a"].to_numpy(), raw["len_a"].to_numpy())
    pd.testing.assert_frame_equal(out, plain)
    before_out, before_raw = out["score"].copy(), raw["cost_usd"].copy()
    raw.loc[0, "score"] = -7.0
    raw["score"] = raw["score"] + 1
    out.loc[1, "cost_usd"] = 99.0
    out.loc[2, "len_a"] = 5.0  # a converted column is the frame's own, writable
    pd.testing.assert_series_equal(out["score"], before_out)
    pd.testing.assert_series_equal(raw["cost_usd"], before_raw)


def test_ratings_preference_scale_defaults_to_minus_one_one() -> None:
    r = F.validate_ratings(
        pd.DataFrame(
            {
                "item_id": ["a", "a"],
                "system": ["x", "x"],
                "system_b": ["y", None],
                "aspect": ["overall", "coherence"],
                "rater": ["expert_1", "crowd-1"],
                "kind": ["preference", "score"],
                "value": [1, 2],
            }
        )
    )
    assert r[F.SCALE_MIN].iloc[0] == -1.0 and r[F.SCALE_MAX].iloc[0] == 1.0
    assert math.isnan(r[F.SCALE_MIN].iloc[1])
    assert r[F.TIE_INCONSISTENT].tolist() == [False, False]


def test_jsonable_turns_nan_and_numpy_into_plain_json() -> None:
    obj = {
        "a": np.float64("nan"),
        "b": np.int64(3),
        "c": [np.inf, 1.5, None, pd.NA],
        "d": pd.DataFrame({"x": [1.0, np.nan]}),
        "e": np.bool_(True),
    }
    out = F.jsonable(obj)
    assert out == {"a": None, "b": 3, "c": [None, 1.5, None, None], "d": [{"x": 1.0}, {"x": None}], "e": True}
    json.dumps(out, allow_nan=False)
