"""A project's earlier judgments as the estimate's calibration reads them (judge_api.estimate): what a judge
actually replied to a rubric's prompt, and the prompts its recorded input tokens were counted on.

Only judgments that succeeded on a call the provider answered count: status ``done``, at least one provider call,
not answered from the judge cache (a cache hit's tokens are the original call's, already counted once). "Recent"
is by run, then judgment: the project's most recent ``RECENT_RUNS`` runs (``ix_runs_project_id``) newest first,
each probed on ``ix_judgments_history`` (run, rubric, version, judge, id) for its matching judgments newest first,
until the bound. So the reads stay bounded whatever other projects hold (a walk over every project's judgments of a
rubric and judge took 0.3 s with 100,000 of another project's newer ones) and in a project with no history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Engine, false, func, literal, select, union_all

from judge_api.models import Judgment, Run, RunItem

RECENT_RUNS = 500  # the project's most recent runs the history is looked for in


@dataclass(frozen=True)
class Pair:
    """A rubric at one version answered by one judge (the judge string as runs store it)."""

    rubric_id: str
    rubric_version: str
    judge: str


@dataclass(frozen=True)
class Replies:
    judgments: int  # succeeded judgments counted, at most the window
    output_tokens: int  # their recorded output tokens, summed


@dataclass(frozen=True)
class AskedPrompt:
    """An earlier judgment answered in one call: what it asked (to render its prompt again) and its input tokens."""

    input_tokens: int
    item: dict[str, Any]
    aspect: str
    system_a: str
    system_b: str | None
    order: str | None


def _recent_runs(project_id: str) -> Any:
    return (
        select(Run.id, Run.created_at)
        .where(Run.project_id == project_id)
        .order_by(Run.created_at.desc())
        .limit(RECENT_RUNS)
        .subquery()
    )


def _succeeded(runs: Any, pair: Pair) -> list[ColumnElement[bool]]:
    return [
        Judgment.run_id == runs.c.id,
        Judgment.rubric_id == pair.rubric_id,
        Judgment.rubric_version == pair.rubric_version,
        Judgment.judge == pair.judge,
        Judgment.status == "done",
        Judgment.provider_calls > 0,
        Judgment.cached == false(),
    ]


def recent_replies(engine: Engine, project_id: str, pairs: Sequence[Pair], window: int) -> dict[Pair, Replies]:
    """Per pair, the output tokens of the project's most recent ``window`` succeeded judgments: one statement, one
    bounded aggregate per pair."""
    if not pairs:
        return {}
    parts = []
    for index, pair in enumerate(pairs):
        runs = _recent_runs(project_id)
        recent = (
            select(Judgment.output_tokens)
            .select_from(runs)
            .join(Judgment, Judgment.run_id == runs.c.id)
            .where(*_succeeded(runs, pair))
            .order_by(runs.c.created_at.desc(), Judgment.id.desc())
            .limit(window)
            .subquery()
        )
        parts.append(
            select(
                literal(index).label("pair"),
                func.count().label("n"),
                func.coalesce(func.sum(recent.c.output_tokens), 0).label("tokens"),
            ).select_from(recent)
        )
    statement = parts[0] if len(parts) == 1 else union_all(*parts)
    with engine.connect() as connection:
        rows = connection.execute(statement).all()
    return {pairs[int(row.pair)]: Replies(int(row.n), int(row.tokens)) for row in rows}


def recent_prompts(engine: Engine, project_id: str, pair: Pair, limit: int) -> list[AskedPrompt]:
    """The project's most recent ``limit`` succeeded judgments of ``pair`` asked in exactly one call (so their
    input tokens are one prompt's), with their items to render the prompts again."""
    runs = _recent_runs(project_id)
    statement = (
        select(
            Judgment.input_tokens,
            Judgment.aspect,
            Judgment.system_a,
            Judgment.system_b,
            Judgment.order,
            RunItem.payload,
        )
        .select_from(runs)
        .join(Judgment, Judgment.run_id == runs.c.id)
        .join(RunItem, RunItem.id == Judgment.item_pk)
        .where(*_succeeded(runs, pair), Judgment.provider_calls == 1, Judgment.input_tokens > 0)
        .order_by(runs.c.created_at.desc(), Judgment.id.desc())
        .limit(limit)
    )
    with engine.connect() as connection:
        return [
            AskedPrompt(int(row.input_tokens), row.payload, row.aspect, row.system_a, row.system_b, row.order)
            for row in connection.execute(statement)
        ]
