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
