"""The report's ``calibrated`` section: the judge's verdicts turned into estimates on the humans' scale (PPI++).

For each judge x aspect x system of the single-mode judgments, the items with human score ratings are the labeled
sample (``y``: the mean of the raters; ``yhat``: the judge's item score on the same items) and the judged items
without a rating are the unlabeled ones (``yhat_unlabeled``); ``stats.ppi.ppi_mean`` gives the calibrated mean, the
human-only mean from the same labels, and the labels the judge is worth. The judge's scores are first mapped onto
the humans' stated scale with the fixed linear map of the two scales, so that ``lam`` (clipped to [0, 1]) can use
the judge fully; nothing is fitted on the labeled items.

The same for paired differences between two systems (per item, labeled where both systems have a human rating),
for pairwise win rates (human preference votes on 0 / 1/2 / 1 against the judge's order-combined verdict), a ranking
on the calibrated estimates with the pairs whose calibrated difference interval excludes 0, and a table of the
judges ordered by effective labels per dollar.

A row with fewer than ``MIN_LABELS`` labeled items carries ``estimate: null`` and a note saying how many labels it
needs: never a guess. The interval is valid when the labeled items are a uniform random sample of the judged ones;
the section's notes say so, with how many labels came from a label queue.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import quadratic_weighted_kappa, to_bins
from judge_api.stats.panel import PANEL_JUDGE
from judge_api.stats.ppi import PPIEstimate, affine_to_scale, ppi_mean, ppi_mean_active

MIN_LABELS = 10
METHOD = "ppi++"
_SYSTEM = F.SYSTEM


def _round(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _human_means(ratings: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[float, float] | str]]:
    """Mean human score per (item, system, aspect), and each aspect's stated scale (or why it has none)."""
    r = ratings[(ratings[F.KIND] == F.KIND_SCORE) & ratings[F.VALUE].notna()]
    scales: dict[str, tuple[float, float] | str] = {}
    for aspect, group in r.groupby(F.ASPECT, sort=True):
        bounds = group[[F.SCALE_MIN, F.SCALE_MAX]].drop_duplicates()
        if bounds.isna().any().any():
            scales[str(aspect)] = "some human ratings carry no scale"
        elif len(bounds) > 1:
            scales[str(aspect)] = "the human ratings of this aspect use more than one scale"
        else:
            lo, hi = float(bounds.iloc[0, 0]), float(bounds.iloc[0, 1])
            scales[str(aspect)] = (lo, hi) if hi > lo else "the human scale is empty"
    means = r.groupby([F.ITEM_ID, F.SYSTEM, F.ASPECT], sort=False)[F.VALUE].mean().rename("human").reset_index()
    return means, scales


def _needs_labels(n: int) -> str:
    return f"{n} labeled item(s); a calibrated estimate needs at least {MIN_LABELS} ({MIN_LABELS - n} more)"


def _interval(est: PPIEstimate | None) -> dict[str, Any]:
    if est is None:
        return {"estimate": None, "ci_low": None, "ci_high": None}
    c = est.calibrated
    return {"estimate": c.estimate, "ci_low": c.ci_low, "ci_high": c.ci_high}


def _human_only(est: PPIEstimate | None) -> dict[str, Any] | None:
    if est is None:
        return None
    h = est.human_only
    return {"estimate": h.estimate, "ci_low": h.ci_low, "ci_high": h.ci_high}


@dataclass(frozen=True)
class Design:
    """How the labels were drawn: a label queue's strategy, drawn items and every eligible item's probability."""

    strategy: str
    drawn: frozenset[str]
    inclusion: Mapping[str, float]


