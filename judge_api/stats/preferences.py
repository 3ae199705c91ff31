"""Pairwise-mode preference statistics: combining presentation orders, win/tie/loss rates.

Conventions
-----------
* ``outcome`` / ``preference`` are always *for system_a* after undoing the presentation order
  (data contract).  Self-consistency samples of one order are combined first: their outcomes are
  coded win=+1, tie=0, loss=-1 and the sign of the mean is the order's outcome (majority vote, a
  draw is a tie); their preferences are averaged.
* Two presentation orders of one key (item, system_a, system_b, aspect, judge) are combined with
  FastChat's MT-Bench rule: both orders agree -> that outcome; they disagree -> ``tie`` flagged
  ``inconsistent``; only one order was judged (single-order mode, or the other order failed) ->
  that order's outcome.  ``preference`` of the key is the mean of the orders' mean preferences.
  A row without ``order`` counts as order ``ab``.
* Per system pair: ``wins``/``ties``/``losses`` count combined keys; ``ties = ties_real +
  ties_inconsistent``.  ``win_rate_pct``/``tie_rate_pct``/``loss_rate_pct`` are ``100 * count / n``
  (the seed paper's "Rsum wins 48.2% and loses 11.9%" figures), ``win_rate = (W + T/2) / N`` in [0, 1]
  with a Wilson score interval that treats the half-counted ties as half successes (an approximation;
  exact when there are no ties).
* ``preference_distribution`` counts keys per mean-preference level (steps of 0.5 on the -2..+2
  scale; a 4-option rubric gives levels +-2, +-1 per order and half-steps once two orders are
  averaged), keyed by the level as a string (``"+1.5"``, ``"0"``, ``"-2"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from judge_api.stats import frames as F
from judge_api.stats.status_counts import status_counts_frame

PAIR_KEYS = [F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE]
GROUP_KEYS = [F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE]
CODE_OUTCOME = np.array([F.LOSS, F.TIE, F.WIN], dtype=object)  # index = code + 1

COMBINED_COLUMNS = [
    *PAIR_KEYS,
    F.OUTCOME,
    "inconsistent",
    "n_orders",
    "outcome_ab",
    "outcome_ba",
    F.PREFERENCE,
    F.LEN_A,
    F.LEN_B,
]


def pairwise_rows(judgments: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Pairwise-mode rows (optionally only ``columns``) of a validated frame."""
    mask = (judgments[F.MODE] == F.PAIRWISE).to_numpy()
    cols = list(judgments.columns) if columns is None else columns
    return judgments.loc[mask, cols]


def _empty_combined() -> pd.DataFrame:
    out = pd.DataFrame({c: pd.Series(dtype="str") for c in PAIR_KEYS})
    out[F.OUTCOME] = pd.Series(dtype="str")
    out["inconsistent"] = pd.Series(dtype="bool")
    out["n_orders"] = pd.Series(dtype="int64")
    out["outcome_ab"] = pd.Series(dtype="str")
    out["outcome_ba"] = pd.Series(dtype="str")
    for c in (F.PREFERENCE, F.LEN_A, F.LEN_B):
        out[c] = pd.Series(dtype="float64")
    return out


_OUTCOME_TYPE = pd.CategoricalDtype(pd.Index(sorted(F.OUTCOMES), dtype="str"))
"""loss / tie / win, sorted as the strings sort (``frames.encode_strings``' categoricals)."""


def _codes_to_outcomes(codes: np.ndarray) -> pd.Categorical:
    """+1/0/-1 (NaN = absent) -> win/tie/loss (missing), one byte a unit (issue 39: Arrow strings were ~13 bytes a
    unit in three columns, and every comparison turned them into Python strings)."""
    position = {code: list(_OUTCOME_TYPE.categories).index(name) for code, name in enumerate(CODE_OUTCOME, start=-1)}
    ok = np.isfinite(codes)
    out = np.full(codes.shape, -1, dtype=np.int8)
    for code, at in position.items():
        out[ok & (codes == code)] = at
    return pd.Categorical.from_codes(out, dtype=_OUTCOME_TYPE)


