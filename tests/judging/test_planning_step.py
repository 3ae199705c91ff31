"""The worker's planning step after a batch of verdicts (workers.celery_app): it runs for the judgments of a run
whose planning is open (an adaptive run) and costs nothing - no query - for any other run."""

from __future__ import annotations

from typing import Any

import pytest

from judge_api.adaptive import steps
from judge_api.db import session_scope
from judge_api.models import Run
from workers import celery_app, runtime

from .harness import Harness, dialogue_item


def plain_request(harness: Harness) -> dict[str, Any]:
    return {
        "items": [dialogue_item(f"i{n}", {"a": "<<q=70>> fine", "b": "<<q=40>> meh"}) for n in range(3)],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "mode": ["single"],
        "aspects": ["consistency"],
    }


def adaptive_request(harness: Harness) -> dict[str, Any]:
    systems = {"s1": "<<q=90>> best", "s2": "<<q=60>> middle", "s3": "<<q=20>> worst"}
    return {
        "items": [dialogue_item(f"i{n}", systems) for n in range(4)],
        "rubrics": ["rsum-pairwise"],
        "judges": [harness.judge("openai-compatible")],
        "mode": ["pairwise"],
        "pairing": "adaptive",
        "adaptive": {"batch": 4},
    }


def plan_round(run_id: str) -> int:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.plan_round


@pytest.mark.parametrize(("adaptive", "steps_taken"), [(False, 0), (True, 1)])
def test_the_planning_step_runs_only_for_runs_whose_planning_is_open(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, adaptive: bool, steps_taken: int
) -> None:
    run_id = harness.create(**(adaptive_request(harness) if adaptive else plain_request(harness)))
    ids = harness.pending(run_id)
    assert ids
    round_before = plan_round(run_id)
    taken: list[list[int]] = []
    real_step = steps.after_verdicts

    def after_verdicts(settings: Any, sessions: Any, judgment_ids: Any) -> int:
        taken.append(list(judgment_ids))
        return real_step(settings, sessions, judgment_ids)

    monkeypatch.setattr(steps, "after_verdicts", after_verdicts)
    monkeypatch.setattr(runtime, "engine", lambda: harness.engine)
    counts = celery_app.judge_batch(ids)  # the task's body, run here
    assert sum(counts.values()) == len(ids)
    assert len(taken) == steps_taken
    if adaptive:
        assert taken == [ids]
        assert plan_round(run_id) > round_before  # the step was taken: the run's planning moved on
    assert {r.status for r in harness.rows(run_id) if r.id in ids} == {"done"}


def test_run_batch_names_the_runs_whose_planning_was_open(harness: Harness) -> None:
    plain = harness.create(**plain_request(harness))
    adaptive = harness.create(**adaptive_request(harness))
    result = harness.engine.run_batch(harness.pending(plain) + harness.pending(adaptive))
    assert result.planning == {adaptive}
    assert harness.engine.run_batch(harness.pending(plain)).planning == set()  # nothing left: no rows, no runs
