"""Agreement between LLM judges and human raters, for preferences and for scores.

Preferences (FastChat MT-Bench conventions, ``fastchat/llm_judge/compute_agreement.py``)
---------------------------------------------------------------------------------------
* A *vote* is one verdict on (item, aspect, system, system_b): value +1 (``system`` wins), 0 (tie,
  including ``tie (inconsistent)``), -1 (``system_b`` wins).  Votes are grouped by (item_id, aspect,
  unordered system pair) and oriented to the alphabetical order of the pair before being compared
  (MT-Bench encodes the turn in ``item_id``, e.g. ``mtbench-81-t1``).
* Judge vs human: each judge vote on a key is compared with each human vote on that key.  Human vs
  human: every two human votes on a key (all pairs ``i < j``, as FastChat; ``distinct_raters=True``
  also drops pairs of votes by the same rater - on MT-Bench this changes nothing).
* S1 keeps ties (a tie agrees with a tie); S2 drops every comparison in which either side is a tie.
* Cohen's kappa for judge vs human uses the same comparisons: the 3 x 3 (judge x human) confusion
  matrix over {-1, 0, +1} for S1, the 2 x 2 non-tie block for S2.
* Which ratings are *human*: raters whose id starts with ``human_prefix`` (MT-Bench: ``"expert_"``,
  leaving out ``author_*``); ``None`` means every rater in the ratings frame.

Scores
------
* Judge item scores: single-mode done judgments averaged over self-consistency samples, keyed by
  (item_id, system, aspect); human scores: ratings of kind ``score`` keyed the same way.  For the
  judge-vs-human correlations the human raters of a key are averaged; Krippendorff's alpha keeps
  them as separate raters.
* Spearman, Kendall (tau-b) and Pearson with p-values from scipy.stats, on the keys both sides rated.
* Quadratic-weighted Cohen's kappa after mapping both sides to a common k-point scale: a linear
  min-max map of each side's own rubric scale to [0, 1], then ``floor(unit * k)`` clipped to
  ``k - 1`` (default k = 5; 1-100 -> 1-20.8 is bin 0, ..., the top value falls in bin k - 1).
* Krippendorff's alpha across raters per aspect: interval alpha on the min-max [0, 1] values,
  ordinal alpha on the k-bin values; reported for humans only and for humans plus every judge, in
  both cases over the units (item, system) that at least one human rated.
* System level: Spearman and Kendall between the judge's and the humans' per-system mean scores
  (means over the keys both sides rated).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from scipy import special
from scipy import stats as sps

from judge_api.stats import frames as F
from judge_api.stats.krippendorff import krippendorff_alpha_long
from judge_api.stats.preferences import combine_orders
from judge_api.stats.scores import item_scores

VOTE_KEYS = [F.ITEM_ID, F.ASPECT, "sys_lo", "sys_hi"]
CATEGORIES = (-1, 0, 1)


# --- preference votes ------------------------------------------------------------------------------
def votes_from_judgments(judgments: pd.DataFrame, *, combined: pd.DataFrame | None = None) -> pd.DataFrame:
    """Order-combined pairwise judgments as votes (ratings-frame layout, ``rater`` = judge)."""
    comb = combined if combined is not None else combine_orders(judgments)
    code = F.outcome_codes(comb[F.OUTCOME])
    votes = pd.DataFrame(
        {
            F.ITEM_ID: F.column(comb[F.ITEM_ID]),
            F.SYSTEM: F.column(comb[F.SYSTEM_A]),
            F.SYSTEM_B: F.column(comb[F.SYSTEM_B]),
            F.ASPECT: F.column(comb[F.ASPECT]),
            F.RATER: F.column(comb[F.JUDGE]),
            F.KIND: F.KIND_PREFERENCE,
            F.VALUE: code,
            F.TIE_INCONSISTENT: comb["inconsistent"].to_numpy(dtype=bool),
        }
    )
    return F.validate_ratings(votes)


def preference_votes(ratings: pd.DataFrame | None, human_prefix: str | None = None) -> pd.DataFrame:
    """Preference votes of a ratings frame, optionally only raters starting with ``human_prefix``."""
    r = F.validate_ratings(ratings)
    r = r[(r[F.KIND] == F.KIND_PREFERENCE) & r[F.VALUE].notna() & r[F.SYSTEM_B].notna()]
    if human_prefix is not None:
        r = r[r[F.RATER].str.startswith(human_prefix)]
    return r


def canonical_votes(votes: pd.DataFrame) -> pd.DataFrame:
    """Votes oriented to the alphabetical order of each pair: ``sys_lo``, ``sys_hi``, ``vote`` in -1/0/+1."""
    a = votes[F.SYSTEM].to_numpy(dtype=object)
    b = votes[F.SYSTEM_B].to_numpy(dtype=object)
    swap = (votes[F.SYSTEM] > votes[F.SYSTEM_B]).to_numpy(dtype=bool)
    v = np.sign(votes[F.VALUE].to_numpy(dtype="float64"))
    out = pd.DataFrame(
        {
            F.ITEM_ID: F.column(votes[F.ITEM_ID]),
            F.ASPECT: F.column(votes[F.ASPECT]),
            "sys_lo": np.where(swap, b, a),
            "sys_hi": np.where(swap, a, b),
            F.RATER: F.column(votes[F.RATER]),
            "vote": np.where(swap, -v, v).astype(np.int64),
        }
    )
    return out


def _vote_counts(canon: pd.DataFrame, extra: list[str] | None = None) -> pd.DataFrame:
    """Per key: how many votes are -1, 0, +1 (columns ``c-1``, ``c0``, ``c1``)."""
    keys = VOTE_KEYS + (extra or [])
    if canon.empty:
        return pd.DataFrame(columns=[*keys, "c-1", "c0", "c1"])
    onehot = pd.DataFrame({f"c{c}": (canon["vote"].to_numpy() == c).astype(np.int64) for c in CATEGORIES})
    for k in keys:
        onehot[k] = F.column(canon[k])
    return onehot.groupby(keys, sort=False).sum().reset_index()


def _rate(agree: int, total: int) -> dict[str, Any]:
    return {"agree": int(agree), "total": int(total), "rate": agree / total if total else None}


def cohen_kappa(confusion: Any, weights: str | None = None) -> float | None:
    """Cohen's kappa of a square confusion matrix (rows: rater 1, columns: rater 2).

    ``weights``: None (unweighted), ``"linear"`` or ``"quadratic"`` disagreement weights over the
    category index.  None when there are no observations or the expected disagreement is zero.
    """
    m = np.asarray(confusion, dtype="float64")
    k = m.shape[0]
    total = m.sum()
    if total <= 0 or k == 0:
        return None
    i = np.arange(k)
    if weights is None:
        w = (i[:, None] != i[None, :]).astype("float64")
    elif weights == "linear":
        w = np.abs(i[:, None] - i[None, :]).astype("float64")
    elif weights == "quadratic":
        w = ((i[:, None] - i[None, :]) ** 2).astype("float64")
    else:
        raise ValueError("weights must be None, 'linear' or 'quadratic'")
    expected = np.outer(m.sum(axis=1), m.sum(axis=0)) / total
    de = float((w * expected).sum())
    if de <= 0:
        return None
    return float(1.0 - (w * m).sum() / de)


def judge_human_agreement(judge_votes: pd.DataFrame, human_votes: pd.DataFrame) -> dict[str, Any]:
    """Judge vs human agreement (S1, S2) and Cohen's kappa over every judge-vote x human-vote pair."""
    h = _vote_counts(canonical_votes(human_votes))
    j = canonical_votes(judge_votes)
    merged = j.merge(h, on=VOTE_KEYS, how="inner")
    hc = merged[["c-1", "c0", "c1"]].to_numpy(dtype=np.int64)
    jv = merged["vote"].to_numpy(dtype=np.int64)
    confusion = np.zeros((3, 3), dtype=np.int64)
    for r, c in enumerate(CATEGORIES):
        confusion[r] = hc[jv == c].sum(axis=0)
    s1_total = int(confusion.sum())
    s1_agree = int(np.trace(confusion))
    s2 = confusion[np.ix_([0, 2], [0, 2])]
    return {
        "s1": _rate(s1_agree, s1_total),
        "s2": _rate(int(np.trace(s2)), int(s2.sum())),
        "kappa_s1": cohen_kappa(confusion),
        "kappa_s2": cohen_kappa(s2),
        "confusion": {"labels": ["b wins", "tie", "a wins"], "judge_by_human": confusion.tolist()},
        "n_keys": int(merged[VOTE_KEYS].drop_duplicates().shape[0]) if len(merged) else 0,
    }


