"""Review r58a of ba8417c (promise: every figure the same to the last bit, for every input 66fb8de accepted)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from judge_api.stats import frames as F
from judge_api.stats.agreement import correlations, permutation_p
from judge_api.stats.scores import _scale_width, _scale_widths


def test_FIXED_correlations_with_min_n_2_and_two_pairs_keep_spearman() -> None:
    """66fb8de's ``correlations`` ran ``scipy.stats.spearmanr`` whenever ``n >= min_n``; ba8417c's ``spearman`` has
    its own ``n < 3 -> None`` (copied from ``bias._spearman``), so an explicit ``min_n=2`` (or 1) with two pairs now
    gave ``spearman = spearman_p = None`` where the old code gave 0.9999999999999999 / 1.0 (Kendall and Pearson,
    still scipy's, kept their figures: the three were no longer consistent). Fixed: ``spearman`` is scipy's from two
    rows on; ``bias.length_bias`` keeps its own rule of three."""
    x, y = np.array([0.0, 1.0]), np.array([0.0, 1.0])
    old_stat = float(sps.spearmanr(x, y)[0])  # 0.9999999999999999
    old_p = permutation_p("spearman", x, y)  # 1.0 (n < PERMUTATION_MAX_N)
    got = correlations(x, y, min_n=2)
    assert got["pearson"] == 1.0  # unchanged
    assert (got["spearman"], got["spearman_p"]) == (old_stat, old_p)


def test_scale_widths_on_edge_scales_equal_the_per_block_width() -> None:
    """Signed zeros, infinities, subnormals, NaN, reversed scales, int scales, categorical keys with unused
    categories: ``_scale_widths`` is each block's ``_scale_width`` (2,000 random frames checked in the review)."""
    rng = np.random.default_rng(0)
    vals = [np.nan, -0.0, 0.0, 1.0, 10.0, np.inf, -np.inf, 5e-324, 1e308, -1e308]
    for t in range(300):
        n = int(rng.integers(1, 30))
        items = pd.DataFrame(
            {
                F.ASPECT: rng.choice(np.array(["x", "y", "z"], dtype=object), n),
                F.JUDGE: rng.choice(np.array(["j1", "j2"], dtype=object), n),
                F.SCALE_MIN: rng.choice(vals, n),
                F.SCALE_MAX: rng.choice(vals, n),
            }
        )
        if t % 3 == 0:
            items[F.ASPECT] = pd.Categorical(items[F.ASPECT], categories=["z", "q", "x", "y"])
        if t % 5 == 0:
            items[F.SCALE_MIN], items[F.SCALE_MAX] = rng.integers(-2, 3, n), rng.integers(-2, 3, n)
        expected = {k: _scale_width(g) for k, g in items.groupby([F.ASPECT, F.JUDGE], sort=False)}
        assert repr(_scale_widths(items)) == repr(expected)
