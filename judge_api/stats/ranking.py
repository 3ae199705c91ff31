"""Bradley-Terry ranking of systems from order-combined pairwise outcomes.

Convention
----------
* Input: the order-combined outcomes of ``preferences.combine_orders`` (one per item x pair x aspect x
  judge); a win counts 1 for the winner, a tie (real or inconsistent) counts half a win for each side.
  One model is fitted per aspect x judge over every system that appears in a pair.
* Model: P(i beats j) = p_i / (p_i + p_j).  Fitted with Hunter's (2004) MM algorithm
  ``p_i <- W_i / sum_j N_ij / (p_i + p_j)``, vectorised over bootstrap replicates.  ``prior`` virtual
  ties are added to every pair of systems (default 1.0, i.e. half a win each way): this keeps the
  strengths finite when a system wins or loses everything and ties disconnected comparison graphs
  together; with hundreds of comparisons per pair its effect is negligible.
* Scale: ``strength`` is the log strength ``log p_i`` centred to mean 0 over systems; ``elo`` is
  ``400 * log10(p_i) + 1000`` (so a 400 point gap means 10:1 odds).
* Uncertainty: percentile bootstrap over *items* (all comparisons of a resampled item travel with it),
  ``n_boot`` replicates, refitting the model on each replicate, widened to the Wilson-consistent interval of the
  system's win rate ``w`` (ties half) over its ``n`` comparisons: ``(S - 1) / S * logit(Wilson bound)`` for a
  component of ``S`` systems (exact for two systems, where the centred strength is ``logit(w) / 2``). The bootstrap
  alone collapses to a point when one side always wins or every comparison is a tie (A beat B 5/5: Elo
  [1208, 1208], while the Wilson interval of the win rate is [0.566, 1.0]). A system that won (lost) every
  comparison has no upper (lower) bound: the side is ``None`` and ``ci_unbounded`` says which.
* Connected components: systems are ranked only against systems they are linked to by comparisons (directly or
  through others). Each component (``component``, 1-based, by its first system's name) gets its own fit, so
  the prior's virtual ties never order systems that were not compared; ``rank`` is the rank within the
  component, and ``not_compared_with`` lists the systems this one never met directly.
  ``rank`` 1 is the strongest system of its component (ties in the point estimate share the smaller rank).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from judge_api.stats import frames as F
from judge_api.stats.bootstrap import percentile_ci, resample_counts, resampled_sums, rng_for
from judge_api.stats.preferences import combine_orders, wilson_interval

LOG10 = float(np.log(10.0))
DENSE_LIMIT = 4_000_000
"""Largest items x systems^2 whose contributions the bootstrap multiplies as a dense matrix (32 MB)."""

RANKING_COLUMNS = [
    F.ASPECT,
    F.JUDGE,
    "system",
    "rank",
    "strength",
    "strength_ci_low",
    "strength_ci_high",
    "elo",
    "elo_ci_low",
    "elo_ci_high",
    "ci_unbounded",
    "component",
    "not_compared_with",
    "n_comparisons",
    "wins",
    "ties",
    "losses",
]


def fit_bradley_terry(
    wins: np.ndarray, *, prior: float = 1.0, max_iter: int = 10_000, tol: float = 1e-10
) -> np.ndarray:
    """Centred log strengths from a win matrix ``wins[..., i, j]`` = (half-)wins of i over j.

    Accepts one ``(S, S)`` matrix or a stack ``(B, S, S)`` and returns ``(S,)`` or ``(B, S)``.
    """
    w = np.asarray(wins, dtype="float64")
    single = w.ndim == 2
    if single:
        w = w[None]
    s = w.shape[-1]
    if s == 0:
        return np.empty((0,) if single else (w.shape[0], 0))
    off = 1.0 - np.eye(s)
    w = w * off + (prior / 2.0) * off
    n = w + np.swapaxes(w, -1, -2)
    total = w.sum(axis=-1)  # W_i
    logp = np.zeros(w.shape[:-1])
    for _ in range(max_iter):
        p = np.exp(logp)
        denom = (n / (p[..., :, None] + p[..., None, :])).sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = np.log(total) - np.log(denom)
        new = np.where(np.isfinite(new), new, -50.0)
        new -= new.mean(axis=-1, keepdims=True)
        delta = float(np.max(np.abs(new - logp))) if new.size else 0.0
        logp = new
        if delta < tol:
            break
    return logp[0] if single else logp


def _item_contributions(combined: pd.DataFrame, systems: list[str]) -> tuple[sparse.csr_matrix, np.ndarray]:
    """Sparse (items x S*S) half-win contributions, and per-system (win, tie, loss) counts (3 x S)."""
    s = len(systems)
    index = {name: i for i, name in enumerate(systems)}
    a = combined[F.SYSTEM_A].map(index).to_numpy(dtype=np.int64)
    b = combined[F.SYSTEM_B].map(index).to_numpy(dtype=np.int64)
    item = pd.factorize(combined[F.ITEM_ID])[0]
    code = F.outcome_codes(combined[F.OUTCOME])  # 1 / 0 / -1, NaN for anything else: no string per row (issue 39)
    win_a = np.where(code == 1, 1.0, np.where(code == 0, 0.5, 0.0))
    rows = np.concatenate([item, item])
    cols = np.concatenate([a * s + b, b * s + a])
    vals = np.concatenate([win_a, 1.0 - win_a])
    n_items = int(item.max()) + 1 if item.size else 0
    contrib = sparse.csr_matrix((vals, (rows, cols)), shape=(n_items, s * s))

    # each side's rows counted per (system, outcome) in one pass: columns loss, tie, win, anything else
    slot = np.where(np.isnan(code), 3.0, code + 1.0).astype(np.int64)
    by_a = np.bincount(a * 4 + slot, minlength=4 * s).reshape(s, 4)
    by_b = np.bincount(b * 4 + slot, minlength=4 * s).reshape(s, 4)
    wtl = np.stack([by_a[:, 2] + by_b[:, 0], by_a[:, 1] + by_b[:, 1], by_a[:, 0] + by_b[:, 2]]).astype(np.int64)
    return contrib, wtl


def bradley_terry_table(
    combined: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    prior: float = 1.0,
    key: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Fit one Bradley-Terry model on a set of combined outcomes (one aspect x judge)."""
    cols = [c for c in RANKING_COLUMNS if c not in (F.ASPECT, F.JUDGE)]
    if combined.empty:
        return pd.DataFrame(columns=cols)
    systems = F.distinct(combined[F.SYSTEM_A], combined[F.SYSTEM_B])
    s = len(systems)
    contrib, wtl = _item_contributions(combined, systems)
    totals = np.asarray(contrib.sum(axis=0)).reshape(s, s)
    met = (totals + totals.T) > 0
    n_parts, labels = connected_components(sparse.csr_matrix(met), directed=False)
    point = np.zeros(s)
    boot = np.full((max(n_boot, 0), s), np.nan)
    rank = np.zeros(s, dtype=np.int64)
    order = sorted(range(n_parts), key=lambda c: min(systems[i] for i in np.flatnonzero(labels == c)))
    component = {c: k + 1 for k, c in enumerate(order)}
    rng = rng_for(seed, "bradley_terry", *key)
    # the resampled win matrices: the items' contributions summed with multinomial counts over their distinct rows
    # (few: an item's outcomes fall into few patterns; issue 39), else one dense product per block of replicates;
    # the contributions are halves and the counts integers, so every sum is exact in any order
    # (the sparse product when a dense copy would be large: many systems)
    if contrib.shape[0] * s * s <= DENSE_LIMIT:
        blocks = [sums.reshape(-1, s, s) for sums in resampled_sums(contrib.toarray(), n_boot, rng)]
    else:
        contrib_t = contrib.T.tocsr()
        blocks = [
            np.asarray(contrib_t @ counts.T).T.reshape(-1, s, s)
            for counts in resample_counts(contrib.shape[0], n_boot, rng)
        ]
    resampled = np.concatenate(blocks) if blocks else np.empty((0, s, s))
    for c in range(n_parts):
        members = np.flatnonzero(labels == c)
        sub_wins = totals[np.ix_(members, members)]
        point[members] = fit_bradley_terry(sub_wins, prior=prior)
        if resampled.shape[0]:
            boot[:, members] = fit_bradley_terry(resampled[:, members][:, :, members], prior=prior)
        rank[members] = pd.Series(-point[members]).rank(method="min").astype("int64").to_numpy()
    n_each = wtl.sum(axis=0).astype("float64")
    win_low, win_high = wilson_interval(wtl[0] + wtl[1] / 2.0, n_each, ci)
    records: list[dict[str, Any]] = []
    for i, name in enumerate(systems):
        size = int((labels == labels[i]).sum())
        lo, hi = percentile_ci(boot[:, i], ci) if boot.size else (None, None)
        unbounded = None
        if lo is not None and hi is not None and size > 1:
            lo, hi, unbounded = _widened(lo, hi, float(win_low[i]), float(win_high[i]), (size - 1) / size, wtl[:, i])
        records.append(
            {
                "system": name,
                "rank": int(rank[i]),
                "strength": float(point[i]),
                "strength_ci_low": lo,
                "strength_ci_high": hi,
                "elo": to_elo(point[i]),
                "elo_ci_low": None if lo is None else to_elo(lo),
                "elo_ci_high": None if hi is None else to_elo(hi),
                "ci_unbounded": unbounded,
                "component": component[int(labels[i])],
                "not_compared_with": [systems[j] for j in range(s) if j != i and not met[i, j]],
                "n_comparisons": int(wtl[:, i].sum()),
                "wins": int(wtl[0, i]),
                "ties": int(wtl[1, i]),
                "losses": int(wtl[2, i]),
            }
        )
    out = pd.DataFrame.from_records(records, columns=cols)
    return out.sort_values(["component", "rank", "system"]).reset_index(drop=True)


