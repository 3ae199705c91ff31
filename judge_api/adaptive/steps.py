"""Planning steps of adaptive runs: what to judge next, decided from what the database holds.

An adaptive run (``pairing: "adaptive"`` and/or ``samples: "adaptive"``) is stored with its first judgments only
(``planning.plan_run``) and ``plan_open`` set. A *step* (:func:`advance`) reads the run's judgments and adds

* another sample to every judgment whose samples are all finished and leave its verdict in doubt
  (``sampling.more_samples``), and
* once nothing of the run is pending or running, the next batch of comparisons (``planner.plan_step``), or the
  stopping reason; when neither adds anything the run is finished (``plan_open`` false) and its status can be
  ``done``.

Who steps: the worker after every batch of verdicts it writes (``workers.celery_app``), and the sweeper at every
sweep (``judge_api.sweeper``), which catches a step a killed worker never took. Any number of steps may run at any
time, concurrently: the database is the source of truth and

* every new judgment carries its dedup key (unique): a sample or comparison already stored is never added again,
  and ``n_judgments`` grows by the rows actually inserted;
* a batch of comparisons (and the run's planning state) is written under a compare-and-set on ``runs.plan_round``:
  of two steps that saw the same state, one plans and the other does nothing.

New judgments are stamped as enqueued in the transaction that stores them and published after it commits (the
sweeper sends them if publishing fails, as for a new run).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session, sessionmaker

from judge_api import queue
from judge_api.adaptive.planner import STOP_REASONS, Plan, Planned, canonical, plan_step
from judge_api.adaptive.ranking import Comparison
from judge_api.adaptive.sampling import SamplingRule, more_samples, rule_for, usage
from judge_api.config import Settings
from judge_api.models import TERMINAL_STATUSES, Run
from judge_api.planning import (
    PlannedJudgment,
    Target,
    adaptive_pair_items,
    comparison_judgments,
    planner_config,
    round_robin_calls,
)
from judge_api.reference_metrics import REFERENCE_JUDGE
from judge_api.repository import plans
from judge_api.rubrics import DEFAULT_OUTCOME_MAP, Rubric
from judge_api.schemas import AdaptiveOptions, JudgeOptions
from judge_api.stats import frames as F
from judge_api.stats.preferences import combine_orders

log = logging.getLogger(__name__)

SCORES = {F.WIN: 1.0, F.TIE: 0.5, F.LOSS: 0.0}
KEY_FIELDS = ("item_key", "mode", "system_a", "system_b", "order", "rubric_id", "aspect", "judge")


@dataclass
class Step:
    new_ids: list[int]
    finished: bool


def advance(
    sessions: sessionmaker[Session], run_id: str, touched: Sequence[int] | None = None, *, idle_only: bool = False
) -> Step:
    """One planning step of an adaptive run (module docstring). ``touched``: judgments just finished (the samples
    of their keys are looked at); None looks at every judgment. ``idle_only``: do nothing while judgments of the
    run are in flight (the sweeper: the worker finishing them steps). Returns the judgments it added (already
    stamped as enqueued; the caller publishes them) and whether the run is finished."""
    with sessions() as session:
        step = _advance(session, run_id, touched, idle_only)
        session.commit()
    return step


def _advance(session: Session, run_id: str, touched: Sequence[int] | None, idle_only: bool) -> Step:
    run = session.get(Run, run_id)
    if run is None or not run.plan_open:
        return Step([], True)
    config = run.config
    options = JudgeOptions.model_validate(config.get("options") or {})
    in_flight = plans.in_flight(session, run_id)
    if in_flight and idle_only:
        return Step([], False)
    everything = touched is None or in_flight == 0
    rows = plans.step_rows(session, run_id, None if everything else touched)
    state = dict(run.plan_state or {})
    new: list[PlannedJudgment] = []
    if options.samples == "adaptive" and run.budget_exhausted_at is None:
        new = _more_samples(session, run.project_id, rows, options, _pairwise_room(session, run))
        if everything:
            state["samples"] = _sample_usage(rows, options)
    if new:
        return Step(plans.insert_planned(session, run, new), False)
    if in_flight:
        return Step([], False)
    round_ = run.plan_round
    plan_new: list[PlannedJudgment] = []
    if config.get("pairing") == "adaptive" and not (state.get("pairing") or {}).get("stop"):
        candidates = plans.candidates(session, run_id)
        calls = plans.pairwise_calls(session, run_id)
        plan, plan_new = _plan_pairing(run, rows, options, candidates, calls)
        state["pairing"] = _pairing_state(run, rows, plan, plan_new, options, candidates, calls)
    finished = not plan_new
    state["finished"] = finished
    state["round"] = round_ + 1
    if not plans.take_round(session, run_id, round_, state, not finished):
        return Step([], False)  # another step planned from this very state
    return Step(plans.insert_planned(session, run, plan_new), finished)


# -- adaptive self-consistency -----------------------------------------------------------------------------------


def _sampling_rule(rubric: Rubric, options: JudgeOptions, judge_params: dict[str, Any]) -> SamplingRule:
    if rubric.mode == "single":
        return rule_for(
            "single",
            max_samples=options.max_sample_count,
            min_samples=options.min_samples,
            margin=options.sample_margin,
            boundaries=options.sample_boundaries or (),
            scale=rubric.scale,
        )
    outcome_map = {**DEFAULT_OUTCOME_MAP, **rubric.outcome_map, **((judge_params or {}).get("outcome_map") or {})}
    return rule_for(
        "pairwise",
        max_samples=options.max_sample_count,
        min_samples=options.min_samples,
        verdict_levels=list(rubric.verdicts.values()),
        outcome_map=outcome_map,
    )


def _keys(rows: pd.DataFrame) -> Iterable[tuple[tuple[Any, ...], pd.DataFrame]]:
    rows = rows[rows["judge"] != REFERENCE_JUDGE]  # reference metrics are exact: one computation, never sampled
    if rows.empty:
        return []
    keyed = rows.assign(system_b=rows["system_b"].fillna(""), order=rows["order"].fillna(""))
    return keyed.groupby(list(KEY_FIELDS), sort=True)


def _more_samples(
    session: Session, project_id: str, rows: pd.DataFrame, options: JudgeOptions, pairwise_room: int | None
) -> list[PlannedJudgment]:
    rules: dict[tuple[str, str], SamplingRule | None] = {}
    out: list[PlannedJudgment] = []
    for key, group in _keys(rows):
        statuses = set(group["status"])
        if not statuses <= set(TERMINAL_STATUSES) or "cancelled" in statuses or (group["verdict"] == "identical").any():
            continue
        first = group.iloc[0]
        version = (str(first["rubric_id"]), str(first["rubric_version"]))
        if version not in rules:
            rubric = plans.planned_rubric(session, project_id, *version)
            rules[version] = _sampling_rule(rubric, options, first["judge_params"]) if rubric else None
        rule = rules[version]
        if rule is None:
            continue
        done = group[group["status"] == "done"]
        values = done["score" if rule.kind == "single" else "preference"].dropna().astype(float).tolist()
        if not more_samples(rule, len(group), values):
            continue
        if rule.kind == "pairwise" and pairwise_room is not None:
            if pairwise_room <= 0:
                continue
            pairwise_room -= 1
        item_key, mode, system_a, system_b, order, rubric_id, aspect, judge = key
        out.append(
            PlannedJudgment(
                item_key,
                mode,
                system_a,
                system_b or None,
                order or None,
                rubric_id,
                str(first["rubric_version"]),
                aspect,
                judge,
                int(group["sample_index"].max()) + 1,
            )
        )
    return out


def _sample_usage(rows: pd.DataFrame, options: JudgeOptions) -> dict[str, Any]:
    counts = [len(group) for _, group in _keys(rows) if not (group["verdict"] == "identical").any()]
    use = usage(counts, options.max_sample_count)
    return {
        "judgments": use.judgments,
        "samples": use.samples,
        "fixed": use.fixed,
        "fixed_samples": use.judgments * use.fixed,
        "saving": round(use.saving, 4),
        "histogram": {str(k): v for k, v in use.histogram.items()},
    }


# -- adaptive pairing ----------------------------------------------------------------------------------------------


def _pairwise_room(session: Session, run: Run) -> int | None:
    """Pairwise calls the adaptive budget still allows (None: no budget)."""
    if run.config.get("pairing") != "adaptive":
        return None
    max_calls = AdaptiveOptions.model_validate(run.config.get("adaptive") or {}).max_calls
    return None if max_calls is None else max_calls - plans.pairwise_calls(session, run.id)


def _target(rows: pd.DataFrame) -> Target | None:
    pairwise = rows[rows["mode"] == "pairwise"]
    if pairwise.empty:
        return None
    first = pairwise.iloc[0]
    return Target(str(first["rubric_id"]), str(first["rubric_version"]), str(first["aspect"]), str(first["judge"]))


def _outcomes(rows: pd.DataFrame) -> list[Comparison]:
    pairwise = rows[(rows["mode"] == "pairwise") & (rows["status"] == "done") & rows["outcome"].notna()]
    if pairwise.empty:
        return []
    frame = pairwise.rename(columns={"item_key": F.ITEM_ID}).assign(**{F.STATUS: F.DONE})
    combined = combine_orders(
        frame[
            [F.ITEM_ID, F.MODE, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE, F.ORDER, F.STATUS, F.OUTCOME, F.PREFERENCE]
        ]
    )
    return [
        Comparison(str(item), str(a), str(b), SCORES[str(outcome)])
        for item, a, b, outcome in combined[[F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.OUTCOME]].itertuples(index=False)
    ]


def _planned(rows: pd.DataFrame) -> list[Planned]:
    pairwise = rows[rows["mode"] == "pairwise"]
    return list(
        {(str(i), str(a), str(b)) for i, a, b in pairwise[["item_key", "system_a", "system_b"]].itertuples(index=False)}
    )


def _plan_pairing(
    run: Run, rows: pd.DataFrame, options: JudgeOptions, candidates: dict[str, dict[str, str]], calls: int
) -> tuple[Plan, list[PlannedJudgment]]:
    adaptive = AdaptiveOptions.model_validate(run.config.get("adaptive") or {})
    pair_items = adaptive_pair_items(candidates)
    systems = sorted({s for pair in pair_items for s in pair})
    per_comparison = 2 * options.first_samples["pairwise"]
    plan = plan_step(
        systems,
        pair_items,
        _planned(rows),
        _outcomes(rows),
        planner_config(adaptive),
        calls_per_comparison=per_comparison,
        calls_used=calls,
    )
    if plan.stop is None and run.budget_exhausted_at is not None:
        plan = Plan([], "budget", plan.ranking, plan.gaps, plan.strengths, plan.intervals)
    target = _target(rows)
    if plan.stop is not None or target is None:
        return plan, []
    new: list[PlannedJudgment] = []
    for item, a, b in plan.comparisons:
        new += comparison_judgments(
            item, candidates[item], a, b, target, ["ab", "ba"], options.first_samples["pairwise"]
        )
    return plan, new


def _pairing_state(
    run: Run,
    rows: pd.DataFrame,
    plan: Plan,
    new: list[PlannedJudgment],
    options: JudgeOptions,
    candidates: dict[str, dict[str, str]],
    calls: int,
) -> dict[str, Any]:
    adaptive = AdaptiveOptions.model_validate(run.config.get("adaptive") or {})
    pair_items = adaptive_pair_items(candidates)
    fixed = options.samples if isinstance(options.samples, int) else options.max_sample_count
    planned = {(i, *canonical(a, b)) for i, a, b in _planned(rows)} | {
        (p.item_id, *canonical(p.system_a, p.system_b or "")) for p in new
    }
    counts: dict[str, int] = defaultdict(int)
    for _, a, b in planned:
        counts[a] += 1
        counts[b] += 1
    target = _target(rows)
    return {
        "stop": plan.stop,
        "stop_message": STOP_REASONS.get(plan.stop) if plan.stop else None,
        "confidence": adaptive.confidence,
        "top_k": adaptive.top_k,
        "max_calls": adaptive.max_calls,
        "target": None
        if target is None
        else {"rubric_id": target.rubric_id, "aspect": target.aspect, "judge": target.judge},
        "calls": calls + sum(1 for p in new if not p.identical),
        "round_robin_calls": round_robin_calls(pair_items, candidates) * fixed,
        "comparisons": len(planned),
        "round_robin_comparisons": sum(len(v) for v in pair_items.values()),
        "ranking": [
            {
                "system": name,
                "rank": rank,
                "strength": round(plan.strengths.get(name, 0.0), 6),
                "ci_low": round(plan.intervals[name][0], 6) if name in plan.intervals else None,
                "ci_high": round(plan.intervals[name][1], 6) if name in plan.intervals else None,
                "comparisons": counts.get(name, 0),
            }
            for rank, name in enumerate(plan.ranking, start=1)
        ],
        "gaps": [
            {
                "upper": g.upper,
                "lower": g.lower,
                "diff": round(g.diff, 6),
                "z": None if g.z == float("inf") else round(g.z, 4),
                "z_needed": None if g.z_needed == float("inf") else round(g.z_needed, 4),
                "separated": g.separated,
            }
            for g in plan.gaps
        ],
    }


# -- publishing and who steps ------------------------------------------------------------------------------------


def publish(settings: Settings, sessions: sessionmaker[Session], ids: Sequence[int]) -> None:
    """Send judgments a step stored (stamped as enqueued); if the broker is away, clear the stamp so the sweeper
    sends them at its next round."""
    if not ids:
        return
    try:
        queue.enqueue(settings, ids)
    except Exception as exc:
        log.warning("could not enqueue %d planned judgments now (%s); the sweeper will", len(ids), exc)
        with sessions() as session:
            plans.clear_enqueued(session, ids)
            session.commit()


def after_verdicts(settings: Settings, sessions: sessionmaker[Session], judgment_ids: Sequence[int]) -> int:
    """The worker's step after writing verdicts: advance the open adaptive runs they belong to and publish what
    the steps planned. Returns how many judgments were planned."""
    planned = 0
    for run_id in adaptive_runs_of(sessions, judgment_ids):
        step = advance(sessions, run_id, judgment_ids)
        publish(settings, sessions, step.new_ids)
        planned += len(step.new_ids)
    return planned


def sweep(settings: Settings, sessions: sessionmaker[Session]) -> int:
    """The sweeper's step: advance every open adaptive run that has nothing in flight (a step a killed worker never
    took). Returns how many judgments were planned."""
    planned = 0
    for run_id in open_runs(sessions):
        step = advance(sessions, run_id, idle_only=True)
        publish(settings, sessions, step.new_ids)
        planned += len(step.new_ids)
    return planned


def open_runs(sessions: sessionmaker[Session]) -> list[str]:
    with sessions() as session:
        return plans.open_runs(session)


def adaptive_runs_of(sessions: sessionmaker[Session], judgment_ids: Sequence[int]) -> list[str]:
    """The open adaptive runs the judgments belong to."""
    with sessions() as session:
        return plans.open_runs_of(session, judgment_ids)
