"""Review r52b (commit 264f71b): ``validate_judgments`` builds its frame with ``pd.DataFrame(..., copy=False)`` and
shares the caller's typed columns. Every test here failed on that commit; each states the promise it breaks.

Before the commit every column of the validated frame was an array of its own, written into the frame by
``out[col] = ...`` (which copies): a validated frame was writable and independent of the caller's frame, whatever
the input. Two holes remain:

* a column that had to be *converted* is put into the frame as the ``.to_numpy()`` of a pandas object, which pandas 3
  hands out read-only, and ``copy=False`` keeps it so: writing to the validated frame raises
  "assignment destination is read-only" (the repository's frame from ``frame_columns.to_pandas`` too, whose
  Arrow-backed columns are read-only and now shared without a copy once its frame is gone);
* data pandas' copy-on-write does not see (a ``boolean`` column's ``to_numpy()`` view, numpy arrays the frame was
  built from with ``copy=False``, a write through ``Series.array``) is now shared, so a write to the caller's frame
  reaches the validated one.
"""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from judge_api.repository import frame_columns
from judge_api.stats import frames as F
from judge_api.stats.synthetic import synthetic_judgments


def _raw(n: int = 40) -> pd.DataFrame:
    """A synthetic judgments frame as a caller would pass it: plain columns, not marked validated."""
    d = synthetic_judgments(n, seed=1)
    d = pd.DataFrame({c: d[c] for c in d.columns})
    d.attrs = {}
    return d


def _small(**columns: object) -> pd.DataFrame:
    base: dict[str, object] = {
        "item_id": ["a", "b", "c"],
        "mode": "single",
        "system_a": "s",
        "aspect": "x",
        "judge": "j",
        "status": "done",
    }
    return pd.DataFrame({**base, **columns}, copy=False)


@pytest.mark.parametrize(
    ("column", "dtype"),
    [
        ("score", "object-str"),  # numbers held as strings: object column
        ("score", "float32"),
        ("input_tokens", "Int64"),
        ("cost_usd", "Float64"),
        ("input_tokens", "int64[pyarrow]"),
        ("judgment_id", "int32"),
        ("judgment_id", "float64"),
    ],
)
def test_a_converted_column_of_the_validated_frame_can_be_written(column: str, dtype: str) -> None:
    """Promise 2 ("none of these writes raise 'assignment destination is read-only' where the old code did not"):
    a column validate_judgments converts (object strings, float32, nullable Int64/Float64, Arrow, a non-int64
    judgment_id) is now the read-only ``.to_numpy()`` of the conversion's Series, put into the frame with
    ``copy=False``. ``out.loc[0, col] = v`` raises ValueError; before the commit it wrote the value."""
    d = _raw()
    d[column] = d[column].astype(str).astype(object) if dtype == "object-str" else d[column].astype(dtype)
    out = F.validate_judgments(d)
    value = out[column].iloc[5]
    out.loc[0, column] = value  # ValueError: assignment destination is read-only
    assert out[column].iloc[0] == value


def _repository_frame(n: int = 40) -> pd.DataFrame:
    """The repository's frame (``frame_columns.to_pandas``) of an Arrow table of a synthetic run's columns, as
    ``repository.judgments_frame`` makes it from the database's columns."""
    d = synthetic_judgments(n, seed=1)
    arrays: dict[str, pa.Array] = {}
    for name, _, kind in frame_columns.COLUMNS:
        s = d[name.removeprefix("judgment_") if name.startswith("judgment_scale") else name]
        if kind == frame_columns.STRING:
            arrays[name] = pa.array(s.astype(object).where(s.notna(), None).tolist(), type=pa.string())
        elif kind == frame_columns.BOOL:
            arrays[name] = pa.array(s.astype(bool).tolist(), type=pa.bool_())
        else:
            floats = pa.array(s.astype(float).tolist(), type=pa.float64(), from_pandas=True)
            arrays[name] = floats.cast(pa.int64()) if kind == frame_columns.INT else floats
    return frame_columns.to_pandas(pa.table(arrays), "run-1", lambda rubric: (1.0, 10.0))


