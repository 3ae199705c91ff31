"""Seeded percentile bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from judge_api.stats import bootstrap as B


def test_same_seed_same_interval_and_key_independent_of_call_order() -> None:
    x = np.random.default_rng(3).normal(10, 2, 300)
    a = B.bootstrap_mean_ci(x, n_boot=500, rng=B.rng_for(7, "k", 1))
    B.bootstrap_mean_ci(x, n_boot=500, rng=B.rng_for(7, "other"))
    b = B.bootstrap_mean_ci(x, n_boot=500, rng=B.rng_for(7, "k", 1))
    assert a == b
    assert a != B.bootstrap_mean_ci(x, n_boot=500, rng=B.rng_for(8, "k", 1))


@pytest.mark.parametrize("discrete", [True, False])
def test_ci_covers_the_mean_with_the_normal_theory_width(discrete: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(1, 11, 2000).astype(float) if discrete else rng.normal(5.0, 2.0, 2000)
    lo, hi = B.bootstrap_mean_ci(x, n_boot=2000, rng=B.rng_for(0, "t"))
    assert lo is not None and hi is not None
    assert lo < x.mean() < hi
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert (hi - lo) == pytest.approx(2 * 1.96 * se, rel=0.12)


def test_multinomial_shortcut_matches_index_resampling_in_distribution() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(1, 6, 400).astype(float)  # 5 distinct values -> exact multinomial path
    short = B.bootstrap_means(x, 4000, np.random.default_rng(2))
    idx = np.random.default_rng(3).integers(0, x.size, (4000, x.size))
    full = x[idx].mean(axis=1)
    assert short.mean() == pytest.approx(full.mean(), abs=0.01)
    assert short.std() == pytest.approx(full.std(), rel=0.06)


def test_no_data_gives_none_and_constant_data_gives_a_point() -> None:
    assert B.bootstrap_mean_ci([], n_boot=100) == (None, None)
    assert B.bootstrap_mean_ci([np.nan], n_boot=100) == (None, None)
    assert B.bootstrap_mean_ci([1.0, 2.0], n_boot=0) == (None, None)
    assert B.bootstrap_mean_ci([4.0, 4.0, 4.0], n_boot=100) == (4.0, 4.0)


def test_resample_counts_rows_sum_to_n_and_chunking_keeps_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "MAX_BLOCK", 50)
    blocks = list(B.resample_counts(20, 7, np.random.default_rng(0)))
    assert len(blocks) > 1
    counts = np.concatenate(blocks)
    assert counts.shape == (7, 20)
    assert np.all(counts.sum(axis=1) == 20)


def _index_sums(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The replicates of ``x.sum(axis=0)`` by index resampling (the draw the multinomial shortcut replaces)."""
    return np.concatenate([counts @ x for counts in B.resample_counts(x.shape[0], n_boot, rng)])


def test_resampled_sums_of_few_patterns_have_the_index_resamplings_distribution() -> None:
    # 400 units repeating 5 distinct rows: the multinomial over the rows is the same law as index resampling
    patterns = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    x = patterns[np.random.default_rng(1).choice(5, size=400, p=[0.4, 0.2, 0.2, 0.1, 0.1])]
    new = np.concatenate(list(B.resampled_sums(x, 20_000, np.random.default_rng(2))))
    old = _index_sums(x, 20_000, np.random.default_rng(3))
    assert new.shape == old.shape == (20_000, 2)
    np.testing.assert_allclose(new.mean(axis=0), x.sum(axis=0), rtol=0.005)
    np.testing.assert_allclose(new.mean(axis=0), old.mean(axis=0), rtol=0.005)
    np.testing.assert_allclose(np.cov(new.T), np.cov(old.T), rtol=0.06, atol=0.5)
    # the theoretical covariance of a resampled sum: n times the units' population covariance
    np.testing.assert_allclose(np.cov(new.T), len(x) * np.cov(x.T, bias=True), rtol=0.06, atol=0.5)


def test_resampled_sums_keep_n_units_and_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "MAX_BLOCK", 6)
    x = np.column_stack([np.ones(40), np.tile([0.0, 1.0], 20)])  # two patterns: the multinomial path
    blocks = list(B.resampled_sums(x, 7, np.random.default_rng(0)))
    assert len(blocks) > 1
    sums = np.concatenate(blocks)
    assert sums.shape == (7, 2)
    assert np.all(sums[:, 0] == 40.0)  # every replicate draws n units
    assert np.all((sums[:, 1] >= 0) & (sums[:, 1] <= 40))


def test_resampled_sums_of_distinct_units_are_the_index_draw() -> None:
    # many distinct rows: exactly the index resampling of the same generator, draw for draw
    x = np.random.default_rng(4).normal(size=(50, 3))
    got = np.concatenate(list(B.resampled_sums(x, 30, np.random.default_rng(5))))
    np.testing.assert_array_equal(got, _index_sums(x, 30, np.random.default_rng(5)))
    assert list(B.resampled_sums(np.empty((0, 3)), 30, np.random.default_rng(5))) == []
    assert list(B.resampled_sums(x, 0, np.random.default_rng(5))) == []


def test_resampled_sums_of_few_patterns_are_pinned_for_a_seed() -> None:
    """The multinomial draw of the ranking's resample is part of the report's seeded figures (a regression pin, review
    r39e): these replicates change only with a documented change of the draw (and ``stats.report.REPORT_VERSION``).
    Integer counts times halves: exact on any CPU."""
    patterns = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    x = patterns[[0, 1, 2, 0, 0, 0, 1, 2, 2, 0, 1, 0]]
    got = np.concatenate(list(B.resampled_sums(x, 4, B.rng_for(0, "bradley_terry", "overall", "j"))))
    np.testing.assert_array_equal(got, [[8.0, 4.0], [4.0, 8.0], [7.0, 5.0], [5.5, 6.5]])
    again = np.concatenate(list(B.resampled_sums(x[::-1], 4, B.rng_for(0, "bradley_terry", "overall", "j"))))
    np.testing.assert_array_equal(again, got)  # the distinct rows are sorted: the items' order does not matter


def test_distinct_rows_equal_numpys_unique_rows() -> None:
    rng = np.random.default_rng(3)
    for n, width, distinct in [(5000, 16, 300), (4000, 4, 9), (50, 3, 50), (1, 2, 1)]:
        x = (rng.integers(0, 3, size=(distinct, width)) / 2.0)[rng.integers(0, distinct, n)]
        if n == 50:
            x[[0, 1]] = np.nan  # NaN rows never merge, in either
        rows, counts = B._distinct_rows(x)
        expected_rows, expected_counts = np.unique(x, axis=0, return_counts=True)
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_array_equal(counts, expected_counts)
