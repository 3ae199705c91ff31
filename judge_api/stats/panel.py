"""Judge panels ("juries", Verga et al. 2024): several judges' verdicts aggregated into one pseudo-judge, how much
the judges agree with each other, and what each judge set costs against how well it agrees with humans.

Conventions
-----------
* Members: the judges named in the panel config, else every judge of the run except the pseudo-judges
  (``reference``, ``panel``). A panel needs two members; with fewer there is no panel.
* Single mode: per (item, system, aspect) the members' item scores (self-consistency samples averaged first, as
  ``scores.item_scores``) are aggregated with the ``mean`` or the ``median`` over the members that scored it. When
  the members' rubric scales differ, each score is first mapped to [0, 1] (linear min-max on its own scale) and the
  panel's scale is 0..1.
* Pairwise: each member's outcome per (item, system pair, aspect) is its order-combined outcome
  (``preferences.combine_orders``: FastChat's rule); the panel's outcome is the majority of the members' outcomes
  (win = +1, tie = 0, loss = -1; the sign of the sum, so an even split among all the members is a tie).
* Quorum: a unit ((item, system, aspect) or (item, pair, aspect)) has a panel verdict only when at least
  ``quorum`` members gave it a verdict (a score; an order-combined outcome); default: a majority of the members
  (``n // 2 + 1``: 2 of 2, 2 of 3, 3 of 4). A unit judged by fewer (the others failed, were unparseable or are
  still pending) is not a panel verdict, not the verdict of the members that answered. Pairwise, an even split
  (as many wins as losses) while a member is missing is not a verdict either: the missing member would have decided
  it, so it is counted as ``split``, never silently a tie. ``coverage`` says per mode and aspect how many of the
  units the members were asked to judge have a panel verdict; scores, paired tests and the ranking of the panel use
  those units only.
* The panel's rows are synthetic judgments (judge ``panel``, status ``done``, order ``ab``, cost 0) appended to the
  judgments frame, so every section of the report (scores with CIs, paired comparisons, the paper table,
  preferences, ranking, agreement with humans) shows the panel beside its members. Its cost is the members' cost.
* Inter-judge agreement, per aspect over the members: Krippendorff's alpha (interval on [0, 1] scores, ordinal on
  the ``n_bins``-point bins, nominal on pairwise outcomes), units (item, system) / (item, pair); and per judge pair
  Spearman and quadratic-weighted kappa of the item scores (on the bins), Cohen's kappa and raw agreement of the
  pairwise outcomes, on the units both judged.
* Judge sets (only with human ratings): every set of at least one member (at most ``MAX_SET_MEMBERS`` members, so
  at most 63 sets) aggregated like the panel, with its agreement with humans (Spearman / QWK of scores, S1 / kappa
  of preferences) and its cost, cheapest first: the cheapest set that agrees well enough is the one to use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import (
    cohen_kappa,
    correlations,
    preference_agreement,
    quadratic_weighted_kappa,
    score_agreement,
    to_bins,
    to_unit,
)
from judge_api.stats.grouped import aggregated
from judge_api.stats.krippendorff import krippendorff_alpha_long
from judge_api.stats.preferences import combine_orders
from judge_api.stats.scores import item_scores

PANEL_JUDGE = "panel"
SINGLE_UNIT = [F.ITEM_ID, F.SYSTEM_A, F.ASPECT]
PAIR_UNIT = [F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT]
REFERENCE_JUDGE = F.REFERENCE_JUDGE
PSEUDO_JUDGES = (PANEL_JUDGE, REFERENCE_JUDGE)
Aggregate = Literal["mean", "median"]
AGGREGATES: tuple[Aggregate, ...] = ("mean", "median")
MAX_SET_MEMBERS = 6


def majority(n_members: int) -> int:
    """The default quorum: a majority of the members."""
    return n_members // 2 + 1


def resolve_quorum(members: Sequence[str], quorum: int | None) -> int:
    """The quorum in force: ``quorum`` when set (at least 1), else a majority of ``members``."""
    if quorum is None:
        return majority(len(members))
    if quorum < 1:
        raise ValueError(f"panel quorum {quorum} is below 1")
    return int(quorum)


def real_judges(judgments: pd.DataFrame) -> list[str]:
    """The judges of a frame that are not pseudo-judges, sorted."""
    return [j for j in F.distinct(judgments[F.JUDGE]) if j not in PSEUDO_JUDGES]


def panel_members(judgments: pd.DataFrame, judges: Sequence[str] | None = None) -> list[str]:
    """The panel's members: ``judges`` (those present in the frame) or every real judge of the frame."""
    present = real_judges(judgments)
    if judges is None:
        return present
    return [j for j in dict.fromkeys(judges) if j in present]


