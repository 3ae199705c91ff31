"""Review r59a of session 59's shortcuts (commit 2bd43a8 against f8683f9): each ``test_BUG_*`` is an input on which a
shortcut is not the definition it claims to be. ``grouped.aggregated`` claims to be
``frame.groupby(keys, sort=True).agg(**spec).reset_index()`` "the same frame ... dtypes included", for any spec of
its AGGREGATIONS. The report itself (``build_report``) gave byte-identical JSON to f8683f9 on every frame tried (see the
review's report); the breaks below are of the helper's own promise, on value columns the report does not pass it today
(unsigned or nullable integers, whole numbers above 2**53, categorical values, an output named like a key).

The other tests pin promises that held, on inputs the session's own tests do not draw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F
from judge_api.stats.grouped import aggregated, unique_inverse
from judge_api.stats.krippendorff import _sorted_values


def _definition(frame: pd.DataFrame, keys: list[str], spec: dict[str, tuple[str, str]]) -> pd.DataFrame:
    return frame.groupby(keys, sort=True).agg(**spec).reset_index()


def _keyed(values: object) -> pd.DataFrame:
    return pd.DataFrame({"k": pd.Categorical(["x", "y", "x", "y"]), "v": values})


# --- breaks ---------------------------------------------------------------------------------------------------------


def test_FIXED_aggregated_sum_of_unsigned_is_int64() -> None:
    # definition: pandas sums a uint8 column into uint8 (a uint64 one into uint64); aggregated's bincount gives int64
    frame = _keyed(np.array([1, 2, 3, 4], dtype=np.uint8))
    spec = {"s": ("v", "sum")}
    assert _definition(frame, ["k"], spec)["s"].dtype == np.uint8
    pd.testing.assert_frame_equal(aggregated(frame, ["k"], spec), _definition(frame, ["k"], spec), check_exact=True)


def test_FIXED_aggregated_sum_of_whole_numbers_above_2_53_loses_the_last_bit() -> None:
    # definition: int64 sums are exact (2**53 + 1 = 9007199254740993); aggregated counts them as float64 weights of a
    # bincount and gives 9007199254740992
    frame = _keyed(np.array([2**53, 2, 1, 4], dtype=np.int64))
    spec = {"s": ("v", "sum")}
    assert _definition(frame, ["k"], spec)["s"].tolist() == [2**53 + 1, 6]
    assert aggregated(frame, ["k"], spec)["s"].tolist() == [2**53 + 1, 6]


@pytest.mark.parametrize(
    ("dtype", "how", "expected"),
    [("Int64", "sum", "Int64"), ("Int64", "mean", "Float64"), ("Float64", "mean", "Float64")],
)
def test_FIXED_aggregated_drops_the_nullable_dtype(dtype: str, how: str, expected: str) -> None:
    # definition: a nullable column's sum / mean keeps a nullable dtype (Int64 / Float64); aggregated gives numpy's
    # int64 / float64 (the values go through to_numpy)
    frame = _keyed(pd.array([1, None, 3, 4], dtype=dtype))
    spec = {"s": ("v", how)}
    assert str(_definition(frame, ["k"], spec)["s"].dtype) == expected
    pd.testing.assert_frame_equal(aggregated(frame, ["k"], spec), _definition(frame, ["k"], spec), check_exact=True)


def test_FIXED_aggregated_sum_of_nullable_whole_numbers_with_a_missing_value_is_garbage() -> None:
    # definition: Int64 [NA, 4] sums to 4 (NA skipped); aggregated casts NA to int64 and sums -9223372036854775808
    frame = _keyed(pd.array([1, None, 3, 4], dtype="Int64"))
    spec = {"s": ("v", "sum")}
    assert _definition(frame, ["k"], spec)["s"].tolist() == [4, 4]
    with np.errstate(invalid="ignore"):
        assert aggregated(frame, ["k"], spec)["s"].tolist() == [4, 4]


def test_FIXED_aggregated_sum_of_nullable_booleans_with_a_missing_value_raises() -> None:
    # definition: a nullable boolean column's sums, NA skipped, as Int64; aggregated raised TypeError (int(pd.NA))
    frame = _keyed(pd.array([True, None, True, False], dtype="boolean"))
    spec = {"s": ("v", "sum")}
    pd.testing.assert_frame_equal(aggregated(frame, ["k"], spec), _definition(frame, ["k"], spec), check_exact=True)


def test_FIXED_aggregated_min_of_a_categorical_is_no_longer_categorical() -> None:
    # definition: the min / max of an ordered categorical column is that categorical dtype (aggregated gave a str one)
    frame = _keyed(pd.Categorical(["b", "a", "c", "d"], ordered=True))
    spec = {"s": ("v", "min")}
    assert isinstance(_definition(frame, ["k"], spec)["s"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(aggregated(frame, ["k"], spec), _definition(frame, ["k"], spec), check_exact=True)


def test_FIXED_aggregated_output_named_like_a_key_overwrites_the_key() -> None:
    # definition: reset_index raises ValueError("cannot insert k, already exists"); aggregated returns a frame whose
    # key column "k" holds the means instead of the keys
    frame = _keyed([1.0, 2.0, 3.0, 4.0])
    spec = {"k": ("v", "mean")}
    with pytest.raises(ValueError, match="already exists"):
        _definition(frame, ["k"], spec)
    with pytest.raises(ValueError):
        aggregated(frame, ["k"], spec)


# --- promises that held ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        np.array([1.1, 2.0, 3.0, 4.0], dtype=np.float32),
        np.array([100, 100, 100, 100], dtype=np.int8),
        np.array([1, 2, 3, 4], dtype=object),
        pd.to_datetime(["2020-01-01", "2021-01-01", "2019-01-01", "2020-06-01"]),
        np.array([-0.0, -0.0, -0.0, 0.0]),
        np.array([np.inf, -np.inf, np.nan, 5e-324]),
    ],
    ids=["float32", "int8", "object", "datetime", "negzero", "holes"],
)
def test_aggregated_keeps_dtypes_of_other_columns(values: object) -> None:
    frame = _keyed(values)
    hows = ("min", "max", "size") if isinstance(values, pd.DatetimeIndex) else ("mean", "median", "min", "max", "sum")
    spec = {f"c_{how}": ("v", how) for how in hows}
    got, expected = aggregated(frame, ["k"], spec), _definition(frame, ["k"], spec)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    for name in spec:
        if got[name].dtype.kind == "f":
            assert np.array_equal(np.signbit(got[name].to_numpy()), np.signbit(expected[name].to_numpy()))


def test_aggregated_on_no_rows_and_on_a_non_range_index() -> None:
    empty = pd.DataFrame({"k": pd.Categorical([], categories=["x"]), "v": np.array([], float), "b": np.array([], bool)})
    spec = {"m": ("v", "mean"), "d": ("v", "median"), "s": ("b", "sum"), "n": ("v", "size")}
    pd.testing.assert_frame_equal(aggregated(empty, ["k"], spec), _definition(empty, ["k"], spec), check_exact=True)
    shuffled = _keyed([1.0, 2.0, 3.0, 4.0]).set_axis([10, 3, 5, 1])
    spec = {"m": ("v", "mean"), "n": ("v", "size"), "kn": ("k", "size")}
    pd.testing.assert_frame_equal(
        aggregated(shuffled, ["k"], spec), _definition(shuffled, ["k"], spec), check_exact=True
    )


def test_aggregated_with_wide_codes_and_unsorted_categories() -> None:
    frame = pd.DataFrame(
        {
            "a": pd.Categorical.from_codes(np.array([300, 5, 300, 7]), categories=[f"c{i:04d}" for i in range(400)]),
            "b": pd.Categorical(["q", "p", "p", "q"], categories=["q", "z", "p"]),
            "v": [1.0, 2.0, 3.0, 4.0],
        }
    )
    spec = {"m": ("v", "mean"), "n": ("v", "size")}
    pd.testing.assert_frame_equal(
        aggregated(frame, ["a", "b"], spec), _definition(frame, ["a", "b"], spec), check_exact=True
    )


@pytest.mark.parametrize(
    "keys",
    [
        np.array([], np.int64),
        np.array([5], np.int64),
        np.array([[3, 1], [3, 0]]),
        np.array([2**62, 1]),
        np.array([-1, 2]),
    ],
)
def test_unique_inverse_edges(keys: np.ndarray) -> None:
    for got, expected in zip(unique_inverse(keys), np.unique(keys, return_inverse=True), strict=True):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected)


@pytest.mark.parametrize(
    "series",
    [
        pd.Series(["a", "b", None], dtype="str"),
        pd.Series(["a", "b", None], dtype=object),
        pd.Series(pd.Categorical(["a", None, "b"])),
        pd.Series(pd.Categorical(["b", "a"], categories=["b", "zz", "a"])),
        pd.Series(pd.Categorical([1, 2])),
    ],
)
@pytest.mark.parametrize("value", ["a", "zz"])
def test_is_value_on_more_dtypes(series: pd.Series, value: str) -> None:
    expected = (series == value).to_numpy(dtype=bool)
    got = F.is_value(series, value)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_sorted_values_with_both_zeros() -> None:
    for x in (np.array([0.0, -0.0, 1.0, -0.0]), np.array([-0.0, 0.0, -1.0]), np.array([np.inf, -np.inf, -0.0])):
        vals = np.sort(pd.unique(x))
        got_vals, got_codes = _sorted_values(x)
        assert np.array_equal(got_vals, vals) and np.array_equal(np.signbit(got_vals), np.signbit(vals))
        assert np.array_equal(got_codes, np.searchsorted(vals, x))