def _estimate(
    y: np.ndarray,
    yhat: np.ndarray,
    unl: np.ndarray,
    ci: float,
    *,
    design: Design | None = None,
    labeled_ids: np.ndarray | None = None,
    unlabeled_ids: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
) -> tuple[PPIEstimate | None, str | None]:
    """The estimate (None below MIN_LABELS) and the note a null row carries.

    Without a design the labels are taken as a uniform sample (PPI++). With a label queue's design the population is
    the queue's eligible items and each label is weighted by its item's inclusion probability (``ppi_mean_active``):
    a uniform queue's labeled items are a simple random sample of it whatever part of the queue is labeled; an
    active queue's weights are valid only once every drawn item is labeled."""
    if design is None or labeled_ids is None or unlabeled_ids is None:
        if y.size < MIN_LABELS:
            return None, _needs_labels(int(y.size))
        return ppi_mean(y, yhat, unl, ci=ci, bounds=bounds), None
    if design.strategy == "active":  # a label the queue did not draw has no probability: its item counts unlabeled
        undrawn = np.array([i in design.inclusion and i not in design.drawn for i in labeled_ids], dtype=bool)
        unl, unlabeled_ids = np.r_[unl, yhat[undrawn]], np.r_[unlabeled_ids, labeled_ids[undrawn]]
        y, yhat, labeled_ids = y[~undrawn], yhat[~undrawn], labeled_ids[~undrawn]
    in_lab = np.array([i in design.inclusion for i in labeled_ids], dtype=bool)
    in_unl = np.array([i in design.inclusion for i in unlabeled_ids], dtype=bool)
    y, yhat, lab_ids = y[in_lab], yhat[in_lab], labeled_ids[in_lab]
    unl, unl_ids = unl[in_unl], unlabeled_ids[in_unl]
    n, big_n = int(y.size), int(y.size + unl.size)
    if n < MIN_LABELS:
        return None, _needs_labels(n)
    if design.strategy == "active":
        missing = sum(1 for i in unl_ids if i in design.drawn)
        if missing:
            return None, (
                f"{missing} item(s) drawn by the active label queue are not labeled yet: its inverse-probability "
                "weights need every drawn item"
            )
        inclusion = np.array([design.inclusion[i] for i in [*lab_ids, *unl_ids]], dtype="float64")
    else:
        inclusion = np.full(big_n, n / big_n)
    labeled = np.r_[np.ones(n, dtype=bool), np.zeros(big_n - n, dtype=bool)]
    values = np.r_[y, np.zeros(big_n - n)]
    return ppi_mean_active(values, np.r_[yhat, unl], labeled, inclusion, ci=ci, bounds=bounds), None


def _mapped_judge(items: pd.DataFrame, scales: dict[str, tuple[float, float] | str]) -> pd.DataFrame:
    """The judge's item scores with ``judge_h``: the score on the humans' scale (NaN where a scale is unknown)."""
    out = items[[F.ITEM_ID, _SYSTEM, F.ASPECT, F.JUDGE, F.SCORE, F.SCALE_MIN, F.SCALE_MAX]].copy()
    out["judge_h"] = np.nan
    for aspect, idx in out.groupby(F.ASPECT, sort=False).groups.items():
        target = scales.get(str(aspect))
        if not isinstance(target, tuple):
            continue
        part = out.loc[idx]
        for (lo, hi), sub in part.groupby([F.SCALE_MIN, F.SCALE_MAX], sort=False, dropna=True):
            if hi > lo:
                out.loc[sub.index, "judge_h"] = affine_to_scale(sub[F.SCORE].to_numpy(), (lo, hi), target)
    return out