def _pairs(n: np.ndarray) -> np.ndarray:
    return n * (n - 1) // 2


def human_human_agreement(human_votes: pd.DataFrame, *, distinct_raters: bool = False) -> dict[str, Any]:
    """Human vs human agreement (S1, S2) over every two votes on the same key (FastChat)."""
    canon = canonical_votes(human_votes)
    counts = _vote_counts(canon)
    c = counts[["c-1", "c0", "c1"]].to_numpy(dtype=np.int64)
    s1_total = _pairs(c.sum(axis=1)).sum()
    s1_agree = _pairs(c).sum()
    s2_total = _pairs(c[:, 0] + c[:, 2]).sum()
    s2_agree = (_pairs(c[:, 0]) + _pairs(c[:, 2])).sum()
    if distinct_raters and not canon.empty:
        same = _vote_counts(canon, extra=[F.RATER])[["c-1", "c0", "c1"]].to_numpy(dtype=np.int64)
        s1_total -= _pairs(same.sum(axis=1)).sum()
        s1_agree -= _pairs(same).sum()
        s2_total -= _pairs(same[:, 0] + same[:, 2]).sum()
        s2_agree -= (_pairs(same[:, 0]) + _pairs(same[:, 2])).sum()
    return {
        "s1": _rate(int(s1_agree), int(s1_total)),
        "s2": _rate(int(s2_agree), int(s2_total)),
        "n_keys": int((c.sum(axis=1) >= 2).sum()),
    }


