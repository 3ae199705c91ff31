"""The gate on imported verdicts: two runs (baseline build, candidate build) holding an external judge's 1-100 scores
(``repository.import_verdicts``, what ``POST /v1/runs/{id}/verdicts`` stores) are compared from those scores, with no
judge call, by the judge's name; an imported judge whose verdicts the runs lack is an error, never a judge call."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from dialogue_judge.gate import GateConfig, GateResult, run_gate
from dialogue_judge.gate.standalone import InProcessRunner
from judge_api import repository
from judge_api.schemas import RunCreate, VerdictIn, VerdictSource

from .planting import context

pytestmark = pytest.mark.usefixtures("gate_env")
N = 40


def imported_run(runner: InProcessRunner, system: str, shift: float, seed: int, judge: str = "my-judge") -> str:
    """A run of ``system``'s responses with no judgment of its own and the imported scores of ``judge``."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [
        {**context(i), "candidates": {system: f"Rex is your beagle ({system} {i})."}} for i in range(N)
    ]
    request = RunCreate.model_validate(
        {"items": items, "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"], "aspects": ["consistency"]}
    )
    verdicts: list[tuple[list[str | int], VerdictIn]] = [
        (
            ["verdicts", i],
            VerdictIn(
                item_id=item["id"],
                system=system,
                aspect="consistency",
                judge=judge,
                score=round(min(100.0, max(1.0, 80 + shift + rng.gauss(0, 5)))),
            ),
        )
        for i, item in enumerate(items)
    ]
    with runner.sessions() as session:
        run = repository.create_run(session, request, [])
        session.flush()
        source = VerdictSource(name=f"{system}.csv", sha256=f"{seed:064x}", format="csv")
        created, _, _ = repository.import_verdicts(session, run, verdicts, source, rubric="rsum-single")
        assert created == N
        session.commit()
        return run.id


def test_the_gate_compares_two_runs_on_an_imported_judges_scores(tmp_path: Path) -> None:
    database = tmp_path / "gate.db"
    with InProcessRunner(database) as runner:
        baseline = imported_run(runner, "build-1", 0.0, seed=1)
        worse = imported_run(runner, "build-2", -45.0, seed=2)
        same = imported_run(runner, "build-3", 0.0, seed=3)
        unrelated = imported_run(runner, "build-4", 0.0, seed=4, judge="other-judge")

    def gate(candidate: str, judge: str = "my-judge", mode: str = "single") -> GateResult:
        return run_gate(
            GateConfig(
                baseline=baseline,
                candidate=candidate,
                judge=judge,
                rubric="rsum-single" if mode == "single" else None,
                mode=mode,
                max_drop=20.0,
                database=database,
                progress=False,
            )
        )

    regression = gate(worse)
    assert regression.status == "regression" and regression.exit_code == 1, regression.headline
    assert regression.calls.reused and regression.calls.provider_calls == 0
    passed = gate(same)
    assert passed.status == "pass" and passed.exit_code == 0, passed.headline
    missing = gate(unrelated)
    assert missing.status == "error" and "hold no complete verdicts of my-judge" in missing.headline
    pairwise = gate(same, mode="pairwise")
    assert pairwise.status == "error" and "compared with --mode single" in pairwise.headline