@pytest.mark.parametrize("column", ["judgment_id", "input_tokens", "sample_index", "cost_usd", "latency_ms", "len_a"])
def test_the_validated_repository_frame_can_be_written(column: str) -> None:
    """Promise 2 on the repository's frame (``frame_columns.to_pandas``, every report read from the database):
    its int64/float64 columns are zero-copy, read-only views of Arrow buffers. Shared as they are (judgment_id,
    input_tokens, sample_index, cost_usd, latency_ms) or converted to a read-only ``.to_numpy()`` (len_a: int64 ->
    float64), the validated frame's columns are read-only: once the repository's frame is gone (the usual
    ``validate_judgments(judgments_frame(...))``) copy-on-write has nothing to copy for, and ``out.loc[...] = v``
    raises "assignment destination is read-only". Before the commit the validated frame owned writable copies."""
    out = F.validate_judgments(_repository_frame())
    gc.collect()
    value = out[column].iloc[3]
    out.loc[0, column] = value  # ValueError: assignment destination is read-only
    assert out[column].iloc[0] == value


def test_a_write_to_the_callers_nullable_boolean_cached_does_not_reach_the_validated_frame() -> None:
    """Promise 2 ("a write to the caller's frame after validation never changes the validated frame"): a
    ``boolean`` (nullable) ``cached`` column without NA is converted by ``fillna(False).astype(bool).to_numpy()``,
    which is a view of the caller's BooleanArray data, and ``copy=False`` keeps that view. ``caller.loc[0,
    "cached"] = True`` then changes the validated frame's ``cached`` (and so its cache/cost figures) silently."""
    d = _small(cached=pd.array([False, False, False], dtype="boolean"))
    out = F.validate_judgments(d)
    d.loc[0, "cached"] = True
    assert out["cached"].tolist() == [False, False, False]


def test_numpy_arrays_the_caller_built_the_frame_from_do_not_reach_the_validated_frame() -> None:
    """Promise 2 (numpy arrays the caller built the frame from with ``copy=False`` and later mutates): the
    float64 / int64 / bool columns are now shared with those arrays, and a write to a numpy array is invisible to
    copy-on-write; the old validated frame kept its own copies and did not change."""
    score = np.array([1.0, 2.0, 3.0])
    tokens = np.array([10, 20, 30])
    cached = np.array([False, False, True])
    out = F.validate_judgments(_small(score=score, input_tokens=tokens, cached=cached))
    score[0], tokens[0], cached[0] = 99.0, -1, True
    assert out["score"].tolist() == [1.0, 2.0, 3.0]
    assert out["input_tokens"].tolist() == [10, 20, 30]
    assert out["cached"].tolist() == [False, False, True]


def test_a_write_through_series_array_does_not_cross_between_the_frames() -> None:
    """Promise 2 in both directions for a write through ``Series.array`` (pandas' ExtensionArray of the column,
    which copy-on-write does not guard): on a shared float64 column ``caller["cost_usd"].array[0] = v`` now
    changes the validated frame, and ``out["cost_usd"].array[0] = v`` the caller's frame. Before the commit the
    two frames held separate arrays."""
    d = _raw()
    out = F.validate_judgments(d)
    before_out, before_d = out["cost_usd"].to_numpy(copy=True), d["cost_usd"].to_numpy(copy=True)
    d["cost_usd"].array[0] = 123.0
    np.testing.assert_array_equal(out["cost_usd"].to_numpy(), before_out)

    d2 = _raw()
    out2 = F.validate_judgments(d2)
    out2["cost_usd"].array[0] = 456.0
    np.testing.assert_array_equal(d2["cost_usd"].to_numpy(), before_d)