def _logit(p: float) -> float:
    return float(np.log(p) - np.log1p(-p))


def _widened(
    lo: float, hi: float, win_low: float, win_high: float, factor: float, wtl: np.ndarray
) -> tuple[float | None, float | None, str | None]:
    """The bootstrap interval widened to the Wilson-consistent one; a side is None when the system won (lost)
    every comparison, where no finite bound exists."""
    all_won, all_lost = wtl[1] == 0 and wtl[2] == 0, wtl[0] == 0 and wtl[1] == 0
    low: float | None = lo if win_low <= 0.0 else min(lo, factor * _logit(win_low))
    high: float | None = hi if win_high >= 1.0 else max(hi, factor * _logit(win_high))
    if all_won:
        high = None
    if all_lost:
        low = None
    unbounded = "high" if all_won else "low" if all_lost else None
    return low, high, unbounded


def to_elo(log_strength: float) -> float:
    """Elo-like scale of a natural-log strength: ``400 * log10(p) + 1000``."""
    return float(400.0 * float(log_strength) / LOG10 + 1000.0)


def bradley_terry(
    judgments: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    prior: float = 1.0,
    combined: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Bradley-Terry strengths, bootstrap CIs and ranks per aspect x judge (see module docstring).

    Pass ``combined`` (``combine_orders`` output) to skip recombining the orders.
    """
    comb = combined if combined is not None else combine_orders(judgments)
    if comb.empty:
        return pd.DataFrame(columns=RANKING_COLUMNS)
    tables = []
    # only the columns a table reads are split into the (aspect, judge) blocks (issue 39)
    read = [F.ASPECT, F.JUDGE, F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.OUTCOME]
    for (aspect, judge), grp in comb[read].groupby([F.ASPECT, F.JUDGE], sort=True):
        t = bradley_terry_table(grp, n_boot=n_boot, seed=seed, ci=ci, prior=prior, key=(aspect, judge))
        t.insert(0, F.JUDGE, judge)
        t.insert(0, F.ASPECT, aspect)
        tables.append(t)
    return pd.concat(tables, ignore_index=True)[RANKING_COLUMNS]
