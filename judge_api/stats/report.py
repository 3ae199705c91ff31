"""Assemble every statistic of a run into one JSON-serialisable report.

``build_report`` validates the frames once, then fills these sections (each documented in its own
module): ``counts`` (rows per status and mode), ``scores`` (``scores.score_summary``), ``paired``
(``scores.paired_comparisons``: every pair of systems per aspect x judge), ``paper_table``
(``scores.paper_table``), ``preferences`` (``preferences.preference_summary``), ``ranking``
(``ranking.bradley_terry``), ``agreement`` (only when ratings are given: preference S1/S2 + kappa,
score correlations / QWK, Krippendorff's alpha), ``bias`` (``bias.bias_report``) and ``cost``; ``facts``
(``facts.facts_section``) and ``memory_audit`` (``memory.memory_audit_section``) when the run has fact-check or
memory-audit judgments; ``reference_metrics`` (how F1 / BLEU tokenised the items, with a warning when most
references are CJK and were split on whitespace; computed by the caller,
``judge_api.reference_tokens.tokenisation_section``, None when not given).

``cost``: totals of input / output tokens, cost (USD) and latency over all rows, and means per
*finished* judgment (done + failed + unparseable) of the service's own; ``n_cached`` counts cached verdicts,
``n_imported`` the finished imported verdicts (``source`` set: no call, left out of the means) and
``n_provider_calls`` the requests the provider answered and billed (the frame's ``provider_calls``, retries that
reached it included; a cache hit, a reference metric and an imported verdict make none): the number the run
endpoint and the dashboard's Runs page give.

The result contains only dicts, lists, str, int, float, bool and None (NaN / inf become None), so
``json.dumps(report, allow_nan=False)`` works.  Empty frames and runs in which every judgment failed
give the same sections with zero counts and None statistics.
Rendering a report (Markdown, plain text) is ``judge_api.stats.render``'s, which imports this module, never the
reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import preference_agreement, score_agreement, score_alpha
from judge_api.stats.bias import BiasThresholds, bias_report
from judge_api.stats.bootstrap import REPORT_N_BOOT
from judge_api.stats.calibrated import Design, calibrated_section
from judge_api.stats.consistency import self_consistency_section
from judge_api.stats.facts import facts_section
from judge_api.stats.memory import memory_audit_section
from judge_api.stats.panel import (
    AGGREGATES,
    PANEL_JUDGE,
    PSEUDO_JUDGES,
    REFERENCE_JUDGE,
    inter_judge_agreement,
    judges_vs_humans,
    pairwise_votes,
    panel_coverage,
    panel_members,
    panel_rows,
    resolve_quorum,
)
from judge_api.stats.preferences import PAIR_KEYS, combine_orders, pairwise_rows, preference_summary
from judge_api.stats.preferences import STATUS_ROW_COLUMNS as PREFERENCE_STATUS_COLUMNS
from judge_api.stats.ranking import bradley_terry
from judge_api.stats.scores import STATUS_ROW_COLUMNS as SCORE_STATUS_COLUMNS
from judge_api.stats.scores import (
    item_scores,
    paired_comparisons,
    paper_cell_counts,
    paper_items,
    paper_table,
    score_summary,
    single_rows,
)

REPORT_VERSION = 3
"""The version of the report's figures: part of the report cache's key, so a report kept by code that computed a
figure differently is not served by code that computes it otherwise (bump it with any such change; 2: the
Bradley-Terry resample over outcome patterns, issue 39; 3: the API reads a run in parts, its cost sums added part by
part, ``stats.parts``)."""

SECTIONS = (
    "meta",
    "counts",
    "scores",
    "paired",
    "paper_table",
    "preferences",
    "ranking",
    "agreement",
    "calibrated",
    "bias",
    "cost",
    "self_consistency",
    "panel",
    "facts",
    "memory_audit",
    "reference_metrics",
)


def _status_dict(status: pd.Series) -> dict[str, int]:
    vc = status.value_counts()
    return {s: int(vc.get(s, 0)) for s in F.STATUSES}


class SummedFigures(Protocol):
    """What the report reads of the columns a run read in parts holds as sums (``stats.parts.RowSums``)."""

    def counts(self) -> dict[str, Any]: ...

    def imported_judges(self) -> dict[str, list[str]]: ...

    def cost_sums(self) -> tuple[CostSums, Mapping[str, CostSums]]: ...


def counts_section(judgments: pd.DataFrame, *, sums: SummedFigures | None = None) -> dict[str, Any]:
    """Row counts by status, by mode and by rubric, and the systems / judges / aspects present; ``sums``: the counts by
    rubric and the runs of a run read in parts (``stats.parts``)."""
    df = F.validate_judgments(judgments)
    if sums is not None:
        summed = sums.counts()
        by_rubric, runs = summed["by_rubric"], summed["runs"]
    else:
        by_rubric = {str(r): _status_dict(group) for r, group in df.groupby(F.RUBRIC_ID, sort=True)[F.STATUS]}
        runs = F.distinct(df[F.RUN_ID])
    return {
        "n_rows": len(df),
        "by_status": _status_dict(df[F.STATUS]),
        "by_mode": {m: _status_dict(df.loc[df[F.MODE] == m, F.STATUS]) for m in F.MODES},
        "by_rubric": by_rubric,
        "n_items": int(df[F.ITEM_ID].nunique()),
        "systems": F.distinct(df[F.SYSTEM_A], df[F.SYSTEM_B]),
        "judges": F.distinct(df[F.JUDGE]),
        "aspects": F.distinct(df[F.ASPECT]),
        "runs": runs,
    }


_COST_TOTALS = (
    F.INPUT_TOKENS,
    F.OUTPUT_TOKENS,
    F.CACHED_INPUT_TOKENS,
    F.CACHE_WRITE_TOKENS,
    F.COST_USD,
    F.CACHE_SAVED_USD,
    F.LATENCY_MS,
)
_COST_MEANS = (F.INPUT_TOKENS, F.OUTPUT_TOKENS, F.COST_USD, F.LATENCY_MS)
_LISTED = "listed"
_BATCH_SAVED = "batch_saved"
BATCH_SAVED_NOISE = 1e-9
"""A row whose list price less what was paid and what the cache saved is below this share of its list price saved
nothing by batch: the difference is the rounding of ``list = cost + cache_saved``."""


@dataclass
class CostSums:
    """The sums and counts behind one block of the ``cost`` section: what two parts of a run's rows add up to
    (:meth:`plus`) and what the figures are made of (:func:`cost_figures`).

    ``totals``: the sum of each cost column over the block's rows (NaN counted as 0), ``listed``, the list price
    (a row's ``cost_usd`` where it has none), and ``batch_saved``, what batch prices saved (per row: the list price
    less what was paid and what the cache saved, 0 below ``BATCH_SAVED_NOISE`` of the row's list price);
    ``mean_sums`` / ``mean_counts``: the finite values of the mean columns over the rows the service called for
    (finished, not imported), and how many. The token totals are sums of whole
    numbers, the same in any order; the float totals and means of a run read in parts are sums of the parts' sums,
    which may differ from one sum over every row in the last digits (``stats.parts``)."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys((*_COST_TOTALS, _LISTED, _BATCH_SAVED), 0.0))
    mean_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_COST_MEANS, 0.0))
    mean_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COST_MEANS, 0))
    n_finished: int = 0
    n_cached: int = 0
    n_provider_calls: int = 0
    n_imported: int = 0

    def plus(self, other: CostSums) -> CostSums:
        return CostSums(
            totals={k: self.totals[k] + other.totals[k] for k in self.totals},
            mean_sums={k: self.mean_sums[k] + other.mean_sums[k] for k in self.mean_sums},
            mean_counts={k: self.mean_counts[k] + other.mean_counts[k] for k in self.mean_counts},
            n_finished=self.n_finished + other.n_finished,
            n_cached=self.n_cached + other.n_cached,
            n_provider_calls=self.n_provider_calls + other.n_provider_calls,
            n_imported=self.n_imported + other.n_imported,
        )