def combine_orders(judgments: pd.DataFrame, *, validated: bool = False) -> pd.DataFrame:
    """One row per (item, system_a, system_b, aspect, judge) with the order-combined outcome.

    Only ``done`` rows with an outcome take part.  Columns: the key, ``outcome``, ``inconsistent``,
    ``n_orders`` (1 or 2), ``outcome_ab``, ``outcome_ba`` (None when that order is absent),
    ``preference`` and the mean ``len_a`` / ``len_b``.
    """
    df = judgments if validated else F.validate_judgments(judgments)
    use = (df[F.MODE] == F.PAIRWISE) & (df[F.STATUS] == F.DONE) & df[F.OUTCOME].notna()
    for key in PAIR_KEYS:  # a row with a missing key is in no unit (the group-by numbered it -1 and bincount raised)
        use &= df[key].notna()
    cols = [*PAIR_KEYS, F.ORDER, F.OUTCOME, F.PREFERENCE, F.LEN_A, F.LEN_B]
    df = df.loc[use.to_numpy(), cols]
    if df.empty:
        return _empty_combined()
    kid = F.group_codes(df, PAIR_KEYS)
    nk = int(kid.max()) + 1
    is_ba = (df[F.ORDER] == F.ORDER_BA).to_numpy()
    sub = kid * 2 + is_ba.astype(np.int64)
    code = F.outcome_codes(df[F.OUTCOME])
    pref = df[F.PREFERENCE].to_numpy(dtype="float64")
    cnt = np.bincount(sub, minlength=2 * nk).reshape(nk, 2).astype("float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        order_code = np.sign(np.bincount(sub, weights=code, minlength=2 * nk).reshape(nk, 2) / cnt)
        pref_ok = np.isfinite(pref)
        pref_n = np.bincount(sub[pref_ok], minlength=2 * nk).reshape(nk, 2)
        pref_sum = np.bincount(sub[pref_ok], weights=pref[pref_ok], minlength=2 * nk)
        order_pref = pref_sum.reshape(nk, 2) / pref_n
    has = cnt > 0
    both = has[:, 0] & has[:, 1]
    agree = both & (order_code[:, 0] == order_code[:, 1])
    combined = np.where(
        both, np.where(agree, order_code[:, 0], 0.0), np.where(has[:, 0], order_code[:, 0], order_code[:, 1])
    )
    keys = df.iloc[F.first_rows(kid)][PAIR_KEYS].reset_index(drop=True)
    out = keys
    # strings even where an order is never present (the panel's rows): an object column of them, 17 MB at 1M rows,
    # once stacked with the stored judgments' (issue 39)
    out[F.OUTCOME] = _codes_to_outcomes(combined)
    out["inconsistent"] = both & ~agree
    out["n_orders"] = has.sum(axis=1).astype("int64")
    out["outcome_ab"] = _codes_to_outcomes(order_code[:, 0])
    out["outcome_ba"] = _codes_to_outcomes(order_code[:, 1])
    pref_orders = np.isfinite(order_pref)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[F.PREFERENCE] = np.where(pref_orders, order_pref, 0.0).sum(axis=1) / pref_orders.sum(axis=1)
    for col in (F.LEN_A, F.LEN_B):
        vals = df[col].to_numpy(dtype="float64")
        ok = np.isfinite(vals)
        n_ok = np.bincount(kid[ok], minlength=nk)
        s = np.bincount(kid[ok], weights=vals[ok], minlength=nk)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[col] = np.where(n_ok > 0, s / np.maximum(n_ok, 1), np.nan)
    return out[COMBINED_COLUMNS]


def wilson_interval(successes: Any, n: Any, ci: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a proportion (vectorised; NaN where ``n == 0``)."""
    s = np.asarray(successes, dtype="float64")
    nn = np.asarray(n, dtype="float64")
    z = float(sps.norm.ppf(0.5 + ci / 2.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = s / nn
        denom = 1.0 + z * z / nn
        centre = (p + z * z / (2.0 * nn)) / denom
        half = z * np.sqrt(p * (1.0 - p) / nn + z * z / (4.0 * nn * nn)) / denom
    lo = np.where(nn > 0, np.clip(centre - half, 0.0, 1.0), np.nan)
    hi = np.where(nn > 0, np.clip(centre + half, 0.0, 1.0), np.nan)
    return lo, hi


def level_key(level: float) -> str:
    """Distribution key of a preference level: ``+1.5``, ``0``, ``-2``."""
    if level == 0:
        return "0"
    return f"{level:+g}"


def outcome_rates(
    wins: int,
    ties: int,
    losses: int,
    *,
    ties_inconsistent: int = 0,
    ci: float = 0.95,
) -> dict[str, Any]:
    """Counts and rates of one system pair from the system_a point of view.

    ``ties`` includes ``ties_inconsistent``.  Rates are None when there are no comparisons.
    """
    n = int(wins) + int(ties) + int(losses)
    lo, hi = wilson_interval(wins + ties / 2.0, n, ci)

    def pct(k: int) -> float | None:
        return 100.0 * k / n if n else None

    return {
        "n": n,
        "wins": int(wins),
        "ties": int(ties),
        "ties_real": int(ties) - int(ties_inconsistent),
        "ties_inconsistent": int(ties_inconsistent),
        "losses": int(losses),
        "win_rate_pct": pct(wins),
        "tie_rate_pct": pct(ties),
        "loss_rate_pct": pct(losses),
        "win_rate": (wins + ties / 2.0) / n if n else None,
        "win_rate_ci_low": float(lo) if n else None,
        "win_rate_ci_high": float(hi) if n else None,
    }


PREFERENCE_COLUMNS = [
    *GROUP_KEYS,
    "n",
    "wins",
    "ties",
    "ties_real",
    "ties_inconsistent",
    "losses",
    "win_rate_pct",
    "tie_rate_pct",
    "loss_rate_pct",
    "win_rate",
    "win_rate_ci_low",
    "win_rate_ci_high",
    "mean_preference",
    "n_single_order",
    "preference_distribution",
    "n_total",
    "n_done",
    "n_failed",
    "n_unparseable",
    "n_pending",
    "n_cancelled",
]


def summarise_combined(combined: pd.DataFrame, *, ci: float = 0.95) -> pd.DataFrame:
    """Per (system_a, system_b, aspect, judge) counts and rates from ``combine_orders`` output."""
    cols = [c for c in PREFERENCE_COLUMNS if not c.startswith("n_") or c == "n_single_order"]
    if combined.empty:
        return pd.DataFrame(columns=cols)
    c = combined
    flags = pd.DataFrame(
        {
            "n": np.ones(len(c), dtype="int64"),
            "wins": (c[F.OUTCOME] == F.WIN).to_numpy().astype("int64"),
            "ties": (c[F.OUTCOME] == F.TIE).to_numpy().astype("int64"),
            "ties_inconsistent": c["inconsistent"].to_numpy().astype("int64"),
            "losses": (c[F.OUTCOME] == F.LOSS).to_numpy().astype("int64"),
            "n_single_order": (c["n_orders"] == 1).to_numpy().astype("int64"),
            "pref_sum": np.nan_to_num(c[F.PREFERENCE].to_numpy(dtype="float64")),
            "pref_n": np.isfinite(c[F.PREFERENCE].to_numpy(dtype="float64")).astype("int64"),
        }
    )
    for k in GROUP_KEYS:
        flags[k] = F.column(c[k])
    g = flags.groupby(GROUP_KEYS, sort=True).sum().reset_index()
    n = g["n"].to_numpy(dtype="float64")
    w = g["wins"].to_numpy(dtype="float64")
    t = g["ties"].to_numpy(dtype="float64")
    lo, hi = wilson_interval(w + t / 2.0, n, ci)
    g["ties_real"] = g["ties"] - g["ties_inconsistent"]
    g["win_rate_pct"] = 100.0 * w / n
    g["tie_rate_pct"] = 100.0 * t / n
    g["loss_rate_pct"] = 100.0 * g["losses"].to_numpy(dtype="float64") / n
    g["win_rate"] = (w + t / 2.0) / n
    g["win_rate_ci_low"] = lo
    g["win_rate_ci_high"] = hi
    with np.errstate(invalid="ignore", divide="ignore"):
        g["mean_preference"] = g["pref_sum"] / g["pref_n"].where(g["pref_n"] > 0)
    # Distribution of mean preference levels (rounded to the nearest half step).
    levels = np.round(c[F.PREFERENCE].to_numpy(dtype="float64") * 2.0) / 2.0
    dist = pd.DataFrame({k: F.column(c[k]) for k in GROUP_KEYS})
    dist["level"] = levels
    dist = dist[np.isfinite(levels)]
    counts = dist.groupby([*GROUP_KEYS, "level"], sort=True).size()
    dist_map: dict[tuple[str, ...], dict[str, int]] = {}
    for key, cnt in counts.items():
        *gk, level = key
        dist_map.setdefault(tuple(gk), {})[level_key(float(level))] = int(cnt)
    g["preference_distribution"] = [
        dist_map.get(tuple(r), {}) for r in g[GROUP_KEYS].itertuples(index=False, name=None)
    ]
    return g[cols]


def _status_by_pair(df: pd.DataFrame) -> pd.DataFrame:
    return status_counts_frame(df[F.STATUS], {k: df[k] for k in GROUP_KEYS})


STATUS_ROW_COLUMNS = [*GROUP_KEYS, F.STATUS]
"""The columns ``preference_summary`` counts statuses by."""


def preference_summary(
    judgments: pd.DataFrame,
    *,
    ci: float = 0.95,
    combined: pd.DataFrame | None = None,
    status_rows: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per system pair x aspect x judge: combined-outcome counts, rates, win rate CI, status counts.

    Status counts (``n_total`` ... ``n_pending``) are judgment rows (orders and samples), the
    outcome counts are combined keys.  Pairs with no usable outcome keep ``n = 0``.
    ``combined`` (``combine_orders`` output of the same frame) skips recombining the orders; ``status_rows``
    (``pairwise_rows(frame, STATUS_ROW_COLUMNS)`` of the same frame) the status counts' rows.
    """
    df = F.validate_judgments(judgments)
    rows = pairwise_rows(df, STATUS_ROW_COLUMNS) if status_rows is None else status_rows
    if rows.empty:
        return pd.DataFrame(columns=PREFERENCE_COLUMNS)
    status = _status_by_pair(rows)
    comb = combine_orders(df, validated=True) if combined is None else combined
    summary = summarise_combined(comb, ci=ci)
    out = status.merge(summary, on=GROUP_KEYS, how="left")
    for col in ("n", "wins", "ties", "ties_real", "ties_inconsistent", "losses", "n_single_order"):
        out[col] = out[col].fillna(0).astype("int64")
    out["preference_distribution"] = [d if isinstance(d, dict) else {} for d in out["preference_distribution"]]
    return out[PREFERENCE_COLUMNS]


_SWAP = (
    ("wins", "losses"),
    ("win_rate_pct", "loss_rate_pct"),
    ("n_x_better", "n_y_better"),
)


def orient_pair(entry: Mapping[str, Any], system: str) -> dict[str, Any]:
    """Return ``entry`` (a preference-summary record) seen from ``system``'s side (``system_a``).

    Swaps system_a/system_b, wins/losses and their rates, maps ``win_rate`` to ``1 - win_rate`` and
    its CI to ``(1 - high, 1 - low)``, negates ``mean_preference`` and the distribution levels.
    Raises ``ValueError`` when ``system`` is not in the pair.
    """
    out = dict(entry)
    if out.get(F.SYSTEM_A) == system:
        return out
    if out.get(F.SYSTEM_B) != system:
        raise ValueError(f"{system!r} is not one of the pair {out.get(F.SYSTEM_A)!r} / {out.get(F.SYSTEM_B)!r}")
    out[F.SYSTEM_A], out[F.SYSTEM_B] = entry.get(F.SYSTEM_B), entry.get(F.SYSTEM_A)
    for a, b in _SWAP:
        if a in entry or b in entry:
            out[a], out[b] = entry.get(b), entry.get(a)
    wr = entry.get("win_rate")
    out["win_rate"] = None if wr is None or pd.isna(wr) else 1.0 - float(wr)
    lo, hi = entry.get("win_rate_ci_low"), entry.get("win_rate_ci_high")
    out["win_rate_ci_low"] = None if hi is None or pd.isna(hi) else 1.0 - float(hi)
    out["win_rate_ci_high"] = None if lo is None or pd.isna(lo) else 1.0 - float(lo)
    mp = entry.get("mean_preference")
    if mp is not None and not pd.isna(mp):
        out["mean_preference"] = -float(mp)
    dist = entry.get("preference_distribution")
    if isinstance(dist, Mapping):
        flipped = {level_key(-float(k)): v for k, v in dist.items()}
        out["preference_distribution"] = dict(sorted(flipped.items(), key=lambda kv: float(kv[0])))
    return out


def orient_combined(combined: pd.DataFrame, system: str) -> pd.DataFrame:
    """Combined rows involving ``system``, flipped so that ``system`` is ``system_a``."""
    sub = combined[(combined[F.SYSTEM_A] == system) | (combined[F.SYSTEM_B] == system)].copy()
    flip = (sub[F.SYSTEM_B] == system).to_numpy()
    if not flip.any():
        return sub
    a = sub[F.SYSTEM_A].to_numpy(dtype=object).copy()
    b = sub[F.SYSTEM_B].to_numpy(dtype=object).copy()
    sub[F.SYSTEM_A] = np.where(flip, b, a)
    sub[F.SYSTEM_B] = np.where(flip, a, b)
    swap_out = {F.WIN: F.LOSS, F.LOSS: F.WIN, F.TIE: F.TIE}
    sub[F.OUTCOME] = sub[F.OUTCOME].where(~flip, sub[F.OUTCOME].map(swap_out))
    # "ab" meant the old system_a was shown first: after the swap that is the "ba" order.
    old_ab, old_ba = sub["outcome_ab"].map(swap_out), sub["outcome_ba"].map(swap_out)
    sub["outcome_ab"] = sub["outcome_ab"].where(~flip, old_ba)
    sub["outcome_ba"] = sub["outcome_ba"].where(~flip, old_ab)
    sub[F.PREFERENCE] = np.where(flip, -sub[F.PREFERENCE], sub[F.PREFERENCE])
    la = sub[F.LEN_A].to_numpy().copy()
    lb = sub[F.LEN_B].to_numpy().copy()
    sub[F.LEN_A] = np.where(flip, lb, la)
    sub[F.LEN_B] = np.where(flip, la, lb)
    return sub
