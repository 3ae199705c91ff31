"""A run's statistics: ``GET /v1/runs/{id}/report`` (scores, confidence intervals, agreement) and ``.../agreement``
(judges against the human ratings).

The statistics library (numpy, pandas, scipy.stats: about a second to import) is imported with this module, when the
API starts, and the app's start-up builds one small report (``stats.report.warm_up``): no request pays for either.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Literal

import pandas as pd
from fastapi import APIRouter, Depends, HTTPException, Query, Response
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.config import Settings, get_settings
from judge_api.deps import app_settings, frame_readable, get_session, require, run_or_404
from judge_api.models import utcnow
from judge_api.planning import panel_settings
from judge_api.reference_metrics import LEXICAL_METRICS, REFERENCE_JUDGE
from judge_api.reference_tokens import tokenisation_section
from judge_api.stats import frames as F
from judge_api.stats.bootstrap import REPORT_N_BOOT
from judge_api.stats.calibrated import Design
from judge_api.stats.parts import RunParts
from judge_api.stats.report import REPORT_VERSION, build_report, calibrated_report

router = APIRouter(tags=["reports"])

CI_LEVEL = Query(0.95, gt=0.5, lt=1.0, description="the confidence level of every interval, e.g. 0.9 or 0.99")
HUMAN_PREFIX = Query(
    None, max_length=100, description="only human raters whose id starts with this (MT-Bench: 'expert_')"
)
MAX_SEED = 2**32 - 1
PANEL_JUDGES = Query(
    None, max_length=10, description="the panel's members for this report (default: the run's panel setting)"
)
PANEL_AGGREGATE = Query(None, description="the panel's aggregate of single scores (default: the run's setting)")
PANEL_QUORUM = Query(
    None, ge=1, le=10, description="members a unit needs for a panel verdict (default: the run's setting, a majority)"
)


@router.get("/v1/runs/{run_id}/report")
def report(
    run_id: str,
    n_boot: int = Query(REPORT_N_BOOT, ge=0, le=20000),
    seed: int = Query(0, ge=0, le=MAX_SEED),
    ci: float = CI_LEVEL,
    human_prefix: str | None = HUMAN_PREFIX,
    panel_judge: list[str] | None = PANEL_JUDGES,
    panel_aggregate: Literal["mean", "median"] | None = PANEL_AGGREGATE,
    panel_quorum: int | None = PANEL_QUORUM,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> Response:
    """The run's report. Computed once per state of the run and query (``repository.report_cache``: any write to
    the run's judgments, ratings or label queue makes the next call compute it again); ``computed_at`` says when,
    ``cached`` whether this answer was kept from an earlier call."""
    run = run_or_404(session, run_id, principal)
    # before the kept reports too: a run over the limit is refused alike by every reader (review r56b)
    frame_readable(run, app)
    panel = panel_settings(run.config, panel_judge, panel_aggregate, panel_quorum)
    params = {"n_boot": n_boot, "seed": seed, "ci": ci, "human_prefix": human_prefix, "panel": panel}
    settings = get_settings()
    key = repository.params_key(run.project_id, {**params, "report_version": REPORT_VERSION})
    hit: repository.CachedReport | None = None
    state: str | None = None
    if settings.report_cache:
        running = run.finished_at is None  # still judging (a monitor's run always is)
        hit, state = repository.cached_report(
            session,
            run_id,
            key,
            fresh_s=settings.report_fresh_s if running else 0.0,
            settle_s=settings.report_settle_s,
        )
    was_running = run.finished_at is None
    summary: Any = None
    if hit is not None and was_running:
        summary = _summary(session, run)  # stamps finished_at when the run has just finished
        if run.finished_at is not None:
            hit = None  # finished now: computed on every verdict, never a report kept while it ran (review r39f)
    recompute = hit is not None and hit.provisional and _claim(run_id, key)
    try:
        return _answer(session, run, key, params, hit if not recompute else None, state, summary, was_running)
    finally:
        if recompute:
            _release(run_id, key)


_RECOMPUTING: set[tuple[str, str]] = set()
_RECOMPUTING_LOCK = threading.Lock()


def _claim(run_id: str, key: str) -> bool:
    """Whether this request computes a provisional report again (True), or another request of this process is
    doing it and this one is served the provisional entry meanwhile (False): one computation of a million judgments
    per process, not one per reader arriving in the meantime (review r39f)."""
    with _RECOMPUTING_LOCK:
        if (run_id, key) in _RECOMPUTING:
            return False
        _RECOMPUTING.add((run_id, key))
        return True


def _release(run_id: str, key: str) -> None:
    with _RECOMPUTING_LOCK:
        _RECOMPUTING.discard((run_id, key))


def _answer(
    session: Session,
    run: Any,
    key: str,
    params: dict[str, Any],
    hit: repository.CachedReport | None,
    state: str | None,
    summary: Any,
    was_running: bool,
) -> Response:
    settings = get_settings()
    run_id = str(run.id)
    if hit is not None:
        body, computed_at, cached = hit.body, hit.computed_at, True
        kept = json.loads(hit.body)
        if run.finished_at is None or kept["run"].get("finished_at") is None:
            # still judging: the kept report with the run's summary of now (a finished run's summary is part of the
            # state the entry was computed on, and is served as it was)
            kept["run"] = summary if summary is not None else _summary(session, run)
            body = json.dumps(kept, allow_nan=False)
    else:
        if summary is None:
            summary = _summary(session, run)  # stamps finished_at when the run has just finished: part of the state
        # the stamp kept now (whoever made the summary), not after the build: SQLite's writers wait for no report,
        # and the frame is read outside a write transaction (on SQLite by another process,
        # repository.frame_columns.read_sqlite_arrow)
        session.commit()
        if settings.report_cache and (state is None or (was_running and run.finished_at is not None)):
            state = repository.run_state(session, run_id)  # before the frames: a write meanwhile is seen next time
        computed_at = utcnow()
        result = _build(session, run_id, run.config, params)
        body = json.dumps({"run": summary, **result}, allow_nan=False)
        cached = False
        if state is not None:
            repository.store_report(session, run_id, run.project_id, key, state, body, computed_at)
    session.commit()  # keep the finished_at the summary stamped, as GET /v1/runs/{id} does: a report is stable
    tail = json.dumps({"computed_at": computed_at.isoformat() + "Z", "cached": cached})[1:]
    return Response(f"{body[:-1]}, {tail}", media_type="application/json")


def _summary(session: Session, run: Any) -> Any:
    """The run's summary as GET /v1/runs/{id} gives it (it stamps ``finished_at`` when the run has finished)."""
    keep = get_settings().report_cache
    return json.loads(repository.summarize_runs(session, [run], keep_counts=keep)[0].model_dump_json())


