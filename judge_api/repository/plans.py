"""Storage of adaptive runs' planning steps (``judge_api.adaptive.steps``): what a step reads of a run, and its two
writes - new judgments inserted by their dedup keys (a judgment already stored is never inserted again) and the
planning round taken by compare-and-set (of two steps that saw the same state, one writes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pandas as pd
from sqlalchemy import Table, func, or_, select, update
from sqlalchemy.orm import Session

from judge_api.models import TERMINAL_STATUSES, Judgment, Run, RunItem, utcnow
from judge_api.planning import PlannedJudgment
from judge_api.repository.rows import INSERT_CHUNK, judgment_row
from judge_api.repository.rubric_snapshots import rubric_snapshot
from judge_api.repository.sql import insert_ignoring
from judge_api.rubrics import Rubric, get_registry

STEP_COLUMNS = (
    "id",
    "item_key",
    "mode",
    "system_a",
    "system_b",
    "order",
    "rubric_id",
    "rubric_version",
    "aspect",
    "judge",
    "judge_params",
    "sample_index",
    "status",
    "score",
    "preference",
    "outcome",
    "verdict",
)


def in_flight(session: Session, run_id: str) -> int:
    """The run's judgments that are pending or running."""
    return int(
        session.scalar(
            select(func.count(Judgment.id)).where(
                Judgment.run_id == run_id, Judgment.status.not_in(list(TERMINAL_STATUSES))
            )
        )
        or 0
    )


def step_rows(session: Session, run_id: str, touched: Sequence[int] | None = None) -> pd.DataFrame:
    """The run's judgments (``STEP_COLUMNS``); with ``touched``, only those of the items these judgments are of."""
    table = cast(Table, Judgment.__table__)
    query = select(*[table.c[c] for c in STEP_COLUMNS]).where(table.c.run_id == run_id)
    if touched is not None:
        items = select(table.c.item_key).where(table.c.id.in_(list(touched))).scalar_subquery()
        query = query.where(table.c.item_key.in_(items))
    return pd.DataFrame(session.execute(query.order_by(table.c.id)).all(), columns=list(STEP_COLUMNS))


def pairwise_calls(session: Session, run_id: str) -> int:
    """Pairwise judgments stored for the run that ask the judge (identical responses do not)."""
    return int(
        session.scalar(
            select(func.count(Judgment.id)).where(
                Judgment.run_id == run_id,
                Judgment.mode == "pairwise",
                or_(Judgment.verdict.is_(None), Judgment.verdict != "identical"),
            )
        )
        or 0
    )


def candidates(session: Session, run_id: str) -> dict[str, dict[str, str]]:
    """item -> system -> response of every item of the run."""
    rows = session.execute(select(RunItem.item_key, RunItem.payload).where(RunItem.run_id == run_id)).all()
    return {key: dict(payload.get("candidates") or {}) for key, payload in rows}


def planned_rubric(session: Session, project_id: str, rubric_id: str, version: str) -> Rubric | None:
    """The rubric version the run was planned with: from the folders when they still hold it, else the project's
    snapshot of it."""
    registry = get_registry()
    if rubric_id in registry and registry.get(rubric_id).version == version:
        return registry.get(rubric_id)
    return rubric_snapshot(session, project_id, rubric_id, version)


def insert_planned(session: Session, run: Run, planned: Sequence[PlannedJudgment]) -> list[int]:
    """Insert the planned judgments not stored yet (by dedup key), stamped as enqueued (the caller publishes them
    after the commit); returns their ids and adds them to the run's count, in the caller's transaction."""
    if not planned:
        return []
    keys = sorted({p.item_id for p in planned})
    items = session.execute(
        select(RunItem.item_key, RunItem.id, RunItem.payload).where(
            RunItem.run_id == run.id, RunItem.item_key.in_(keys)
        )
    ).all()
    item_pks = {key: pk for key, pk, _ in items}
    texts = {key: payload.get("candidates") or {} for key, _, payload in items}
    params = dict(run.config.get("options") or {})
    if run.config.get("outcome_map"):
        params["outcome_map"] = dict(run.config["outcome_map"])
    now = utcnow()
    table = cast(Table, Judgment.__table__)
    statement = insert_ignoring(session.get_bind(), table, ["dedup_key"]).returning(table.c.id)
    ids: list[int] = []
    for start in range(0, len(planned), INSERT_CHUNK):  # the rows of one insert at a time (issue 39)
        rows = [
            judgment_row(run.id, p, item_pks[p.item_id], texts[p.item_id], params, now, now)
            for p in planned[start : start + INSERT_CHUNK]
        ]
        ids += [int(i) for i in session.scalars(statement, rows)]
    if ids:
        session.execute(update(Run).where(Run.id == run.id).values(n_judgments=Run.n_judgments + len(ids)))
    return ids


def take_round(session: Session, run_id: str, round_: int, state: dict[str, Any], still_open: bool) -> bool:
    """Compare-and-set: move the run from planning round ``round_`` to the next with ``state``; False when another
    step took the round first (nothing written)."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.plan_round == round_)
        .values(plan_round=round_ + 1, plan_state=state, plan_open=still_open)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def clear_enqueued(session: Session, judgment_ids: Sequence[int]) -> None:
    """The judgments could not be published: the sweeper sends them at its next round."""
    session.execute(update(Judgment).where(Judgment.id.in_(list(judgment_ids))).values(enqueued_at=None))


def open_runs(session: Session) -> list[str]:
    """Runs whose planning is not finished, oldest first."""
    return list(session.scalars(select(Run.id).where(Run.plan_open.is_(True)).order_by(Run.created_at)))


def open_runs_of(session: Session, judgment_ids: Sequence[int]) -> list[str]:
    """The runs of these judgments whose planning is not finished."""
    if not judgment_ids:
        return []
    runs = select(Judgment.run_id).where(Judgment.id.in_(list(judgment_ids))).distinct().scalar_subquery()
    return list(session.scalars(select(Run.id).where(Run.id.in_(runs), Run.plan_open.is_(True))))