def _cost_sums(
    column: Callable[[str], np.ndarray],
    finished: np.ndarray,
    cached: np.ndarray,
    imported: np.ndarray,
    calls: np.ndarray,
) -> CostSums:
    """The sums of one block of rows; ``column(name)``: that column of the block's rows as float64, made when asked
    and dropped after use (issue 39: the eight columns of every block at once were 95 MB at 1M rows). Each column is
    asked for once (issue 39: 2.6 s of a 10M-row report read in parts)."""
    called = finished & ~imported  # an imported verdict cost this service nothing: not in the means
    # the rows as positions, taken once for the four mean columns: a boolean mask is found again at each use, 10x
    # slower than positions where the rows alternate (issue 39)
    called_rows = np.flatnonzero(called)
    totals: dict[str, float] = {}
    mean_sums: dict[str, float] = {}
    mean_counts: dict[str, int] = {}
    kept: dict[str, np.ndarray] = {}  # the two columns the batch saving reads again
    for name in _COST_TOTALS:
        values = np.ascontiguousarray(column(name))
        totals[name] = _nansum(values)
        if name in _COST_MEANS:
            finite = values[called_rows]
            finite = finite[np.isfinite(finite)]
            # the sum and the count: their quotient is finite.mean() to the last bit (numpy's mean is this sum over n)
            mean_sums[name], mean_counts[name] = float(finite.sum()), int(finite.size)
        if name in (F.COST_USD, F.CACHE_SAVED_USD):
            kept[name] = values
    cost, cache_saved = kept[F.COST_USD], kept[F.CACHE_SAVED_USD]
    # rows from before the list price was stored (NaN): they were billed at list price
    listed_cost = column(F.LIST_COST_USD)
    listed_cost = np.where(np.isfinite(listed_cost), listed_cost, cost)
    totals[_LISTED] = _nansum(listed_cost)
    # what batch prices saved, row by row: the difference of the three totals is their rounding where nothing was
    # batched (~1e-17), and other rounding when they are summed in parts (reviews r57a, r57b)
    listed_cost = _nan_to_num(listed_cost)
    batch = listed_cost - _nan_to_num(cost) - _nan_to_num(cache_saved)
    batch = np.where(batch > BATCH_SAVED_NOISE * np.abs(listed_cost), batch, 0.0)
    totals[_BATCH_SAVED] = float(batch.sum())
    return CostSums(
        totals=totals,
        mean_sums=mean_sums,
        mean_counts=mean_counts,
        n_finished=int(finished.sum()),
        n_cached=int((called & cached).sum()),
        n_provider_calls=int(calls.sum()),
        n_imported=int((finished & imported).sum()),
    )