def preference_agreement(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None,
    *,
    human_prefix: str | None = None,
    combined: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Per aspect: every judge vs the human votes, and human vs human (S1/S2, kappa)."""
    humans = preference_votes(ratings, human_prefix)
    judges = votes_from_judgments(judgments, combined=combined)
    out: dict[str, Any] = {"judge_vs_human": [], "human_vs_human": []}
    for aspect in F.distinct(humans[F.ASPECT]):
        h = humans[humans[F.ASPECT] == aspect]
        out["human_vs_human"].append({F.ASPECT: aspect, **human_human_agreement(h)})
        jv = judges[judges[F.ASPECT] == aspect]
        for judge in F.distinct(jv[F.RATER]):
            res = judge_human_agreement(jv[jv[F.RATER] == judge], h)
            out["judge_vs_human"].append({F.ASPECT: aspect, F.JUDGE: judge, **res})
    return out


# --- scores ----------------------------------------------------------------------------------------
def to_unit(x: Any, lo: Any, hi: Any) -> np.ndarray:
    """Linear min-max map of ``x`` from ``[lo, hi]`` to ``[0, 1]`` (clipped)."""
    xv = np.asarray(x, dtype="float64")
    lo_v = np.asarray(lo, dtype="float64")
    hi_v = np.asarray(hi, dtype="float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = (xv - lo_v) / (hi_v - lo_v)
    return np.clip(unit, 0.0, 1.0)


def to_bins(x: Any, lo: Any, hi: Any, n_bins: int = 5) -> np.ndarray:
    """Map ``x`` on ``[lo, hi]`` to bins 0..n_bins-1 (float, NaN stays NaN); see module docstring."""
    unit = to_unit(x, lo, hi)
    return np.where(np.isfinite(unit), np.minimum(np.floor(unit * n_bins), n_bins - 1), np.nan)


def _fill_scale(df: pd.DataFrame, value_col: str, keys: list[str]) -> pd.DataFrame:
    """Fill missing scale bounds with the observed min / max of the group."""
    df = df.copy()
    for col, fn in ((F.SCALE_MIN, "min"), (F.SCALE_MAX, "max")):
        observed = df.groupby(keys, sort=False)[value_col].transform(fn)
        df[col] = df[col].fillna(observed)
    return df


def human_scores(ratings: pd.DataFrame | None, human_prefix: str | None = None) -> pd.DataFrame:
    """Human score ratings, one row per (item_id, system, aspect, rater), with unit and bin values."""
    r = F.validate_ratings(ratings)
    r = r[(r[F.KIND] == F.KIND_SCORE) & r[F.VALUE].notna()]
    if human_prefix is not None:
        r = r[r[F.RATER].str.startswith(human_prefix)]
    keys = [F.ITEM_ID, F.SYSTEM, F.ASPECT, F.RATER]
    if r.empty:
        return pd.DataFrame(columns=[*keys, F.VALUE, F.SCALE_MIN, F.SCALE_MAX])
    r = _fill_scale(r, F.VALUE, [F.ASPECT])
    g = r.groupby(keys, sort=False).agg(
        value=(F.VALUE, "mean"), scale_min=(F.SCALE_MIN, "first"), scale_max=(F.SCALE_MAX, "first")
    )
    return g.reset_index()


def _quiet(fn: Callable[..., Any], *args: Any) -> tuple[float | None, float | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = fn(*args)
        except ValueError:
            return None, None
    stat, p = (None if v is None else float(v) for v in (res[0], res[1]))
    return (stat if stat is not None and np.isfinite(stat) else None), (p if p is not None and np.isfinite(p) else None)


PERMUTATION_MAX_N = 30
"""Below this many pairs the Spearman and Pearson p-values come from a permutation test, not a t approximation (which
gave p = 1.4e-24 for five pairs in perfect order, and 0.0 for three; the exact values are 1/60 and 1/3)."""
EXACT_MAX_N = 8
"""Up to this many pairs the permutation test enumerates every ordering (8! = 40,320): an exact p-value."""
PERMUTATION_RESAMPLES = 9999


def _pearson_last_axis(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean()
    return np.asarray((xc * yc).sum(axis=-1) / np.sqrt((xc * xc).sum(axis=-1) * float((yc * yc).sum())))


def _kendall_tau_b_last_axis(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    upper = np.triu_indices(y.size, k=1)
    sx = np.sign(x[..., :, None] - x[..., None, :])[..., upper[0], upper[1]]
    sy = np.sign(y[:, None] - y[None, :])[upper]
    return np.asarray((sx * sy).sum(axis=-1) / np.sqrt((sx * sx).sum(axis=-1) * float((sy * sy).sum())))


def permutation_p(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided permutation p-value of Spearman's rho, Kendall's tau-b or Pearson's r: exact up to ``EXACT_MAX_N``
    pairs, else ``PERMUTATION_RESAMPLES`` seeded random pairings (scipy's ``permutation_test``, which counts the
    observed one)."""
    y_used = sps.rankdata(y) if name == "spearman" else y

    def statistic(values: np.ndarray, axis: int = -1) -> np.ndarray:
        values = np.moveaxis(values, axis, -1)
        if name == "kendall":
            return _kendall_tau_b_last_axis(values, y_used)
        if name == "spearman":
            values = sps.rankdata(values, axis=-1)
        return _pearson_last_axis(values, y_used)

    result = sps.permutation_test(
        (x,),
        statistic,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=PERMUTATION_RESAMPLES if x.size > EXACT_MAX_N else math.factorial(x.size),
        alternative="two-sided",
        rng=np.random.default_rng(0),
    )
    return float(min(1.0, result.pvalue))


def spearman(x: np.ndarray, y: np.ndarray) -> tuple[float | None, float | None]:
    """``scipy.stats.spearmanr(x, y)`` of the rows where both are finite, None where scipy gives NaN (fewer than two
    rows, an input constant): the same floats, its ranks found on the distinct values (:func:`average_ranks`)
    instead of a sort of every value (issue 39: 1.8 s of a 10M-row report); the correlation and its p-value made of
    the ranks as scipy makes them (two rows too: review r58a)."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return None, None
    # the ranks laid out as scipy's apply_along_axis lays them (a transposed 2 x n array): the same float sums
    ranked = np.stack((average_ranks(x), average_ranks(y))).T
    dof = x.size - 2
    with np.errstate(divide="ignore", invalid="ignore"):
        rs = np.corrcoef(ranked, rowvar=False)
        t = rs * np.sqrt((dof / ((rs + 1.0) * (1.0 - rs))).clip(0))
    p_values = 2 * special.stdtr(dof, -np.abs(t))
    stat, p = float(rs[1, 0]), float(p_values[1, 0])
    return (stat if np.isfinite(stat) else None), (p if np.isfinite(p) else None)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """``scipy.stats.rankdata(values)`` of finite values (ties share their mean rank): the same floats, counted per
    distinct value (a hash of the values and a sort of the distinct ones, not of every value)."""
    codes, uniques = pd.factorize(values)
    order = np.argsort(uniques, kind="stable")
    counts = np.bincount(codes, minlength=len(uniques))[order]
    first = np.cumsum(counts) - counts + 1  # each distinct value's first ordinal rank, 1-based
    rank_of = np.empty(len(uniques), dtype=np.float64)
    rank_of[order] = first.astype(np.float64) + (counts.astype(np.float64) - 1) / 2
    return rank_of[codes]


_CORRELATIONS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("spearman", spearman),
    ("kendall", sps.kendalltau),
    ("pearson", sps.pearsonr),
)


def correlations(x: Any, y: Any, min_n: int = 3, *, kendall: bool = True) -> dict[str, Any]:
    """Spearman, Kendall tau-b and Pearson with p-values (None when n < min_n or an input is constant).

    Below ``PERMUTATION_MAX_N`` pairs the Spearman and Pearson p-values are permutation p-values
    (:func:`permutation_p`); Kendall's is scipy's exact one when there are no ties, a permutation one with ties.
    ``kendall=False`` leaves Kendall's out (its keys too) for callers that do not show it: it is the costliest of
    the three on many pairs."""
    xv = np.asarray(x, dtype="float64")
    yv = np.asarray(y, dtype="float64")
    ok = np.isfinite(xv) & np.isfinite(yv)
    xv, yv = xv[ok], yv[ok]
    out: dict[str, Any] = {"n": int(xv.size)}
    for name, fn in _CORRELATIONS if kendall else (_CORRELATIONS[0], _CORRELATIONS[2]):
        if xv.size < min_n or np.all(xv == xv[0]) or np.all(yv == yv[0]):
            stat, p = None, None
        else:
            stat, p = _quiet(fn, xv, yv)
            # scipy's Kendall p is exact only without ties; with ties it is asymptotic ([1, 1, 2, 2] against
            # itself: 0.083, the permutation p is 1/3)
            if stat is not None and xv.size < PERMUTATION_MAX_N:
                tied = np.unique(xv).size < xv.size or np.unique(yv).size < yv.size
                if name != "kendall" or tied:
                    p = permutation_p(name, xv, yv)
        out[name], out[f"{name}_p"] = stat, p
    return out


def quadratic_weighted_kappa(a: Any, b: Any, n_bins: int) -> float | None:
    """Quadratic-weighted Cohen's kappa of two integer category arrays in ``0..n_bins-1``."""
    av = np.asarray(a, dtype="float64")
    bv = np.asarray(b, dtype="float64")
    ok = np.isfinite(av) & np.isfinite(bv)
    if not ok.any():
        return None
    idx = av[ok].astype(np.int64) * n_bins + bv[ok].astype(np.int64)
    confusion = np.bincount(idx, minlength=n_bins * n_bins).reshape(n_bins, n_bins)
    return cohen_kappa(confusion, weights="quadratic")


SCORE_AGREEMENT_COLUMNS = [
    F.ASPECT,
    F.JUDGE,
    "n",
    "n_human_raters",
    "spearman",
    "spearman_p",
    "kendall",
    "kendall_p",
    "pearson",
    "pearson_p",
    "qwk",
    "n_bins",
    "n_systems",
    "system_spearman",
    "system_spearman_p",
    "system_kendall",
    "system_kendall_p",
]


def _judge_scores(judgments: pd.DataFrame, items: pd.DataFrame | None = None) -> pd.DataFrame:
    items = item_scores(judgments) if items is None else items
    if items.empty:
        return items
    return _fill_scale(items, F.SCORE, [F.ASPECT, F.JUDGE])


def score_agreement(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None,
    *,
    n_bins: int = 5,
    human_prefix: str | None = None,
    items: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Judge vs (mean) human score agreement per aspect x judge; see the module docstring."""
    judge = _judge_scores(judgments, items)
    human = human_scores(ratings, human_prefix)
    if judge.empty or human.empty:
        return pd.DataFrame(columns=SCORE_AGREEMENT_COLUMNS)
    human = human.assign(unit=to_unit(human[F.VALUE], human[F.SCALE_MIN], human[F.SCALE_MAX]))
    hmean = (
        human.groupby([F.ITEM_ID, F.SYSTEM, F.ASPECT], sort=False)
        .agg(h_value=(F.VALUE, "mean"), h_unit=("unit", "mean"), n_raters=(F.RATER, "nunique"))
        .reset_index()
    )
    judge = judge.rename(columns={"system": F.SYSTEM})
    # the rated items' scores only: the inner merge keeps those rows, in their order, and a million judge scores
    # merged with a few thousand ratings coerced every key of the million to strings first (issue 39)
    judge = judge[judge[F.ITEM_ID].isin(pd.unique(hmean[F.ITEM_ID])).to_numpy()]
    merged = judge.merge(hmean, on=[F.ITEM_ID, F.SYSTEM, F.ASPECT], how="inner")
    records = []
    for (aspect, jname), grp in merged.groupby([F.ASPECT, F.JUDGE], sort=True):
        j_unit = to_unit(grp[F.SCORE], grp[F.SCALE_MIN], grp[F.SCALE_MAX])
        h_unit = grp["h_unit"].to_numpy(dtype="float64")
        rec: dict[str, Any] = {F.ASPECT: aspect, F.JUDGE: jname}
        rec.update(correlations(grp[F.SCORE], grp["h_value"]))
        rec["n_human_raters"] = int(human.loc[human[F.ASPECT] == aspect, F.RATER].nunique())
        rec["qwk"] = quadratic_weighted_kappa(
            to_bins(j_unit, 0.0, 1.0, n_bins), to_bins(h_unit, 0.0, 1.0, n_bins), n_bins
        )
        rec["n_bins"] = n_bins
        sys_means = grp.groupby(F.SYSTEM, sort=True)[[F.SCORE, "h_value"]].mean()
        sys_corr = correlations(sys_means[F.SCORE], sys_means["h_value"])
        rec["n_systems"] = len(sys_means)
        for name in ("spearman", "kendall"):
            rec[f"system_{name}"] = sys_corr[name]
            rec[f"system_{name}_p"] = sys_corr[f"{name}_p"]
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=SCORE_AGREEMENT_COLUMNS)


def score_alpha(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None,
    *,
    n_bins: int = 5,
    human_prefix: str | None = None,
    items: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Krippendorff's alpha per aspect, humans only and humans plus every judge (see module docstring).

    Units are (item_id, system); raters keep their identity (humans are not averaged).
    """
    human = human_scores(ratings, human_prefix)
    cols = [
        F.ASPECT,
        "n_units",
        "n_raters_human",
        "n_judges",
        "alpha_interval_humans",
        "alpha_ordinal_humans",
        "alpha_interval_all",
        "alpha_ordinal_all",
    ]
    if human.empty:
        return pd.DataFrame(columns=cols)
    h = pd.DataFrame(
        {
            F.ITEM_ID: human[F.ITEM_ID],
            F.SYSTEM: human[F.SYSTEM],
            F.ASPECT: human[F.ASPECT],
            F.RATER: human[F.RATER],
            "unit": to_unit(human[F.VALUE], human[F.SCALE_MIN], human[F.SCALE_MAX]),
            "is_judge": False,
        }
    )
    judge = _judge_scores(judgments, items)
    # every aspect scored gets its row (an aspect only the judges scored: no units, no alpha), but only units some
    # human rated count in it: the judges' scores of other items are left out first (a key per judge score of a
    # million before: issue 39); the rows kept keep their order (review r50b)
    aspects = F.distinct(human[F.ASPECT], judge[F.ASPECT]) if not judge.empty else F.distinct(human[F.ASPECT])
    judge = judge[judge[F.ITEM_ID].isin(pd.unique(human[F.ITEM_ID])).to_numpy()]
    if not judge.empty:
        j = pd.DataFrame(
            {
                F.ITEM_ID: judge[F.ITEM_ID],
                F.SYSTEM: judge["system"],
                F.ASPECT: judge[F.ASPECT],
                F.RATER: judge[F.JUDGE],
                "unit": to_unit(judge[F.SCORE], judge[F.SCALE_MIN], judge[F.SCALE_MAX]),
                "is_judge": True,
            }
        )
        both = pd.concat([h, j], ignore_index=True)
    else:
        both = h
    both["bin"] = to_bins(both["unit"], 0.0, 1.0, n_bins)
    # one integer per (item, system): a joined string key made item "a\x1fb" x system "c" the unit of item "a" x
    # system "b\x1fc" (review r50b); the units are numbered in the order they first appear either way
    both["unit_key"] = F.group_codes(both, [F.ITEM_ID, F.SYSTEM])
    records = []
    aspect_of = both[F.ASPECT].astype(str).to_numpy()
    for aspect in aspects:
        grp = both[aspect_of == aspect]
        hum = grp[~grp["is_judge"]]
        grp = grp[grp["unit_key"].isin(set(hum["unit_key"]))]  # units some human rated
        records.append(
            {
                F.ASPECT: aspect,
                "n_units": int(hum["unit_key"].nunique()),
                "n_raters_human": int(hum[F.RATER].nunique()),
                "n_judges": int(grp.loc[grp["is_judge"], F.RATER].nunique()),
                "alpha_interval_humans": krippendorff_alpha_long(hum["unit_key"], hum["unit"], "interval"),
                "alpha_ordinal_humans": krippendorff_alpha_long(hum["unit_key"], hum["bin"], "ordinal"),
                "alpha_interval_all": krippendorff_alpha_long(grp["unit_key"], grp["unit"], "interval"),
                "alpha_ordinal_all": krippendorff_alpha_long(grp["unit_key"], grp["bin"], "ordinal"),
            }
        )
    return pd.DataFrame.from_records(records, columns=cols)
