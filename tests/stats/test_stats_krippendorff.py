"""Krippendorff's alpha against published worked examples."""

from __future__ import annotations

import numpy as np
import pytest

from judge_api.stats import krippendorff as K

nan = np.nan

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers, 12 units,
# values 1-5 with missing data.  Published: nominal .743, ordinal .815, interval .849, ratio .797.
CANONICAL = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
    [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan],
]

# Wikipedia's computational example (3 coders, 15 units): nominal .691, interval .811.
WIKIPEDIA = [
    [nan, nan, nan, nan, nan, 3, 4, 1, 2, 1, 1, 3, 3, nan, 3],
    [1, nan, 2, 1, 3, 3, 4, 3, nan, nan, nan, nan, nan, nan, nan],
    [nan, nan, 2, 1, 3, 4, 4, nan, 2, 1, 1, 3, 3, nan, 4],
]


@pytest.mark.parametrize(
    ("data", "level", "expected"),
    [
        (CANONICAL, "nominal", 0.743),
        (CANONICAL, "ordinal", 0.815),
        (CANONICAL, "interval", 0.849),
        (CANONICAL, "ratio", 0.797),
        (WIKIPEDIA, "nominal", 0.691),
        (WIKIPEDIA, "interval", 0.811),
    ],
)
def test_published_values(data: list[list[float]], level: K.Level, expected: float) -> None:
    alpha = K.krippendorff_alpha(data, level)
    assert alpha is not None
    assert round(alpha, 3) == expected


def test_coincidence_matrix_of_the_canonical_example() -> None:
    arr = np.asarray(CANONICAL)
    units = np.broadcast_to(np.arange(arr.shape[1]), arr.shape).ravel()
    o, values = K.coincidence_matrix(units, arr.ravel())
    assert values.tolist() == [1, 2, 3, 4, 5]
    assert o.sum() == pytest.approx(40.0)  # 41 values minus the unpairable unit 12
    assert np.allclose(o, o.T)
    # By hand: o_11 = 6/2 (unit 1) + 6/3 (unit 8) + 2/1 (unit 11) = 7; o_12 = 1/3 (unit 6) + 1/3 * 3 (unit 8)
    assert o[0, 0] == pytest.approx(7.0) and o[0, 1] == pytest.approx(4 / 3) and o[1, 1] == pytest.approx(10.0)
    assert o.sum(axis=1).tolist() == pytest.approx([9, 13, 10, 5, 3])


def test_fast_interval_path_equals_the_matrix_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(0, 1, 300)
    data = truth + rng.normal(0, 0.5, (4, 300))
    data[rng.random(data.shape) < 0.2] = nan
    slow = K.krippendorff_alpha(data, "interval")
    monkeypatch.setattr(K, "MAX_VALUES_FOR_MATRIX", 10)
    fast = K.krippendorff_alpha(data, "interval")
    assert slow is not None and fast is not None
    assert fast == pytest.approx(slow, abs=1e-10)
    assert 0.7 < fast < 0.9  # reliability 1 / (1 + 0.25) = 0.8


def test_undefined_cases_return_none() -> None:
    assert K.krippendorff_alpha(np.array([[1, 2, 3], [nan, nan, nan]])) is None  # nothing pairable
    assert K.krippendorff_alpha([[2, 2], [2, 2]]) is None  # no variation
    assert K.krippendorff_alpha_long([], []) is None
    assert K.krippendorff_alpha([[1, 2, 3], [1, 2, 3]], "ordinal") == 1.0
    with pytest.raises(ValueError, match="level"):
        K.krippendorff_alpha([[1, 2]], "cubic")  # type: ignore[arg-type]