def _build(session: Session, run_id: str, config: dict[str, Any] | None, params: dict[str, Any]) -> dict[str, Any]:
    """The report of the run's judgments read in parts (``stats.parts``): the API holds the rows' report columns and
    sums of the rest, never every column of every row (issue 39)."""
    ratings = repository.ratings_frame(session, run_id)
    run = RunParts()
    versions: set[tuple[Any, Any]] = set()
    for part in repository.judgments_parts(session, run_id, readers=get_settings().frame_readers):
        versions |= _lexical_versions(part)  # a column the report does not keep per row
        run.add(part)
        del part
    reference = _reference_tokens(session, run_id, config, versions)
    sums = run.sums
    return build_report(
        [run.frame()],  # the report's only hold on the rows: it lets them go once it has read them
        ratings if len(ratings) else None,
        n_boot=params["n_boot"],
        seed=params["seed"],
        ci=params["ci"],
        human_prefix=params["human_prefix"],
        panel=params["panel"],
        fact_labels=repository.fact_labels_frame(session, run_id),
        memory_audit=repository.memory_audit_frame(session, run_id),
        reference_metrics=reference,
        label_design=label_design(session, run_id),
        sums=sums,
    )


def label_design(session: Session, run_id: str) -> Design | None:
    """The run's label queue as the calibrated estimate's sampling design (None without a queue)."""
    queue = repository.label_queue(session, run_id)
    if queue is None:
        return None
    return Design(queue.strategy, frozenset(item for item, _ in queue.drawn), dict(queue.inclusion))


def _lexical_versions(judgments: pd.DataFrame) -> set[tuple[Any, Any]]:
    """(item, rubric version) of the F1 / BLEU judgments among these rows."""
    lexical = judgments[(judgments[F.JUDGE] == REFERENCE_JUDGE) & judgments[F.ASPECT].isin(LEXICAL_METRICS)]
    return set(zip(lexical[F.ITEM_ID], lexical[F.RUBRIC_VERSION], strict=True))


def _reference_tokens(
    session: Session, run_id: str, config: dict[str, Any] | None, versions: set[tuple[Any, Any]]
) -> dict[str, Any] | None:
    """The report's ``reference_metrics`` section: the tokens of the run's F1 / BLEU judgments, read from their
    versions (``_lexical_versions``), against the script of the items' references."""
    if not versions:
        return None
    # a run from before the option existed was scored with whitespace tokens (its versions say so as well)
    tokenize = (config or {}).get("tokenize", "whitespace")
    return tokenisation_section(versions, repository.item_references(session, run_id), tokenize)


@router.get("/v1/runs/{run_id}/agreement")
def agreement(
    run_id: str,
    human_prefix: str | None = HUMAN_PREFIX,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    run = run_or_404(session, run_id, principal)
    frame_readable(run, app)
    ratings = repository.ratings_frame(session, run_id)
    if not len(ratings):
        raise HTTPException(409, "this run has no human ratings yet: POST /v1/runs/{id}/human-ratings first")
    result = build_report(
        repository.judgments_frame(session, run_id, readers=get_settings().frame_readers),
        ratings,
        n_boot=200,
        human_prefix=human_prefix,
        panel=panel_settings(run.config),
    )
    return {"run_id": run_id, "n_ratings": len(ratings), "agreement": result.get("agreement")}


@router.get("/v1/runs/{run_id}/calibrated")
def calibrated(
    run_id: str,
    ci: float = CI_LEVEL,
    human_prefix: str | None = HUMAN_PREFIX,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    """The judge's numbers on the humans' scale (PPI++): the report's ``calibrated`` section at level ``ci``."""
    run = run_or_404(session, run_id, principal)
    frame_readable(run, app)
    ratings = repository.ratings_frame(session, run_id)
    section = calibrated_report(
        repository.judgments_frame(session, run_id, readers=get_settings().frame_readers),
        ratings if len(ratings) else None,
        ci=ci,
        human_prefix=human_prefix,
        panel=panel_settings(run.config),
        label_design=label_design(session, run_id),
    )
    return {"run_id": run_id, "n_ratings": len(ratings), "calibrated": section}