def _nansum(values: np.ndarray) -> float:
    """``np.nansum(values)`` of a contiguous float64 array: the same sum, without its copy where nothing is NaN."""
    nan = np.isnan(values)
    return float((np.where(nan, 0.0, values) if nan.any() else values).sum())


def _nan_to_num(values: np.ndarray) -> np.ndarray:
    """``np.nan_to_num(values)``: the array itself where every value is finite."""
    return values if np.isfinite(values).all() else np.nan_to_num(values)


def cost_figures(sums: CostSums) -> dict[str, Any]:
    """One block of the ``cost`` section from its sums."""
    totals = sums.totals
    cost, listed, cache_saved = totals[F.COST_USD], totals[_LISTED], totals[F.CACHE_SAVED_USD]

    def mean(name: str) -> float | None:
        n = sums.mean_counts[name]
        return sums.mean_sums[name] / n if n else None

    return {
        "input_tokens": int(totals[F.INPUT_TOKENS]),
        "output_tokens": int(totals[F.OUTPUT_TOKENS]),
        "cached_input_tokens": int(totals[F.CACHED_INPUT_TOKENS]),
        "cache_write_tokens": int(totals[F.CACHE_WRITE_TOKENS]),
        "cost_usd": cost,
        "list_cost_usd": listed,
        # what the provider's discounts saved against list price: caching at real-time prices, batch the rest
        "saved_usd": {"cache": cache_saved, "batch": totals[_BATCH_SAVED]},
        "latency_ms": totals[F.LATENCY_MS],
        "n_finished": sums.n_finished,
        "n_cached": sums.n_cached,
        "n_provider_calls": sums.n_provider_calls,
        "n_imported": sums.n_imported,
        "mean_input_tokens": mean(F.INPUT_TOKENS),
        "mean_output_tokens": mean(F.OUTPUT_TOKENS),
        "mean_cost_usd": mean(F.COST_USD),
        "mean_latency_ms": mean(F.LATENCY_MS),
    }


def cost_sums(judgments: pd.DataFrame) -> tuple[CostSums, dict[str, CostSums]]:
    """The sums behind the ``cost`` section: over every row, and per judge."""
    df = F.validate_judgments(judgments)
    finished = df[F.STATUS].isin(F.FINISHED_STATUSES).to_numpy()
    cached = df[F.CACHED].to_numpy(dtype=bool)
    imported = df[F.SOURCE].notna().to_numpy()
    calls = df[F.PROVIDER_CALLS].to_numpy(dtype="int64")

    def every_row(name: str) -> np.ndarray:
        return df[name].to_numpy(dtype="float64")

    overall = _cost_sums(every_row, finished, cached, imported, calls)
    codes, judges = pd.factorize(df[F.JUDGE], sort=True)
    per_judge = {}
    for k, judge in enumerate(judges):
        m = np.flatnonzero(codes == k)  # positions, not a mask: taken nine times (see _cost_sums)

        def judge_rows(name: str, m: np.ndarray = m) -> np.ndarray:
            # the judge's rows first, then float64: the same values as converting every row and taking them
            return np.asarray(df[name].to_numpy()[m], dtype="float64")

        per_judge[str(judge)] = _cost_sums(judge_rows, finished[m], cached[m], imported[m], calls[m])
    return overall, per_judge