def _single_panel(
    items: pd.DataFrame, members: Sequence[str], aggregate: Aggregate, name: str, quorum: int
) -> pd.DataFrame:
    sub = items[items[F.JUDGE].isin(list(members))]
    if sub.empty:
        return pd.DataFrame()
    lo, hi = sub[F.SCALE_MIN].to_numpy("float64"), sub[F.SCALE_MAX].to_numpy("float64")
    # one finite scale for every score (a Python set of (lo, hi) tuples per item score before: issue 39)
    same_scale = bool(np.isfinite(lo).all() and np.isfinite(hi).all() and (lo == lo[0]).all() and (hi == hi[0]).all())
    values = sub[F.SCORE].to_numpy("float64") if same_scale else to_unit(sub[F.SCORE], lo, hi)
    frame = pd.DataFrame(
        {
            F.ITEM_ID: F.column(sub[F.ITEM_ID]),
            F.SYSTEM_A: F.column(sub["system"]),
            F.ASPECT: F.column(sub[F.ASPECT]),
            F.SCORE: values,
            F.LEN_A: sub["length"].to_numpy("float64"),
        }
    )
    spec = {"score": (F.SCORE, aggregate), "len_a": (F.LEN_A, "mean"), "n_members": (F.SCORE, "size")}
    out = aggregated(frame, [F.ITEM_ID, F.SYSTEM_A, F.ASPECT], spec)
    out = out[out["n_members"].to_numpy() >= quorum].reset_index(drop=True)
    out[F.MODE] = F.SINGLE
    out[F.SCALE_MIN] = float(lo[0]) if same_scale else 0.0
    out[F.SCALE_MAX] = float(hi[0]) if same_scale else 1.0
    out[F.JUDGE] = name
    return out


def pairwise_votes(combined: pd.DataFrame, members: Sequence[str]) -> pd.DataFrame:
    """Per (item, pair, aspect): the sum of the members' outcome codes, their wins, losses and number, mean lengths."""
    sub = combined[combined[F.JUDGE].isin(list(members))]
    if sub.empty:
        return pd.DataFrame()
    frame = pd.DataFrame(
        {
            F.ITEM_ID: F.column(sub[F.ITEM_ID]),
            F.SYSTEM_A: F.column(sub[F.SYSTEM_A]),
            F.SYSTEM_B: F.column(sub[F.SYSTEM_B]),
            F.ASPECT: F.column(sub[F.ASPECT]),
            "code": F.outcome_codes(sub[F.OUTCOME]),
            F.LEN_A: sub[F.LEN_A].to_numpy("float64"),
            F.LEN_B: sub[F.LEN_B].to_numpy("float64"),
        }
    )
    frame["wins"] = frame["code"] > 0
    frame["losses"] = frame["code"] < 0
    spec = {
        "code": ("code", "sum"),
        "wins": ("wins", "sum"),
        "losses": ("losses", "sum"),
        "len_a": (F.LEN_A, "mean"),
        "len_b": (F.LEN_B, "mean"),
        "n_members": ("code", "size"),
    }
    return aggregated(frame, PAIR_UNIT, spec)


def _split(votes: pd.DataFrame, n_members: int) -> np.ndarray:
    """An even split of wins and losses while a member is missing: the missing member would have decided it."""
    return ((votes["wins"] == votes["losses"]) & (votes["wins"] > 0) & (votes["n_members"] < n_members)).to_numpy()


def _pairwise_panel(
    combined: pd.DataFrame, members: Sequence[str], name: str, quorum: int, votes: pd.DataFrame | None = None
) -> pd.DataFrame:
    out = pairwise_votes(combined, members) if votes is None else votes
    if out.empty:
        return pd.DataFrame()
    keep = (out["n_members"].to_numpy() >= quorum) & ~_split(out, len(members))
    out = out[keep].reset_index(drop=True)
    if out.empty:
        return pd.DataFrame()
    sign = np.sign(out["code"].to_numpy("float64")).astype(np.int64)
    out[F.OUTCOME] = np.array([F.LOSS, F.TIE, F.WIN], dtype=object)[sign + 1]
    out[F.PREFERENCE] = 2.0 * sign
    out[F.ORDER] = F.ORDER_AB
    out[F.MODE] = F.PAIRWISE
    out[F.JUDGE] = name
    return out.drop(columns=["code", "wins", "losses"])


