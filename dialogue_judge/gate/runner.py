"""The gate's loop: ``run_gate`` checks the config, reads both sides (``inputs``), builds one two-system request,
has a backend (``backends``) judge it batch by batch while ``GateDecider`` (``decision``) watches each look, and
returns a ``GateResult``; ``run_cli`` is what ``dialogue-judge gate`` does with it (reports, exit code).

When both sides are run ids and those runs already hold single-mode verdicts for the rubric, judge and aspects, the
gate pairs them per item and runs the fixed-sample test at the full alpha without calling the judge.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dialogue_judge.gate import stats as gs
from dialogue_judge.gate.backends import ApiBackend, Backend, LocalBackend
from dialogue_judge.gate.calibrate import apply_calibration, calibrate_aspect, side_labels
from dialogue_judge.gate.config import (
    DEFAULT_MAX_INCREASE,
    DEFAULT_RUBRIC,
    FACT_RUBRIC,
    GateConfig,
    check_config,
    fact_metric,
    judges_of,
)
from dialogue_judge.gate.decision import GateDecider, Look, conclude
from dialogue_judge.gate.inputs import (
    BASELINE,
    CANDIDATE,
    GateInputError,
    Side,
    is_run_id,
    load_items,
    load_side,
    merge_sides,
    side_from_records,
    validate_items,
)
from dialogue_judge.gate.reports import write_outputs
from dialogue_judge.gate.result import CallStats, GateResult


def _side(spec: Any, label: str, system: str | None, backend: Backend) -> Side:
    if is_run_id(spec):
        items = backend.run_items(spec)
        chosen = system or _only_system(items, spec, label)
        side = side_from_records(items, f"{label} run {spec}", chosen)
        side.run_id, side.system = spec, chosen
        return side
    return load_side(spec, label, system)


def _only_system(items: list[dict[str, Any]], run_id: str, label: str) -> str:
    systems = sorted({s for item in items for s in item.get("candidates", {})})
    if len(systems) != 1:
        raise GateInputError(
            f"{label} run {run_id} has the systems {', '.join(systems)}; name one with --{label}-system"
        )
    return systems[0]


def _reuse_rows(
    backend: Backend, baseline: Side, candidate: Side, judge_keys: list[str], rubric: str, aspects: list[str]
) -> list[dict[str, Any]] | None:
    """Existing single-mode verdicts of both runs, relabelled baseline/candidate; None when incomplete."""
    assert baseline.run_id and candidate.run_id
    out: list[dict[str, Any]] = []
    for side, run_id, label in ((baseline, baseline.run_id, BASELINE), (candidate, candidate.run_id, CANDIDATE)):
        rows = [
            dict(r)
            for r in backend.run_judgments(run_id)
            if r["mode"] == "single"
            and r["judge"] in judge_keys
            and r["rubric_id"] == rubric
            and r["aspect"] in aspects
            and r["system_a"] == side.system
        ]
        wanted = {(i, a, j) for i in side.responses for a in aspects for j in judge_keys}
        if {(r["item_id"], r["aspect"], r["judge"]) for r in rows} != wanted:
            return None
        for row in rows:
            row["system_a"] = label
        out.extend(rows)
    return out


def metric_rows(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Judgment rows of a fact-check rubric as rows of ``metric``: the aspect is the metric's name and the score the
    figure the parser stored in ``details`` (None when the judgment is not done or has no such figure)."""
    out = []
    for row in rows:
        value = (row.get("details") or {}).get(metric) if row.get("status") == "done" else None
        out.append({**row, "aspect": metric, "score": None if value is None else float(value)})
    return out


def run_gate(config: GateConfig) -> GateResult:
    """Run the gate; never raises for bad input or judge trouble (those give ``status == "error"``)."""
    started = time.monotonic()
    result = GateResult(
        status="error",
        headline="",
        mode=config.mode,
        alpha=config.alpha,
        sequential=config.sequential,
        seed=config.seed,
        judge=" + ".join(judges_of(config)) or "reference",
        baseline=_label(config.baseline),
        candidate=_label(config.candidate),
        backend="api" if config.api else "standalone",
        budget_usd=config.budget_usd,
    )
    backend: Backend | None = None
    try:
        check_config(config)
        backend = ApiBackend(config) if config.api else LocalBackend(config)
        _run(config, backend, result)
    except GateInputError as exc:
        result.status, result.headline = "error", f"ERROR: {exc}"
    except Exception as exc:  # never a silent pass: anything unexpected is exit 2 with the reason
        result.status, result.headline = "error", f"ERROR: the gate could not run: {type(exc).__name__}: {exc}"
    finally:
        if backend is not None:
            backend.close()
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _label(spec: Any) -> str:
    if isinstance(spec, (str, Path)):
        return str(spec)
    return "<in-memory responses>"