def cost_section(
    judgments: pd.DataFrame, *, sums: tuple[CostSums, Mapping[str, CostSums]] | None = None
) -> dict[str, Any]:
    """Token / cost / latency totals and per-judgment means, overall and per judge; ``sums``: :func:`cost_sums` of
    the run's rows, already added up (a run read in parts, ``stats.parts``), instead of reading ``judgments``."""
    overall, per_judge = cost_sums(judgments) if sums is None else sums
    out = cost_figures(overall)
    out["per_judge"] = [{"judge": judge, **cost_figures(per_judge[judge])} for judge in sorted(per_judge)]
    return out


METRIC_LABELS = {"f1": "F1", "bleu-1": "BLEU-1", "bleu-2": "BLEU-2", "bertscore": "BERTScore"}
"""Display names of the reference metrics, in the paper table's column order."""


def _paper_section(table: pd.DataFrame, counts: pd.DataFrame | None = None) -> dict[str, Any]:
    """The paper table: systems x judge aspects per judge, with the reference metrics (same for every judge) as
    extra columns on each row, as the recursive-summarisation paper shows F1 / BLEU beside the judge's scores.

    Each row also carries the n behind every cell (``n``: per aspect, ``metrics_n``: per metric) and ``shared``
    (per aspect and metric: True when the systems are compared on the items they all have); ``compared_on`` says
    it for the whole table."""
    n_of: dict[tuple[Any, Any, Any], int] = {}
    shared_of: dict[tuple[Any, Any, Any], bool] = {}
    if counts is not None:
        for c in counts.to_dict(orient="records"):
            n_of[(c[F.JUDGE], c["system"], c[F.ASPECT])] = int(c["n"])
            shared_of[(c[F.JUDGE], c["system"], c[F.ASPECT])] = bool(c["shared"])
    fixed = {F.JUDGE, "system", "average", "n_items"}
    aspects = [c for c in table.columns if c not in fixed]
    reference = table[table[F.JUDGE] == REFERENCE_JUDGE]
    judged = table[table[F.JUDGE] != REFERENCE_JUDGE]
    present = [a for a in aspects if reference[a].notna().any()] if not reference.empty else []
    metrics = [m for m in METRIC_LABELS if m in present] + [m for m in present if m not in METRIC_LABELS]
    judge_aspects = [a for a in aspects if judged[a].notna().any()] if not judged.empty else []
    by_system = {r["system"]: r for r in reference.to_dict(orient="records")}
    records = judged.to_dict(orient="records")
    if not records:  # nothing judged (yet): the reference metrics alone
        records = [{F.JUDGE: None, "system": s, "average": None, "n_items": r["n_items"]} for s, r in by_system.items()]
    rows = [
        {
            "judge": r[F.JUDGE],
            "system": r["system"],
            "metrics": {m: by_system.get(r["system"], {}).get(m) for m in metrics},
            "values": {a: r.get(a) for a in judge_aspects},
            "average": r["average"],
            "n_items": r["n_items"],
            "n": {a: n_of.get((r[F.JUDGE], r["system"], a)) for a in judge_aspects},
            "metrics_n": {m: n_of.get((REFERENCE_JUDGE, r["system"], m)) for m in metrics},
            "shared": {
                **{a: shared_of.get((r[F.JUDGE], r["system"], a)) for a in judge_aspects},
                **{m: shared_of.get((REFERENCE_JUDGE, r["system"], m)) for m in metrics},
            },
        }
        for r in records
    ]
    flags = [v for row in rows for v in row["shared"].values() if v is not None]
    compared_on = "shared items" if all(flags) else "each system's own items where the systems share none"
    return {"metrics": metrics, "aspects": judge_aspects, "rows": rows, "compared_on": compared_on}


def panel_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's panel settings (``RunCreate.panel``) with their defaults: all judges, mean, quorum a majority."""
    panel = dict(config or {})
    aggregate = panel.get("aggregate") or "mean"
    if aggregate not in AGGREGATES:
        raise ValueError(f"panel.aggregate {aggregate!r} is not one of {list(AGGREGATES)}")
    quorum = panel.get("quorum")
    if quorum is not None and (isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1):
        raise ValueError(f"panel.quorum {quorum!r} is not a whole number of at least 1")
    return {
        "judges": panel.get("judges"),
        "aggregate": aggregate,
        "quorum": quorum,
        "enabled": panel.get("enabled", True),
    }


