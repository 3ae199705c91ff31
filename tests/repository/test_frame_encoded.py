"""Issue 39: the judgments frame arrives encoded. Its string columns are categoricals with sorted categories built
from Arrow's dictionaries (``repository.frame_columns.categorical``), marked ``stats.frames.ENCODED``; decoded, it is
the frame of ``str`` columns the repository gave before, and every report built from it is the one the ``str``
frame gives (the goldens included)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns, frames
from judge_api.stats import frames as F
from judge_api.stats.report import build_report
from tests.stats.report_golden_cases import CASES
from tests.stats.test_stats_report_golden import _diff

from .conftest import StoreRun, item

STRINGS = frames._STRING_COLUMNS
OUTCOMES = {2: "win", 1: "tie", -1: "tie", -2: "loss"}


def decoded(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its categoricals as pandas' ``str`` (what the repository gave before) and no marker."""
    out = frame.copy()
    for col in out.columns:
        if isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype("str")
    out.attrs = {}
    return out


def encoded(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame as the repository gives it: its string columns as ``frame_columns.categorical`` makes them."""
    out = frame.copy()
    for col in STRINGS:
        if col in out.columns:
            out[col] = frame_columns.categorical(pa.array(out[col].astype("str"), type=pa.string()))
    out.attrs[F.ENCODED] = True
    return out


def _report(frame: pd.DataFrame, ratings: pd.DataFrame | None = None, **kwargs: Any) -> Any:
    return json.loads(json.dumps(build_report(frame, ratings, **kwargs), allow_nan=False))


def test_categorical_is_what_pandas_makes_of_the_strings() -> None:
    values = ["b", None, "", "a", "é", "Z", "a", "😀", "b\n", None, "ä", "aa"]
    chunks = pa.chunked_array([pa.array(values[:5]), pa.array(values[5:])])  # a dictionary per chunk, united
    for column in (pa.array(values), chunks, chunks.cast(frame_columns.DICT)):
        got = frame_columns.categorical(column)
        want = pd.Series(values, dtype="str").astype("category").array
        assert list(got.categories) == sorted(v for v in set(values) if v is not None)  # code point order
        pd.testing.assert_extension_array_equal(got, want)
        assert list(got.codes[[1, 9]]) == [-1, -1]  # missing is missing, "" is a value
    empty = frame_columns.categorical(pa.chunked_array([], type=frame_columns.DICT))
    assert len(empty) == 0 and len(empty.categories) == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_golden_cases_report_the_same_from_an_encoded_frame(name: str) -> None:
    """The report of a golden case's frame as the repository now gives it is, to the last digit, the report of the
    frame as given (``tests/stats/test_stats_report_golden.py`` compares that one with the stored golden)."""
    frame, ratings, kwargs = CASES[name]()
    expected = _report(frame, ratings, **kwargs)
    got = _report(encoded(frame), ratings, **kwargs)
    assert list(got) == list(expected)
    for section in expected:
        assert _diff(expected[section], got[section], section) is None, _diff(expected[section], got[section], section)


def test_the_stored_frame_is_the_str_frame_encoded_and_reports_the_same(store_run: StoreRun) -> None:
    """On SQLite and PostgreSQL: decoded, the frame is the one of ``str`` columns (values, order, dtypes); the
    validated frame keeps the categoricals (no string materialised), an empty optional string counts as missing and
    a pairwise verdict stored without its outcome gets it from its preference, as with ``str`` columns; the report
    (with human ratings, so that every section runs) equals the ``str`` frame's."""
    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(6)]
    run_id = store_run(
        items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"], aspects=["consistency", "overall"]
    )
    rng = np.random.default_rng(5)
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.mode).where(Judgment.run_id == run_id).order_by(Judgment.id)
        ).all()
        for jid, mode in rows:
            if mode == "single":
                values: dict[str, Any] = {"status": "done", "score": float(rng.integers(1, 101))}
            else:
                raw = int(rng.choice([-2, -1, 1, 2]))
                values = {"status": "done", "preference": float(raw), "outcome": OUTCOMES[raw]}
            session.execute(update(Judgment).where(Judgment.id == jid).values(**values))
        pairwise = [jid for jid, mode in rows if mode == "pairwise"]
        session.execute(update(Judgment).where(Judgment.id == pairwise[0]).values(outcome=None, preference=2.0))
        session.execute(update(Judgment).where(Judgment.id == rows[0][0]).values(source=""))
        session.execute(update(Judgment).where(Judgment.id == rows[-1][0]).values(status="failed", score=None))
    with session_scope() as session:
        frame = frames.judgments_frame(session, run_id)
        old = frames._finish(frames._rows_frame(session, run_id), encoded=False)
    assert frame.attrs.get(F.ENCODED) and not old.attrs
    assert all(isinstance(frame[c].dtype, pd.CategoricalDtype) for c in STRINGS)
    assert all(list(frame[c].cat.categories) == sorted(frame[c].cat.categories) for c in STRINGS)
    pd.testing.assert_frame_equal(decoded(frame), old)
    assert frame.memory_usage(deep=True).sum() < old.memory_usage(deep=True).sum()

    validated = F.validate_judgments(frame)
    assert all(isinstance(validated[c].dtype, pd.CategoricalDtype) for c in F.ENCODED_COLUMNS if c != F.OUTCOME)
    assert F.encode_strings(validated)[F.OUTCOME].dtype == F.encode_strings(F.validate_judgments(old))[F.OUTCOME].dtype
    first = validated[validated[F.JUDGMENT_ID] == pairwise[0]].iloc[0]
    assert first[F.OUTCOME] == "win" and pd.isna(validated[F.SOURCE].iloc[0])  # derived; "" is missing
    plain = F.validate_judgments(old)
    pd.testing.assert_frame_equal(decoded(validated), decoded(plain), check_dtype=False)

    done = old[(old["mode"] == "single") & (old["status"] == "done")]
    ratings = pd.DataFrame(
        {
            "item_id": done["item_id"].to_numpy(),
            "system": done["system_a"].to_numpy(),
            "aspect": done["aspect"].to_numpy(),
            "rater": "r1",
            "kind": "score",
            "value": np.clip(done["score"].to_numpy() + rng.normal(0, 10, len(done)), 1, 100).round(),
            "scale_min": 1.0,
            "scale_max": 100.0,
        }
    )
    assert _report(frame, ratings, n_boot=50, seed=3) == _report(old, ratings, n_boot=50, seed=3)
    assert _report(frame, n_boot=50, seed=4) == _report(old, n_boot=50, seed=4)