def _run(config: GateConfig, backend: Backend, result: GateResult) -> None:
    from judge_api.judges import JudgeSpecError, parse_judge
    from judge_api.planning import PlanError
    from judge_api.schemas import JudgeOptions, PanelOptions, RunCreate

    metric = fact_metric(config)
    if config.metrics and metric is None:
        _run_metrics(config, backend, result)
        return
    imported = False
    try:
        judge_keys = [parse_judge(j).key for j in judges_of(config)]
    except JudgeSpecError as exc:
        if not (is_run_id(config.baseline) and is_run_id(config.candidate)):
            raise GateInputError(str(exc)) from None
        # not a judge this service calls: an imported judge, whose verdicts the two runs must already hold
        judge_keys, imported = judges_of(config), True
    result.judge = (
        judge_keys[0] if len(judge_keys) == 1 else f"panel ({config.panel_aggregate} of {', '.join(judge_keys)})"
    )
    rubric = backend.rubric(config.rubric or (FACT_RUBRIC if metric else DEFAULT_RUBRIC[config.mode]))
    result.rubric = rubric.id
    if metric and not rubric.facts:
        raise GateInputError(
            f"--metric {metric} needs a fact-check rubric (kind facts, e.g. --rubric {FACT_RUBRIC}); "
            f"{rubric.id!r} is a {rubric.kind} rubric"
        )
    if rubric.kind != config.mode:
        raise GateInputError(
            f"rubric {rubric.id!r} is a {rubric.kind} rubric; use --mode {rubric.kind} or a {config.mode} rubric"
        )
    aspects = list(
        dict.fromkeys(config.aspects or (["consistency"] if "consistency" in rubric.aspects else rubric.aspects))
    )
    unknown = [a for a in aspects if a not in rubric.aspects]
    if unknown:
        raise GateInputError(
            f"rubric {rubric.id!r} has no aspect {', '.join(map(repr, unknown))} (has: {', '.join(rubric.aspects)})"
        )
    gated = [metric] if metric else aspects  # what the decider tests (fact-check: the figure, not the aspect)
    judge_scale = (1.0, 100.0)
    if metric:
        scale = gs.Scale("single", 0.0, 1.0)
        threshold = config.max_drop if config.max_drop is not None else DEFAULT_MAX_INCREASE
        result.threshold_name = "max_increase"
    elif config.mode == "single":
        low, high = rubric.scale or (1.0, 100.0)
        judge_scale = (float(low), float(high))
        scale = gs.Scale("single", float(low), float(high))
        threshold = config.max_drop if config.max_drop is not None else gs.default_max_drop(low, high)
        result.threshold_name = "max_drop"
    else:
        scale = gs.Scale("pairwise")
        threshold = config.max_loss_rate
        result.threshold_name = "max_loss_rate"
    result.threshold = threshold
    result.calibrate = config.calibrate
    # a calibrated decision needs the judge's scores on every item: no early stop
    sequential = config.sequential and config.calibrate is None

    baseline = _side(config.baseline, "baseline", config.baseline_system, backend)
    candidate = _side(config.candidate, "candidate", config.candidate_system, backend)
    items = load_items(config.items) if config.items is not None else None
    merged = merge_sides(baseline, candidate, items)
    responses = {m["id"]: dict(m["candidates"]) for m in merged}
    result.n_items = len(merged)

    reused = None
    if imported and config.mode != "single":
        raise GateInputError(
            f"judge {', '.join(judge_keys)} is not a judge this service calls; an imported judge's stored scores "
            "are compared with --mode single"
        )
    if config.mode == "single" and baseline.run_id and candidate.run_id:
        reused = _reuse_rows(backend, baseline, candidate, judge_keys, rubric.id, aspects)
        if reused is None and imported:
            raise GateInputError(
                f"the runs hold no complete verdicts of {', '.join(judge_keys)} for rubric {rubric.id!r} and "
                f"{', '.join(aspects)} (an imported judge is never called: import its verdicts on both runs with "
                f"--rubric {rubric.id})"
            )
        if reused is not None and metric:
            reused = metric_rows(reused, metric)
        if reused is None:
            result.notes.append(
                "the runs hold no complete single-mode verdicts for this rubric, judge and aspect: "
                "their responses were judged anew"
            )

    order_ids = sorted(responses)
    if reused is not None:
        from dialogue_judge.gate.standalone import seeded_order

        decider = GateDecider(
            mode=config.mode,
            aspects=gated,
            threshold=threshold,
            alpha=config.alpha,
            scale=scale,
            sequential=False,
            max_failed=config.max_failed,
            panel_aggregate=config.panel_aggregate,
            higher_is_worse=metric is not None,
            n_judges=len(judges_of(config)),
        )
        decider.look(Look(reused, seeded_order(order_ids, config.seed), 1, 1, True))
        asked, _, _ = decider.counts(reused)
        result.sequential = False
        result.calls = CallStats(
            planned=len(reused),
            judged=asked,
            run_ids=[baseline.run_id or "", candidate.run_id or ""],
            looks_done=1,
            looks_planned=1,
            items_judged=len(order_ids),
            reused=True,
        )
        result.notes.append("verdicts reused from the two runs: no judge call; fixed-sample test at the full alpha")
        conclude(result, decider, responses, config.worst)
        _calibrate(config, backend, result, decider, baseline, candidate, judge_scale)
        return

    validated = validate_items(merged)
    try:
        request = RunCreate(
            name=config.name or f"gate: {result.candidate} vs {result.baseline}"[:200],
            items=validated,
            rubrics=[rubric.id],
            judges=judges_of(config),
            mode=[config.mode],  # type: ignore[list-item]  # checked in check_config
            aspects=aspects,
            pairing="baseline" if config.mode == "pairwise" else "all",
            baseline=BASELINE if config.mode == "pairwise" else None,
            orders="both",
            options=JudgeOptions(
                temperature=config.temperature,
                max_tokens=config.max_tokens,
                structured_output=config.structured_output,
                reask=config.reask,
            ),
            budget_usd=config.budget_usd,
            metrics=[],  # the judge gate judges; reference metrics are what --metric gates on
            panel=PanelOptions(aggregate=config.panel_aggregate),  # type: ignore[arg-type]  # checked in check_config
            meta={"gate": {"baseline": result.baseline, "candidate": result.candidate, "seed": config.seed}},
        )
    except Exception as exc:
        raise GateInputError(f"the request is not valid: {exc}") from None
    if config.sequential and not sequential:
        result.notes.append("calibrate: human judges every item (no early stop): the calibration needs them all")
    looks = gs.look_schedule(len(validated), config.batch, sequential=sequential)
    decider = GateDecider(
        mode=config.mode,
        aspects=gated,
        threshold=threshold,
        alpha=config.alpha,
        scale=scale,
        sequential=sequential,
        max_failed=config.max_failed,
        panel_aggregate=config.panel_aggregate,
        higher_is_worse=metric is not None,
        n_judges=len(judges_of(config)),
    )

    def on_look(look: Look) -> bool:
        if metric:  # the judged rows become rows of the figure the gate tests
            look = Look(
                metric_rows(look.rows, metric),
                look.item_ids,
                look.look,
                look.n_looks,
                look.final,
                look.budget_exhausted,
            )
        return decider.look(look)

    per_item = (
        2 * len(aspects) * len(judge_keys)
    )  # two systems (single) or two presentation orders (pairwise) per aspect
    abort_after = math.floor(config.max_failed * per_item * len(validated))
    try:
        result.calls = backend.judge(request, looks, on_look, abort_after)
    except PlanError as exc:
        raise GateInputError(f"{exc.field}: {exc.message}") from None
    conclude(result, decider, responses, config.worst)
    _calibrate(config, backend, result, decider, baseline, candidate, judge_scale)
    if result.calls.saved:
        share = 100.0 * result.calls.saved / max(result.calls.planned, 1)
        result.notes.append(
            f"the early stop saved {result.calls.saved} of {result.calls.planned} judge calls ({share:.0f}%)"
        )