def build_report(
    judgments: pd.DataFrame | list[pd.DataFrame],
    ratings: pd.DataFrame | None = None,
    *,
    thresholds: BiasThresholds | None = None,
    n_boot: int = REPORT_N_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    human_prefix: str | None = None,
    families: Mapping[str, str] | None = None,
    n_bins: int = 5,
    panel: Mapping[str, Any] | None = None,
    fact_labels: pd.DataFrame | None = None,
    memory_audit: pd.DataFrame | None = None,
    reference_metrics: Mapping[str, Any] | None = None,
    label_design: Design | None = None,
    sums: SummedFigures | None = None,
) -> dict[str, Any]:
    """Every statistic of a run as one JSON-serialisable dict (see the module docstring).

    ``ratings`` (human ratings frame) enables the ``agreement`` section; ``human_prefix`` restricts
    the human raters to ids starting with it (MT-Bench: ``"expert_"``).  ``n_boot`` bootstrap
    resamples with ``seed`` for every CI; ``thresholds`` for the bias flags; ``families`` overrides
    the model-family substring map of the self-preference check; ``n_bins`` is the common scale of
    the score kappa. ``panel`` (``{"judges": [...] or None, "aggregate": "mean"|"median", "quorum": int or None,
    "enabled": bool}``, default: every judge, mean, a majority) adds the ``panel`` pseudo-judge when it has two or
    more members (``stats.panel``): a verdict on the units with a quorum only, its coverage in ``panel.coverage``.
    ``fact_labels`` (the fact labels frame of fact-check judgments) fills the ``facts`` section (``stats.facts``;
    None without fact-check judgments). ``memory_audit`` (``stats.memory.audit_rows`` of the memory-audit judgments)
    fills the ``memory_audit`` section (``stats.memory.memory_audit_section``; None without memory-audit judgments).
    ``reference_metrics`` (``judge_api.reference_tokens.tokenisation_section``: how the reference metrics tokenised
    the items, with its warning) is the ``reference_metrics`` section as given. ``label_design`` (the run's label
    queue) lets the ``calibrated`` section weight the labels by their inclusion probabilities. ``sums``: the figures of
    the columns a run read in parts holds as sums (``stats.parts.RunParts``: required with its frame, marked
    ``frames.SUMMED``), for the counts by rubric and run, the cost section and the imported judges.

    ``judgments`` may be a list holding the frame: the report takes the frame out of it, and when nothing else holds
    the frame, lets its rows go once the sections that read them are made (without ratings; issue 39,
    ``stats.parts.report_from_parts``).
    """
    if isinstance(judgments, list):
        judgments = judgments.pop()
    if judgments.attrs.get(F.SUMMED) and sums is None:
        raise ValueError("the frame of a run read in parts (stats.parts) holds placeholder columns: pass sums")
    stored = F.encode_strings(F.validate_judgments(judgments))
    del judgments
    settings = panel_config(panel)
    imported = F.imported_judges(stored) if sums is None else sums.imported_judges()
    members = _panel_members(stored, settings, imported)
    # the rows are kept through the report where a section reads them after the panel's rows are made: agreement
    # with humans and calibrated (they read the frame with the panel's rows), and a stored judge named like the panel
    keep_rows = ratings is not None or bool((stored[F.JUDGE] == PANEL_JUDGE).any())
    # the outcomes first: theirs is the larger transient, made while nothing else is held (issue 39)
    stored_combined = combine_orders(stored, validated=True)
    F.release_freed()
    stored_items = item_scores(stored, validated=True)
    F.release_freed()
    report: dict[str, Any] = {
        "meta": {
            "n_boot": n_boot,
            "seed": seed,
            "ci": ci,
            "ci_method": {
                "scores": "hull of the Student t and bootstrap-t intervals over items, clipped to the scale "
                "(ci_warning: one item, all scores equal, or fewer than 10 items)",
                "paired": "the same over paired differences (bounded by the scale's width); Wilcoxon signed-rank p",
                "win_rate": "Wilson score interval, ties counted as half wins",
                "ranking": "Bradley-Terry (MM), percentile bootstrap over items",
                "reference_metrics": "ParlAI normalisation; F1 of tokens; BLEU-1/2 nltk sentence_bleu with "
                "SmoothingFunction(epsilon=1e-12).method1; tokens as the section reference_metrics says",
            },
        },
    }
    sections: dict[str, Any] = {}

    def put(name: str, value: Any) -> None:
        sections[name] = value
        F.release_freed()  # each section's garbage given back before the next is made (issue 39)

    # first the sections that read the stored rows; they read the real judges' item scores and outcomes (the panel's
    # are not among them: the bias checks drop them, the panel's coverage and agreement read its members')
    real = _without_pseudo_judges(stored)
    put("counts", {**counts_section(stored, sums=sums), "imported": imported})
    bias = bias_report(
        real,
        thresholds=thresholds,
        families=families,
        combined=_without_pseudo_judges(stored_combined),
        items=_without_pseudo_judges(stored_items),
    )
    put("bias", bias)
    put("cost", cost_section(stored, sums=None if sums is None else sums.cost_sums()))
    put("self_consistency", self_consistency_section(stored, validated=True))
    panel_section = None
    votes = None
    if len(members) >= 2:
        # the members' pairwise votes: the coverage counts them, the panel's rows are made of them (issue 39: made
        # once, not twice, 0.7 s at 10M rows)
        votes = pairwise_votes(stored_combined, members)
        coverage = panel_coverage(
            stored, members, settings["quorum"], items=stored_items, combined=stored_combined, votes=votes
        )
        F.release_freed()
        panel_section = {
            "judge": PANEL_JUDGE,
            "members": members,
            "aggregate": settings["aggregate"],
            "quorum": resolve_quorum(members, settings["quorum"]),
            "coverage": coverage,
            "n_rows": 0,
            "cost_usd": float(stored.loc[stored[F.JUDGE].isin(members).to_numpy(), F.COST_USD].sum()),
            "inter_judge": None,
        }
    single_status = pair_status = None
    kept = stored if keep_rows else None
    if kept is None:
        # the item sections read the stored rows' statuses only: the rows are let go (when nothing else holds them)
        single_status = single_rows(stored, SCORE_STATUS_COLUMNS)
        pair_status = pairwise_rows(stored, PREFERENCE_STATUS_COLUMNS)
    del stored, real
    F.release_freed()
    if panel_section is not None:  # the members' item scores and outcomes only
        panel_section["inter_judge"] = inter_judge_agreement(
            F.empty_judgments() if kept is None else kept,
            members,
            n_bins=n_bins,
            items=stored_items,
            combined=stored_combined,
        )
        F.release_freed()
    df, panel_judgments, items, combined = _with_panel(
        kept, members, settings, stored_items, stored_combined, stack=ratings is not None, votes=votes
    )
    del stored_items, stored_combined, votes
    F.release_freed()
    if panel_section is not None:
        panel_section["n_rows"] = len(panel_judgments)
    if single_status is not None and pair_status is not None:
        single_status = F.stack_encoded(single_status, single_rows(panel_judgments, SCORE_STATUS_COLUMNS))
        pair_status = F.stack_encoded(pair_status, pairwise_rows(panel_judgments, PREFERENCE_STATUS_COLUMNS))
    del panel_judgments  # its rows are not kept through the sections (issue 39: 57 MB at 1M with every column)
    # the item sections read the item scores, outcomes and status rows: without the rows, an empty frame
    frame = df if df is not None and kept is not None else F.empty_judgments()
    put("scores", score_summary(frame, n_boot=n_boot, seed=seed, ci=ci, items=items, status_rows=single_status))
    del single_status
    put("paired", paired_comparisons(frame, n_boot=n_boot, seed=seed, ci=ci, items=items))
    # the paper table's items are a copy of most item scores: kept only while its section is made (issue 39)
    paper = paper_items(items)
    table = paper_table(frame, items=items, paper=paper)
    put("paper_table", _paper_section(table, paper_cell_counts(items, paper=paper)))
    del paper, table
    put("preferences", preference_summary(frame, ci=ci, combined=combined, status_rows=pair_status))
    del pair_status
    put("ranking", bradley_terry(frame, n_boot=n_boot, seed=seed, ci=ci, combined=combined))
    sections["agreement"] = None
    sections["calibrated"] = None
    sections["panel"] = panel_section
    put("facts", facts_section(fact_labels, n_boot=n_boot, seed=seed, ci=ci))
    put("memory_audit", memory_audit_section(memory_audit, n_boot=n_boot, seed=seed, ci=ci))
    sections["reference_metrics"] = dict(reference_metrics) if reference_metrics else None
    if ratings is not None:
        assert df is not None and kept is not None  # stacked when there are ratings
        stored, real = kept, _without_pseudo_judges(kept)
        r = F.validate_ratings(ratings)
        sections["agreement"] = {
            "human_prefix": human_prefix,
            "preferences": preference_agreement(df, r, human_prefix=human_prefix, combined=combined),
            "scores": score_agreement(df, r, n_bins=n_bins, human_prefix=human_prefix, items=items),
            "alpha": score_alpha(real, r, n_bins=n_bins, human_prefix=human_prefix),
            "judges": judges_vs_humans(
                stored,
                r,
                members,
                settings["aggregate"],
                quorum=settings["quorum"],
                human_prefix=human_prefix,
                n_bins=n_bins,
                # df is the stored frame with this panel's rows, unless a stored judge is named like the panel
                with_panel_rows=None if (stored[F.JUDGE] == PANEL_JUDGE).any() else (df, items, combined),
            ),
        }
        human = r if human_prefix is None else r[r[F.RATER].str.startswith(human_prefix)]
        sections["calibrated"] = calibrated_section(
            df, human, items=items, combined=combined, ci=ci, design=label_design, panel_members=members
        )
    report.update((name, sections[name]) for name in SECTIONS if name != "meta")
    out = F.jsonable(report)
    assert isinstance(out, dict)
    _mark_imported(out, imported)
    return out