def _score_rows(
    joined: pd.DataFrame, scales: dict[str, tuple[float, float] | str], ci: float, design: Design | None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (judge, aspect, system), g in joined.groupby([F.JUDGE, F.ASPECT, _SYSTEM], sort=True):
        scale = scales.get(str(aspect))
        if scale is None:
            continue
        row: dict[str, Any] = {"judge": judge, "aspect": aspect, "system": system}
        if not isinstance(scale, tuple):
            rows.append(
                {
                    **row,
                    "human_scale": None,
                    "n_labeled": 0,
                    "n_judged": len(g),
                    "lambda": None,
                    **_interval(None),
                    "human_only": None,
                    "effective_labels": None,
                    "note": scale,
                }
            )
            continue
        ok = g["judge_h"].notna()
        labeled = ok & g["human"].notna()
        if not ok.any():
            unknown = "the judge's scale is unknown, so its scores cannot be put on the humans' scale"
            rows.append(
                {
                    **row,
                    "human_scale": list(scale),
                    "n_labeled": int(labeled.sum()),
                    "n_judged": 0,
                    "lambda": None,
                    **_interval(None),
                    "human_only": None,
                    "effective_labels": None,
                    "note": unknown,
                }
            )
            continue
        y = g.loc[labeled, "human"].to_numpy(dtype="float64")
        est, note = _estimate(
            y,
            g.loc[labeled, "judge_h"].to_numpy(dtype="float64"),
            g.loc[ok & ~labeled, "judge_h"].to_numpy(dtype="float64"),
            ci,
            design=design,
            labeled_ids=g.loc[labeled, F.ITEM_ID].astype(str).to_numpy(),
            unlabeled_ids=g.loc[ok & ~labeled, F.ITEM_ID].astype(str).to_numpy(),
            bounds=scale,
        )
        rows.append(
            {
                **row,
                "human_scale": list(scale),
                "n_labeled": int(labeled.sum()),
                "n_judged": int(ok.sum()),
                "lambda": None if est is None else est.lam,
                **_interval(est),
                "human_only": _human_only(est),
                "effective_labels": None if est is None else _round(est.effective_labels),
                "note": note,
            }
        )
    return rows


def _difference_rows(joined: pd.DataFrame, ci: float, design: Design | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    usable = joined[joined["judge_h"].notna()]
    for (judge, aspect), g in usable.groupby([F.JUDGE, F.ASPECT], sort=True):
        judge_wide = g.pivot_table(index=F.ITEM_ID, columns=_SYSTEM, values="judge_h", aggfunc="first")
        human_wide = g.pivot_table(index=F.ITEM_ID, columns=_SYSTEM, values="human", aggfunc="first")
        for a, b in itertools.combinations(sorted(judge_wide.columns), 2):
            both_judged = judge_wide[[a, b]].dropna()
            if both_judged.empty:
                continue
            d_hat = (both_judged[a] - both_judged[b]).to_numpy(dtype="float64")
            if {a, b} <= set(human_wide.columns):
                h = human_wide.reindex(both_judged.index)[[a, b]]
                has = h.notna().all(axis=1).to_numpy()
                d_y = (h[a] - h[b]).to_numpy(dtype="float64")[has]
            else:
                has = np.zeros(len(both_judged), dtype=bool)
                d_y = np.array([], dtype="float64")
            ids = both_judged.index.astype(str).to_numpy()
            width = float(g["human_scale_hi"].iloc[0]) - float(g["human_scale_lo"].iloc[0])
            est, note = _estimate(
                d_y,
                d_hat[has],
                d_hat[~has],
                ci,
                design=design,
                labeled_ids=ids[has],
                unlabeled_ids=ids[~has],
                bounds=(-width, width) if np.isfinite(width) else None,
            )
            rows.append(
                {
                    "judge": judge,
                    "aspect": aspect,
                    "system_a": a,
                    "system_b": b,
                    **_interval(est),
                    "n_labeled": int(has.sum()),
                    "n_judged": len(d_hat),
                    "human_only": _human_only(est),
                    "note": note,
                }
            )
    return rows


def _human_preferences(ratings: pd.DataFrame) -> pd.DataFrame:
    """Mean human vote per (item, aspect, sorted pair) as the first system's win share (0, 1/2, 1)."""
    r = ratings[(ratings[F.KIND] == F.KIND_PREFERENCE) & ratings[F.VALUE].notna() & ratings[F.SYSTEM_B].notna()]
    if r.empty:
        return pd.DataFrame(columns=[F.ITEM_ID, F.ASPECT, "first", "second", "human"])
    share = (r[F.VALUE].to_numpy(dtype="float64") + 1.0) / 2.0
    swap = (r[F.SYSTEM].astype(str) > r[F.SYSTEM_B].astype(str)).to_numpy()
    out = pd.DataFrame(
        {
            F.ITEM_ID: r[F.ITEM_ID].to_numpy(),
            F.ASPECT: r[F.ASPECT].to_numpy(),
            "first": np.where(swap, r[F.SYSTEM_B].astype(str), r[F.SYSTEM].astype(str)),
            "second": np.where(swap, r[F.SYSTEM].astype(str), r[F.SYSTEM_B].astype(str)),
            "human": np.where(swap, 1.0 - share, share),
        }
    )
    return out.groupby([F.ITEM_ID, F.ASPECT, "first", "second"], sort=False)["human"].mean().reset_index()


def _win_rate_rows(combined: pd.DataFrame, ratings: pd.DataFrame, ci: float) -> list[dict[str, Any]]:
    if combined.empty:
        return []
    humans = _human_preferences(ratings)
    if humans.empty:
        return []
    share = (F.outcome_codes(combined[F.OUTCOME]) + 1.0) / 2.0  # win 1, tie 0.5, loss 0 (exact), else NaN
    swap = (combined[F.SYSTEM_A].astype(str) > combined[F.SYSTEM_B].astype(str)).to_numpy()
    judged = pd.DataFrame(
        {
            F.ITEM_ID: combined[F.ITEM_ID].to_numpy(),
            F.ASPECT: combined[F.ASPECT].to_numpy(),
            F.JUDGE: combined[F.JUDGE].to_numpy(),
            "first": np.where(swap, combined[F.SYSTEM_B].astype(str), combined[F.SYSTEM_A].astype(str)),
            "second": np.where(swap, combined[F.SYSTEM_A].astype(str), combined[F.SYSTEM_B].astype(str)),
            "judge_share": np.where(swap, 1.0 - share, share),
        }
    ).dropna(subset=["judge_share"])
    keys = [F.ITEM_ID, F.ASPECT, "first", "second"]
    joined = judged.merge(humans, on=keys, how="left")
    rows: list[dict[str, Any]] = []
    for (judge, aspect, a, b), g in joined.groupby([F.JUDGE, F.ASPECT, "first", "second"], sort=True):
        labeled = g["human"].notna().to_numpy()
        yhat = g["judge_share"].to_numpy(dtype="float64")
        y = g["human"].to_numpy(dtype="float64")[labeled]
        est, note = _estimate(y, yhat[labeled], yhat[~labeled], ci, bounds=(0.0, 1.0))
        rows.append(
            {
                "judge": judge,
                "aspect": aspect,
                "system_a": a,
                "system_b": b,
                **_interval(est),
                "n_labeled": int(labeled.sum()),
                "n_judged": len(g),
                "human_only": _human_only(est),
                "note": note,
            }
        )
    return rows


def _ranking(scores: list[dict[str, Any]], differences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    separated: dict[tuple[Any, Any, Any], list[str]] = {}
    for d in differences:
        if d["estimate"] is None:
            continue
        key_a = (d["judge"], d["aspect"], d["system_a"])
        key_b = (d["judge"], d["aspect"], d["system_b"])
        if d["ci_low"] > 0:
            separated.setdefault(key_a, []).append(d["system_b"])
        elif d["ci_high"] < 0:
            separated.setdefault(key_b, []).append(d["system_a"])
    out: list[dict[str, Any]] = []
    ranked = [s for s in scores if s["estimate"] is not None]
    ranked.sort(key=lambda s: (s["judge"], s["aspect"], -s["estimate"], s["system"]))
    for (judge, aspect), group in itertools.groupby(ranked, key=lambda s: (s["judge"], s["aspect"])):
        for rank, s in enumerate(group, start=1):
            out.append(
                {
                    "judge": judge,
                    "aspect": aspect,
                    "system": s["system"],
                    "rank": rank,
                    "estimate": s["estimate"],
                    "better_than": sorted(separated.get((judge, aspect, s["system"]), [])),
                }
            )
    return out


def _judge_rows(
    joined: pd.DataFrame, judgments: pd.DataFrame, ci: float, panel_members: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Per judge x aspect, pooled over systems (the (item, system) pairs as units, labels taken as uniform). The
    panel's verdicts cost what its members' judgments of the aspect cost (its own rows carry no cost)."""
    rows: list[dict[str, Any]] = []
    usable = joined[joined["judge_h"].notna()]
    for (judge, aspect), g in usable.groupby([F.JUDGE, F.ASPECT], sort=True):
        labeled = g["human"].notna().to_numpy()
        jh = g["judge_h"].to_numpy(dtype="float64")
        y = g["human"].to_numpy(dtype="float64")[labeled]
        est, _ = _estimate(y, jh[labeled], jh[~labeled], ci)
        mine = judgments[(judgments[F.JUDGE] == judge) & (judgments[F.ASPECT] == aspect)]
        finished = mine[mine[F.STATUS].isin(F.FINISHED_STATUSES)]
        paid = finished
        if judge == PANEL_JUDGE and panel_members:
            paid = judgments[
                judgments[F.JUDGE].isin(list(panel_members))
                & (judgments[F.ASPECT] == aspect)
                & judgments[F.STATUS].isin(F.FINISHED_STATUSES)
            ]
        cost = float(paid[F.COST_USD].fillna(0.0).sum())
        usd_per_1k = 1000.0 * cost / len(finished) if len(finished) else None
        kappa = None
        if labeled.sum() >= 2 and pd.notna(g["human_scale_lo"].iloc[0]):
            lo, hi = float(g["human_scale_lo"].iloc[0]), float(g["human_scale_hi"].iloc[0])
            kappa = quadratic_weighted_kappa(to_bins(jh[labeled], lo, hi), to_bins(y, lo, hi), 5)
        effective = None if est is None else _round(est.effective_labels)
        rows.append(
            {
                "judge": judge,
                "aspect": aspect,
                "n_labeled": int(labeled.sum()),
                "kappa": _round(kappa),
                "bias": float(np.mean(jh[labeled] - y)) if labeled.any() else None,
                "effective_labels": effective,
                "usd_per_1k": usd_per_1k,
                "effective_labels_per_usd": (effective / cost) if effective is not None and cost > 0 else None,
            }
        )

    def order(row: dict[str, Any]) -> tuple[float, float, str]:
        per_usd = row["effective_labels_per_usd"]
        free = row["usd_per_1k"] == 0.0 and row["effective_labels"] is not None
        first = float("inf") if free else (per_usd if per_usd is not None else float("-inf"))
        return (-first, -(row["effective_labels"] or 0.0), str(row["judge"]))

    rows.sort(key=order)
    return rows


def calibrated_section(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None,
    *,
    items: pd.DataFrame,
    combined: pd.DataFrame,
    ci: float = 0.95,
    design: Design | None = None,
    panel_members: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The ``calibrated`` section (module docstring); None when the run has no human ratings.

    ``judgments``: the validated frame (with the panel's rows); ``items``: its ``scores.item_scores``; ``combined``:
    its ``preferences.combine_orders``; ``design``: the run's label queue, if it has one; ``panel_members``: the
    judges whose costs the panel's row adds up. With a queue and every
    score label on a drawn item, the score and difference rows weight the labels by the queue's inclusion
    probabilities; with labels outside the queue, every label is taken as a uniform sample, and a note says so.
    """
    if ratings is None:
        return None
    r = F.validate_ratings(ratings)
    if r.empty:
        return None
    humans, scales = _human_means(r)
    judge = _mapped_judge(items, scales)
    joined = F.left_join(judge, humans, [F.ITEM_ID, _SYSTEM, F.ASPECT])
    bounds = {a: s for a, s in scales.items() if isinstance(s, tuple)}
    # mapped once per aspect, then spread over the rows (a Python call per row of a million before: issue 39)
    aspect_codes, aspects = pd.factorize(joined[F.ASPECT])
    for column, end in (("human_scale_lo", 0), ("human_scale_hi", 1)):
        per_aspect = pd.Series(aspects).map(lambda a, end=end: bounds[a][end] if a in bounds else None)
        joined[column] = per_aspect.to_numpy()[aspect_codes]
    notes: list[str] = []
    units = set(zip(humans[F.ITEM_ID].astype(str), humans[F.SYSTEM].astype(str), strict=True))
    drawn = design.drawn if design is not None else frozenset()
    from_queue = sum(1 for item, _ in units if item in drawn)
    outside = len(units) - from_queue
    # an active queue's labels are no uniform sample: with labels outside it, its drawn labels stay weighted and
    # the others are left out of the score and difference rows (a uniform queue's join them as a uniform sample)
    weighted = design if design is not None and (outside == 0 or design.strategy == "active") else None
    scores = _score_rows(joined, scales, ci, weighted)
    differences = _difference_rows(joined, ci, weighted)
    win_rates = _win_rate_rows(combined, r, ci)
    if not scores and not win_rates:
        return None
    if weighted is not None and outside:
        notes.append(
            f"{outside} of {len(units)} labeled (item, system) pairs came from no label queue: the run's active "
            "queue weights its labels by their inclusion probabilities, which labels it did not draw do not have, "
            "so the score and difference rows leave those out (the judges table and win rates use every label)."
        )
    elif weighted is not None:
        notes.append(
            f"Every label came from the run's {weighted.strategy} label queue: each is weighted by its item's "
            "inclusion probability, so the intervals are valid by design (items judged after the draw are left out)."
        )
    elif outside:
        notes.append(
            f"{outside} of {len(units)} labeled (item, system) pairs came from no label queue: every interval "
            "assumes the labeled items are a uniform random sample of the judged items of their system."
        )
    return F.jsonable(
        {
            "method": METHOD,
            "design": "uniform"
            if weighted is None
            else f"label queue ({weighted.strategy}), inverse-probability weighted",
            "ci": ci,
            "min_labels": MIN_LABELS,
            "labels_from_queue": from_queue,
            "labels_outside_queue": outside,
            "scores": scores,
            "differences": differences,
            "win_rates": win_rates,
            "ranking": _ranking(scores, differences),
            "judges": _judge_rows(joined, judgments, ci, panel_members),
            "notes": notes,
        }
    )