def _calibrate(
    config: GateConfig,
    backend: Backend,
    result: GateResult,
    decider: GateDecider,
    baseline: Side,
    candidate: Side,
    judge_scale: tuple[float, float],
) -> None:
    """``calibrate: human``: decide on the calibrated drop (``gate.calibrate``) from the runs' human labels."""
    if config.calibrate is None:
        return
    ratings = {
        label: backend.run_ratings(side.run_id) if side.run_id else None
        for label, side in ((BASELINE, baseline), (CANDIDATE, candidate))
    }
    level = 1.0 - config.alpha / max(len(decider.aspects), 1)
    queues = {
        label: backend.run_label_queue(side.run_id) if side.run_id else None
        for label, side in ((BASELINE, baseline), (CANDIDATE, candidate))
    }
    reports = {a.aspect: a for a in result.aspects}
    entries = [
        calibrate_aspect(
            aspect,
            decider.scores(decider.rows, aspect),
            side_labels(ratings[BASELINE], baseline.system, aspect, queues[BASELINE]),
            side_labels(ratings[CANDIDATE], candidate.system, aspect, queues[CANDIDATE]),
            judge_scale=judge_scale,
            threshold=decider.threshold,
            level=level,
            min_labels=config.calibrate_min_labels,
            judge_only=reports[aspect],
        )
        for aspect in decider.aspects
    ]
    apply_calibration(result, entries, config.calibrate_missing)