def _without_pseudo_judges(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the real judges (not the panel nor the reference metrics); the frame itself when it has no others,
    not a copy of every column of it (issue 39: a million rows)."""
    pseudo = frame[F.JUDGE].isin(PSEUDO_JUDGES).to_numpy()
    if not pseudo.any():
        return frame
    first = int(np.argmax(pseudo))
    if pseudo[first:].all():  # the panel's rows, appended after the stored ones: a view of the rows before them
        return frame.iloc[:first]
    return frame[~pseudo]


def _panel_members(stored: pd.DataFrame, settings: Mapping[str, Any], imported: Mapping[str, Any]) -> list[str]:
    """The panel's members: the judges named, or by default the judges the run called (imported verdicts join it
    only when named); none when the panel is disabled."""
    chosen = settings["judges"]
    if chosen is None:
        chosen = [j for j in F.distinct(stored[F.JUDGE]) if j not in imported]
    return panel_members(stored, chosen) if settings["enabled"] else []


def _with_panel(
    stored: pd.DataFrame | None,
    members: list[str],
    settings: Mapping[str, Any],
    stored_items: pd.DataFrame,
    stored_combined: pd.DataFrame,
    *,
    stack: bool,
    votes: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame | None, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The frame with the panel's rows added, those rows, and that frame's item scores (``item_scores``) and
    order-combined outcomes (``combine_orders``), from the stored rows' (``stored_items``, ``stored_combined``).

    ``stored``: the stored rows, or None when they were let go (then neither ``stack`` nor a stored judge named like
    the panel; the frame given back is None). With ``stack=False`` the frame is None when the panel has rows (the
    caller does not need every row twice), else the stored frame.

    The panel's item scores and outcomes are appended to the stored ones (issue 39). Both functions keep their
    groups in the order they first appear and the panel's rows come after the stored ones under a judge of their
    own, so this is row for row what they give on the whole frame. ``votes``: the members' ``pairwise_votes`` when
    the caller made them."""
    if len(members) < 2:
        return stored, F.empty_judgments(), stored_items, stored_combined
    rows = panel_rows(
        F.empty_judgments() if stored is None else stored,  # read for nothing but its type: the units are given
        members,
        settings["aggregate"],
        quorum=settings["quorum"],
        items=stored_items,
        combined=stored_combined,
        encoded=True,
        votes=votes,
    )
    F.release_freed()
    if rows.empty:
        return stored, rows, stored_items, stored_combined
    named_like_panel = stored is not None and bool((stored[F.JUDGE] == PANEL_JUDGE).any())
    if not stack and not named_like_panel:
        # only their item scores, outcomes and status rows are read: not their 32 columns (issue 39: 56 MB at 1M)
        rows = rows[PANEL_ROW_COLUMNS]
    rows = F.encode_strings(rows.assign(**{F.JUDGMENT_ID: -np.arange(1, len(rows) + 1)}))
    if named_like_panel:  # a stored judge named like the panel: its groups would merge
        assert stored is not None
        df = _stacked(stored, rows)
        return df, rows, item_scores(df, validated=True), combine_orders(df, validated=True)
    items = F.stack_encoded(stored_items, item_scores(rows, validated=True))
    F.release_freed()
    combined = F.stack_encoded(stored_combined, combine_orders(rows, validated=True))
    F.release_freed()
    if not stack:
        return None, rows, items, combined
    assert stored is not None
    return _stacked(stored, rows), rows, items, combined