def panel_rows(
    judgments: pd.DataFrame,
    members: Sequence[str],
    aggregate: Aggregate = "mean",
    *,
    quorum: int | None = None,
    name: str = PANEL_JUDGE,
    items: pd.DataFrame | None = None,
    combined: pd.DataFrame | None = None,
    encoded: bool = False,
    votes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The panel's synthetic judgments, one per unit with a quorum (a validated judgments frame; empty when no unit
    has one). ``quorum``: the members a unit needs (default: a majority of ``members``). ``encoded``: the key
    columns stay categorical when ``items`` / ``combined`` have them so (``report.build_report``'s frames).
    ``votes``: ``pairwise_votes(combined, members)`` when the caller has them (the report's coverage made them)."""
    if aggregate not in AGGREGATES:
        raise ValueError(f"panel aggregate {aggregate!r} is not one of {list(AGGREGATES)}")
    needed = resolve_quorum(members, quorum)
    df = F.validate_judgments(judgments)
    items = item_scores(df, validated=True) if items is None else items
    combined = combine_orders(df, validated=True) if combined is None else combined
    parts = [
        p
        for p in (
            _single_panel(items, members, aggregate, name, needed),
            _pairwise_panel(combined, members, name, needed, votes),
        )
        if not p.empty
    ]
    if not parts:
        return F.empty_judgments()
    rows = pd.concat(parts, ignore_index=True).drop(columns=["n_members"])
    rows[F.STATUS] = F.DONE
    rows[F.RUBRIC_ID] = PANEL_JUDGE
    rows[F.CACHED] = True
    return F.validate_judgments(rows, encoded=encoded)


def with_panel(
    judgments: pd.DataFrame, members: Sequence[str], aggregate: Aggregate = "mean", quorum: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the frame with the panel's rows appended, the panel's rows); unchanged when fewer than two members."""
    df = F.validate_judgments(judgments)
    if len(members) < 2:
        return df, F.empty_judgments()
    rows = panel_rows(df, members, aggregate, quorum=quorum)
    if rows.empty:
        return df, rows
    rows = rows.assign(**{F.JUDGMENT_ID: -np.arange(1, len(rows) + 1)})
    return F.validate_judgments(pd.concat([df, rows], ignore_index=True)), rows


def _member_counts(items: pd.DataFrame, members: Sequence[str]) -> pd.DataFrame:
    sub = items[items[F.JUDGE].isin(list(members))]
    frame = pd.DataFrame(
        {F.ITEM_ID: F.column(sub[F.ITEM_ID]), F.SYSTEM_A: F.column(sub["system"]), F.ASPECT: F.column(sub[F.ASPECT])}
    )
    return aggregated(frame, SINGLE_UNIT, {"n_members": (F.ITEM_ID, "size")}, sort=False)


def _coverage_rows(asked: pd.DataFrame, judged: pd.DataFrame, keys: list[str], mode: str) -> list[dict[str, Any]]:
    """``asked``: the units (``keys``); ``judged``: per unit ``n_members``, ``verdict`` and ``split``."""
    if asked.empty:
        return []
    merged = asked.merge(judged, on=keys, how="left")
    verdict = merged["verdict"].fillna(False).to_numpy(bool)
    split = merged["split"].fillna(False).to_numpy(bool)
    merged = merged.assign(verdict=verdict, split=split, below=~verdict & ~split)
    out = []
    for aspect, grp in merged.groupby(F.ASPECT, sort=True):
        n_units, n_verdicts = len(grp), int(grp["verdict"].sum())
        out.append(
            {
                F.MODE: mode,
                F.ASPECT: aspect,
                "n_units": n_units,
                "n_verdicts": n_verdicts,
                "n_below_quorum": int(grp["below"].sum()),
                "n_split": int(grp["split"].sum()),
                "coverage": n_verdicts / n_units,
            }
        )
    return out


def _coverage_rows_by_code(
    columns: list[pd.Series], rows: np.ndarray, judged: pd.DataFrame, keys: list[str], mode: str
) -> list[dict[str, Any]] | None:
    """``_coverage_rows`` of the distinct units of ``columns`` (the unit's key columns) at ``rows``, found on the
    categoricals' codes (issue 39: the drop of duplicates and the merge were 1.7 s of a 10M-row report): each unit
    one int64 (each column's code + 1, 0 for missing, the aspect the leading digit), a judged unit matched by its
    values. None (the caller merges) unless every key column on both sides is a categorical and the codes fit."""
    if not all(isinstance(c.dtype, pd.CategoricalDtype) for c in (*columns, *(judged[k] for k in keys))):
        return None
    order = [keys.index(F.ASPECT), *(i for i, k in enumerate(keys) if k != F.ASPECT)]  # the aspect leads
    categories = [columns[i].cat.categories for i in order]
    radix = [len(c) + 1 for c in categories]
    if math.prod(radix) >= 2**62:
        return None

    def unit_key(values: list[pd.Series], where: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        key = np.zeros(len(values[0]) if where is None else int(where.sum()), dtype=np.int64)
        known = np.ones(len(key), dtype=bool)  # every value among the asked units' categories
        for series, own, r in zip(values, categories, radix, strict=True):
            codes = series.cat.codes.to_numpy()
            if where is not None:
                codes = codes[where]
            codes = codes.astype(np.int64)
            if not series.cat.categories.equals(own):
                positions = np.append(own.get_indexer(series.cat.categories), -2)  # a missing value: -2, kept apart
                codes = positions[codes]
                known &= codes != -1
                codes = np.where(codes == -2, -1, codes)
            key *= r
            key += codes + 1
        return key, known

    units = pd.unique(unit_key([columns[i] for i in order], rows)[0])
    judged_key, known = unit_key([judged[keys[i]] for i in order], None)
    verdict = pd.Series(units).isin(judged_key[known & judged["verdict"].to_numpy(bool)]).to_numpy()
    split = pd.Series(units).isin(judged_key[known & judged["split"].to_numpy(bool)]).to_numpy()
    aspect = units // math.prod(radix[1:])  # 0: a unit without an aspect, in no aspect's row (as grouped)
    out = []
    for code in np.unique(aspect[aspect > 0]):
        mine = aspect == code
        n_units, n_verdicts = int(mine.sum()), int((mine & verdict).sum())
        out.append(
            {
                F.MODE: mode,
                F.ASPECT: categories[0][int(code) - 1],
                "n_units": n_units,
                "n_verdicts": n_verdicts,
                "n_below_quorum": int((mine & ~verdict & ~split).sum()),
                "n_split": int((mine & split).sum()),
                "coverage": n_verdicts / n_units,
            }
        )
    return out


def panel_coverage(
    judgments: pd.DataFrame,
    members: Sequence[str],
    quorum: int | None = None,
    *,
    items: pd.DataFrame | None = None,
    combined: pd.DataFrame | None = None,
    votes: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """How many of the units the members were asked to judge (any status) have a panel verdict, per mode and aspect
    and overall; the rest are below the quorum or (pairwise) an even split with a member missing. ``votes``:
    ``pairwise_votes(combined, members)`` when the caller has them."""
    needed = resolve_quorum(members, quorum)
    df = F.validate_judgments(judgments)
    items = item_scores(df, validated=True) if items is None else items
    combined = combine_orders(df, validated=True) if combined is None else combined
    asked = df[F.JUDGE].isin(list(members)).to_numpy()  # the members' rows: only the unit columns are taken
    single = _member_counts(items, members)
    single = single.assign(verdict=single["n_members"] >= needed, split=False)
    votes = pairwise_votes(combined, members) if votes is None else votes
    if not votes.empty:
        split = _split(votes, len(members)) & (votes["n_members"].to_numpy() >= needed)
        votes = votes.assign(verdict=(votes["n_members"].to_numpy() >= needed) & ~split, split=split)
    else:
        votes = pd.DataFrame({**{k: pd.Series(dtype="object") for k in PAIR_UNIT}, "verdict": [], "split": []})
    by_aspect = []
    for mode, keys, judged in ((F.SINGLE, SINGLE_UNIT, single), (F.PAIRWISE, PAIR_UNIT, votes)):
        rows = asked & (df[F.MODE] == mode).to_numpy()
        coded = _coverage_rows_by_code([df[k] for k in keys], rows, judged, keys, mode)
        if coded is None:
            coded = _coverage_rows(
                df.loc[rows, keys].drop_duplicates(), judged[[*keys, "verdict", "split"]], keys, mode
            )
        by_aspect += coded
    n_units = sum(r["n_units"] for r in by_aspect)
    n_verdicts = sum(r["n_verdicts"] for r in by_aspect)
    return {
        "quorum": needed,
        "quorum_rule": "majority" if quorum is None else "configured",
        "n_members": len(members),
        "n_units": n_units,
        "n_verdicts": n_verdicts,
        "n_below_quorum": sum(r["n_below_quorum"] for r in by_aspect),
        "n_split": sum(r["n_split"] for r in by_aspect),
        "coverage": n_verdicts / n_units if n_units else None,
        "by_aspect": by_aspect,
    }


# --- agreement between judges ------------------------------------------------------------------------------------
def unit_keys(*columns: pd.Series) -> np.ndarray:
    """One int64 per row naming the tuple of its keys: equal tuples give equal keys, and the keys sort as the tuples
    do (each column's codes sort as its strings). The inter-judge units, (item, system) and (item, system a,
    system b), were strings joined with ``"\x1f"`` that had to be built and hashed for every item score (issue 39);
    those sort the same wherever the ids hold no control character below ``"\x1f"``, and factorise in the same
    order of first appearance, so every figure is the same."""
    key = np.zeros(len(columns[0]) if columns else 0, dtype=np.int64)
    for col in columns:
        codes, values = F.sorted_codes(col)
        key = key * max(len(values), 1) + codes
    return key


def _score_units(items: pd.DataFrame, members: Sequence[str], n_bins: int) -> pd.DataFrame:
    sub = items[items[F.JUDGE].isin(list(members))]
    unit = to_unit(sub[F.SCORE], sub[F.SCALE_MIN], sub[F.SCALE_MAX])
    return pd.DataFrame(
        {
            F.ASPECT: F.column(sub[F.ASPECT]),
            F.JUDGE: F.column(sub[F.JUDGE]),
            "unit_key": unit_keys(sub[F.ITEM_ID], sub["system"]),
            "unit": unit,
            "bin": to_bins(unit, 0.0, 1.0, n_bins),
        }
    )


def _outcome_units(combined: pd.DataFrame, members: Sequence[str]) -> pd.DataFrame:
    sub = combined[combined[F.JUDGE].isin(list(members))]
    return pd.DataFrame(
        {
            F.ASPECT: F.column(sub[F.ASPECT]),
            F.JUDGE: F.column(sub[F.JUDGE]),
            "unit_key": unit_keys(sub[F.ITEM_ID], sub[F.SYSTEM_A], sub[F.SYSTEM_B]),
            "code": F.outcome_codes(sub[F.OUTCOME]),
        }
    )


def _both(grp: pd.DataFrame, a: str, b: str, value: str) -> tuple[np.ndarray, np.ndarray]:
    """The values of judges ``a`` and ``b`` on the units both gave a finite one, in the order of the units' keys:
    what ``pivot_table(index="unit_key", columns=judge, aggfunc="first")[[a, b]].dropna()`` gave (each judge has one
    row per unit), on integer keys instead of a pivoted frame (issue 39)."""
    keys = grp["unit_key"].to_numpy("int64")
    values = grp[value].to_numpy("float64")
    sides = []
    for name in (a, b):
        mine = F.is_value(grp[F.JUDGE], name) & np.isfinite(values)
        sides.append((keys[mine], values[mine]))
    (ka, va), (kb, vb) = sides
    if ka.size and kb.size and min(int(ka.min()), int(kb.min())) >= 0:
        bound = max(int(ka.max()), int(kb.max())) + 1
        if bound <= max(4 * (ka.size + kb.size), 1 << 20):
            # where each key is on each side, marked in an array over the keys: the common keys come out sorted, as
            # intersect1d sorts them, without sorting both sides' keys (issue 39: 1 s of a 10M-row report)
            place_a = np.full(bound, -1, dtype=np.int64)
            place_a[ka] = np.arange(ka.size)
            place_b = np.full(bound, -1, dtype=np.int64)
            place_b[kb] = np.arange(kb.size)
            common = np.flatnonzero((place_a >= 0) & (place_b >= 0))
            return va[place_a[common]], vb[place_b[common]]
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    return va[ia], vb[ib]


def _pair_scores(grp: pd.DataFrame, a: str, b: str, n_bins: int) -> dict[str, Any]:
    x, y = _both(grp, a, b, "unit")
    corr = correlations(x, y, kendall=False) if x.size else {"n": 0, "spearman": None}
    qwk = (
        quadratic_weighted_kappa(to_bins(x, 0.0, 1.0, n_bins), to_bins(y, 0.0, 1.0, n_bins), n_bins) if x.size else None
    )
    diff = np.abs(x - y)
    return {
        "n": int(x.size),
        "spearman": corr["spearman"],
        "pearson": corr.get("pearson"),
        "qwk": qwk,
        "mean_abs_diff_unit": float(diff.mean()) if diff.size else None,
    }


def _pair_outcomes(grp: pd.DataFrame, a: str, b: str) -> dict[str, Any]:
    xa, yb = _both(grp, a, b, "code")
    x = xa.astype("int64") + 1
    y = yb.astype("int64") + 1
    confusion = np.bincount(x * 3 + y, minlength=9).reshape(3, 3)
    return {
        "n": int(x.size),
        "agreement": float(np.trace(confusion) / confusion.sum()) if confusion.sum() else None,
        "kappa": cohen_kappa(confusion) if confusion.sum() else None,
    }


def inter_judge_agreement(
    judgments: pd.DataFrame,
    members: Sequence[str],
    *,
    n_bins: int = 5,
    items: pd.DataFrame | None = None,
    combined: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Agreement among the members, per aspect: alpha across all of them and every judge pair (module docstring)."""
    df = F.validate_judgments(judgments)
    items = item_scores(df, validated=True) if items is None else items
    combined = combine_orders(df, validated=True) if combined is None else combined
    scores = _score_units(items, members, n_bins)
    outcomes = _outcome_units(combined, members)
    out: dict[str, Any] = {"judges": list(members), "scores": [], "preferences": []}
    for aspect, grp in scores.groupby(F.ASPECT, sort=True):
        out["scores"].append(
            {
                F.ASPECT: aspect,
                "n_units": int(grp["unit_key"].nunique()),
                "n_judges": int(grp[F.JUDGE].nunique()),
                "alpha_interval": krippendorff_alpha_long(grp["unit_key"], grp["unit"], "interval"),
                "alpha_ordinal": krippendorff_alpha_long(grp["unit_key"], grp["bin"], "ordinal"),
                "pairs": [
                    {"judge_a": a, "judge_b": b, **_pair_scores(grp, a, b, n_bins)}
                    for a, b in combinations(sorted(grp[F.JUDGE].unique()), 2)
                ],
            }
        )
    for aspect, grp in outcomes.groupby(F.ASPECT, sort=True):
        out["preferences"].append(
            {
                F.ASPECT: aspect,
                "n_units": int(grp["unit_key"].nunique()),
                "n_judges": int(grp[F.JUDGE].nunique()),
                "alpha_nominal": krippendorff_alpha_long(grp["unit_key"], grp["code"], "nominal"),
                "pairs": [
                    {"judge_a": a, "judge_b": b, **_pair_outcomes(grp, a, b)}
                    for a, b in combinations(sorted(grp[F.JUDGE].unique()), 2)
                ],
            }
        )
    return out


# --- judges and judge sets against humans, with cost ------------------------------------------------------------
def _judge_costs(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    finished = df[df[F.STATUS].isin(F.FINISHED_STATUSES)]
    g = finished.groupby(F.JUDGE, sort=True)
    return {str(j): {"cost_usd": float(grp[F.COST_USD].sum()), "n_judgments": len(grp)} for j, grp in g}


def _human_rows(
    frame: pd.DataFrame,
    ratings: pd.DataFrame,
    human_prefix: str | None,
    n_bins: int,
    items: pd.DataFrame | None = None,
    combined: pd.DataFrame | None = None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """(judge, aspect) -> agreement figures with the humans, scores and preferences merged; ``items`` / ``combined``:
    the frame's own ``item_scores`` / ``combine_orders`` when the caller has them."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    scores = score_agreement(frame, ratings, n_bins=n_bins, human_prefix=human_prefix, items=items)
    for r in scores.to_dict(orient="records"):
        out.setdefault((r[F.JUDGE], r[F.ASPECT]), {}).update(
            n_scores=r["n"], spearman=r["spearman"], kendall=r["kendall"], qwk=r["qwk"]
        )
    prefs = preference_agreement(frame, ratings, human_prefix=human_prefix, combined=combined)
    for r in prefs["judge_vs_human"]:
        out.setdefault((r[F.JUDGE], r[F.ASPECT]), {}).update(
            n_votes=r["s1"]["total"], s1=r["s1"]["rate"], s2=r["s2"]["rate"], kappa=r["kappa_s1"]
        )
    return out


def judges_vs_humans(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame,
    members: Sequence[str],
    aggregate: Aggregate = "mean",
    *,
    quorum: int | None = None,
    human_prefix: str | None = None,
    n_bins: int = 5,
    with_panel_rows: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None,
) -> dict[str, Any]:
    """Each judge's, the panel's and every judge set's agreement with humans beside its cost (module docstring).

    A judge set of all the members uses ``quorum``; a smaller set, a majority of its own members.

    ``judgments`` is the stored frame (no panel rows). ``matrix``: one row per judge (members, the panel, and the
    ``reference`` metrics when present) and aspect. ``sets``: one row per judge set and aspect, cheapest first.
    ``with_panel_rows``: the stored frame with this panel's rows (``members``, ``aggregate``, ``quorum``) appended,
    and its ``item_scores`` and ``combine_orders``, when the caller has them (``report.build_report``; issue 39:
    computed again here they were 0.7 s at 1M rows); only for a stored frame without a judge named like the panel.
    """
    df = F.validate_judgments(judgments)
    df = df[df[F.JUDGE] != PANEL_JUDGE]
    costs = _judge_costs(df)
    if with_panel_rows is not None:
        frame, frame_items, frame_combined = with_panel_rows
    else:
        frame, _ = with_panel(df, members, aggregate, quorum)
        frame_items = frame_combined = None
    human = _human_rows(frame, ratings, human_prefix, n_bins, frame_items, frame_combined)
    panel_cost = sum(costs.get(j, {}).get("cost_usd", 0.0) for j in members)
    matrix = []
    for (judge, aspect), figures in sorted(human.items()):
        cost = panel_cost if judge == PANEL_JUDGE else costs.get(judge, {}).get("cost_usd", 0.0)
        matrix.append({F.JUDGE: judge, F.ASPECT: aspect, "cost_usd": cost, **figures})
    sets: list[dict[str, Any]] = []
    pool = list(members)[:MAX_SET_MEMBERS]
    if len(pool) >= 1:
        # the panel's rows are the panel judge's: a set of members takes only its members' item scores and outcomes
        items = item_scores(df, validated=True) if frame_items is None else frame_items
        combined = combine_orders(df, validated=True) if frame_combined is None else frame_combined
        for size in range(1, len(pool) + 1):
            for subset in combinations(pool, size):
                if size == 1:
                    # one judge's figures on its own rows are its figures among all of them (each is computed per
                    # judge): taken from the matrix instead of a copy of its rows computed again (issue 39)
                    name = subset[0]
                    figures_by_aspect = {key: figures for key, figures in human.items() if key[0] == name}
                else:
                    name = PANEL_JUDGE
                    set_quorum = quorum if set(subset) == set(members) else None
                    sub_frame = panel_rows(df, subset, aggregate, quorum=set_quorum, items=items, combined=combined)
                    figures_by_aspect = _human_rows(sub_frame, ratings, human_prefix, n_bins)
                cost = sum(costs.get(j, {}).get("cost_usd", 0.0) for j in subset)
                for (judge, aspect), figures in sorted(figures_by_aspect.items()):
                    if judge == name:
                        sets.append({"judges": list(subset), F.ASPECT: aspect, "cost_usd": cost, **figures})
    sets.sort(key=lambda r: (r[F.ASPECT], r["cost_usd"], len(r["judges"]), r["judges"]))
    return {
        "members": list(members),
        "aggregate": aggregate,
        "quorum": resolve_quorum(members, quorum),
        "panel_cost_usd": panel_cost,
        "matrix": matrix,
        "sets": sets,
    }