def _run_metrics(config: GateConfig, backend: Backend, result: GateResult) -> None:
    """Gate on reference metrics: each side's responses scored against the items' references here (the same
    definitions the workers use), a fixed-sample test at the full alpha on the 0..1 scale; no judge call."""
    from dialogue_judge.gate.standalone import seeded_order
    from judge_api.config import get_settings
    from judge_api.reference_metrics import REFERENCE_JUDGE, REFERENCE_RUBRIC, lexical_metrics

    metrics = list(dict.fromkeys(config.metrics or []))
    result.judge, result.rubric = REFERENCE_JUDGE, REFERENCE_RUBRIC
    if config.mode != "single":
        raise GateInputError("--metric compares scores: use it with --mode single")
    baseline = _side(config.baseline, "baseline", config.baseline_system, backend)
    candidate = _side(config.candidate, "candidate", config.candidate_system, backend)
    items = load_items(config.items) if config.items is not None else None
    merged = merge_sides(baseline, candidate, items)
    without = [m["id"] for m in merged if not str(m.get("reference") or "").strip()]
    if without:
        listed = ", ".join(without[:10]) + (" ..." if len(without) > 10 else "")
        raise GateInputError(f"--metric needs a reference in every item: {len(without)} have none ({listed})")
    responses = {m["id"]: dict(m["candidates"]) for m in merged}
    result.n_items = len(merged)
    # 0.05 of the 0..1 range: the share of the scale default_max_drop gives a 1-100 judge scale
    threshold = config.max_drop if config.max_drop is not None else 0.05
    result.threshold, result.threshold_name = threshold, "max_drop"
    rows: list[dict[str, Any]] = []
    for item in merged:
        for system, text in item["candidates"].items():
            values = lexical_metrics(text, item["reference"], tuple(metrics))
            if "bertscore" in metrics:
                from workers.bertscore import BertScoreUnavailable, bertscore_f1

                settings = get_settings()
                try:
                    values["bertscore"] = bertscore_f1(
                        [text], [item["reference"]], settings.bertscore_model, settings.bertscore_layers
                    )[0]
                except BertScoreUnavailable as exc:
                    raise GateInputError(str(exc)) from None
            rows += [
                {
                    "item_id": item["id"],
                    "mode": "single",
                    "system_a": system,
                    "system_b": None,
                    "aspect": metric,
                    "judge": REFERENCE_JUDGE,
                    "status": "done",
                    "score": value,
                    "order": None,
                }
                for metric, value in values.items()
            ]
    decider = GateDecider(
        mode="single",
        aspects=metrics,
        threshold=threshold,
        alpha=config.alpha,
        scale=gs.Scale("single", 0.0, 1.0),
        sequential=False,
        max_failed=config.max_failed,
    )
    order_ids = sorted(responses)
    decider.look(Look(rows, seeded_order(order_ids, config.seed), 1, 1, True))
    result.sequential = False
    result.calls = CallStats(planned=0, judged=0, looks_done=1, looks_planned=1, items_judged=len(order_ids))
    result.notes.append(
        "reference metrics computed here (ParlAI's F1 / BLEU definitions): no judge call; fixed-sample test at the "
        "full alpha"
    )
    conclude(result, decider, responses, config.worst)


# -- command-line helpers -------------------------------------------------------------------------------------------


def run_cli(
    config: GateConfig,
    *,
    markdown: Path | None = None,
    junit: Path | None = None,
    json_path: Path | None = None,
    echo: Callable[[str], None] = print,
    echo_err: Callable[[str], None] | None = None,
) -> int:
    """What ``dialogue-judge gate`` does: run, write the reports, print the Markdown summary; the exit code."""
    result = run_gate(config)
    problems = write_outputs(result, markdown=markdown, junit=junit, json_path=json_path)
    echo(result.markdown())
    err = echo_err or (lambda text: print(text, file=sys.stderr))
    for problem in problems:
        err(f"warning: {problem}")
    err(result.headline)
    return result.exit_code


def parse_aspects(values: Sequence[str] | None) -> list[str] | None:
    """``--aspect a --aspect b`` or ``--aspect a,b``."""
    if not values:
        return None
    out = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return out or None