def _panel_frames(
    stored: pd.DataFrame, settings: Mapping[str, Any], imported: Mapping[str, Any], *, stack: bool = True
) -> tuple[list[str], pd.DataFrame | None, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The panel's members, then :func:`_with_panel` of the stored rows (their item scores and outcomes made here)."""
    members = _panel_members(stored, settings, imported)
    stored_items = item_scores(stored, validated=True)
    stored_combined = combine_orders(stored, validated=True)
    return members, *_with_panel(stored, members, settings, stored_items, stored_combined, stack=stack)


PANEL_ROW_COLUMNS = list(
    dict.fromkeys(
        [
            *PAIR_KEYS,
            *SCORE_STATUS_COLUMNS,
            *PREFERENCE_STATUS_COLUMNS,
            F.MODE,
            F.ORDER,
            F.SCORE,
            F.SCALE_MIN,
            F.SCALE_MAX,
            F.PREFERENCE,
            F.OUTCOME,
            F.LEN_A,
            F.LEN_B,
        ]
    )
)
"""The columns of the panel's rows that ``item_scores``, ``combine_orders`` and ``_status_rows`` read."""


def _stacked(stored: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    df = F.stack_encoded(stored, rows)
    df.attrs = dict(stored.attrs)
    return df


def calibrated_report(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None,
    *,
    ci: float = 0.95,
    human_prefix: str | None = None,
    panel: Mapping[str, Any] | None = None,
    label_design: Design | None = None,
) -> dict[str, Any] | None:
    """The report's ``calibrated`` section alone (``stats.calibrated``), as ``build_report`` would give it."""
    if ratings is None:
        return None
    stored = F.encode_strings(F.validate_judgments(judgments))
    members, df, _, items, combined = _panel_frames(stored, panel_config(panel), F.imported_judges(stored))
    assert df is not None
    r = F.validate_ratings(ratings)
    human = r if human_prefix is None else r[r[F.RATER].str.startswith(human_prefix)]
    return calibrated_section(
        df, human, items=items, combined=combined, ci=ci, design=label_design, panel_members=members
    )


def _mark_imported(report: dict[str, Any], imported: Mapping[str, Any]) -> None:
    """``imported: true`` on every agreement row of a judge whose verdicts were imported (``false`` otherwise)."""
    agreement = report.get("agreement") or {}
    rows = list((agreement.get("preferences") or {}).get("judge_vs_human") or []) + list(agreement.get("scores") or [])
    for row in rows:
        row["imported"] = row.get(F.JUDGE) in imported


_warmed = threading.Lock()
_warm = False


def warm_up() -> None:
    """Build one small report (scores, pairs, preferences, ranking, bias, agreement and the calibrated section) and
    throw it away, once per process.

    The first report in a process otherwise pays for the numpy / scipy / pandas work done once per process
    (lazily imported submodules, first calls into compiled code); the API calls this at start-up so that its first
    ``GET /report`` costs what every later one does. About 1.5 s, paid once: an app started again in the same
    process (a test suite starts hundreds) has nothing left to warm."""
    global _warm
    with _warmed:
        if _warm:
            return
        _build_warm_up_report()
        _warm = True


def _build_warm_up_report() -> None:
    from judge_api.stats.synthetic import synthetic_judgments

    frame = synthetic_judgments(3000, seed=0)
    done = frame[frame[F.STATUS] == F.DONE]
    single = done[done[F.MODE] == F.SINGLE].head(200)
    pairs = done[done[F.MODE] == F.PAIRWISE].head(200)
    ratings = pd.concat(
        [
            pd.DataFrame(
                {
                    F.ITEM_ID: single[F.ITEM_ID],
                    "system": single[F.SYSTEM_A],
                    F.ASPECT: single[F.ASPECT],
                    "rater": "warm-up",
                    "kind": "score",
                    "value": single[F.SCORE],
                    F.SCALE_MIN: 1.0,
                    F.SCALE_MAX: 100.0,
                }
            ),
            pd.DataFrame(
                {
                    F.ITEM_ID: pairs[F.ITEM_ID],
                    "system": pairs[F.SYSTEM_A],
                    F.SYSTEM_B: pairs[F.SYSTEM_B],
                    F.ASPECT: pairs[F.ASPECT],
                    "rater": "warm-up",
                    "kind": "preference",
                    "value": np.sign(pairs[F.PREFERENCE].fillna(0.0)),
                }
            ),
        ],
        ignore_index=True,
    )
    build_report(frame, ratings, n_boot=20)
