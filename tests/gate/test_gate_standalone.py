"""``dialogue_judge.gate.standalone``: in-process judging on SQLite (no Redis), batches with looks, early-stop
cancellation, the persistent database as judge cache; and the gate run from Python on in-memory sides and run ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogue_judge.gate import GateConfig, run_gate
from dialogue_judge.gate.inputs import GateInputError, Side, load_side
from dialogue_judge.gate.standalone import EARLY_STOP, InProcessRunner, LookContext, run_in_process, seeded_order
from judge_api.schemas import RunCreate
from judge_simulator.process import SimulatorProcess

from .planting import context, judge_for, plant

pytestmark = pytest.mark.usefixtures("gate_env")


def request(sim: SimulatorProcess, n: int) -> RunCreate:
    items = [
        {**context(i), "candidates": {"baseline": f"Rex. <<q={70 + i % 9}>>", "candidate": f"Max? <<q={40 + i}>>"}}
        for i in range(n)
    ]
    return RunCreate.model_validate(
        {"items": items, "rubrics": ["rsum-single"], "judges": [judge_for(sim)], "aspects": ["consistency"]}
    )


def test_run_in_process_judges_in_batches_and_cancels_the_rest_on_early_stop(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    seen: list[tuple[int, int, int]] = []

    def on_look(ctx: LookContext) -> bool:
        done = [j for j in ctx.judgments() if j["status"] == "done"]
        seen.append((ctx.look, len(ctx.item_ids), len(done)))
        assert {j["item_id"] for j in done} == set(ctx.item_ids)  # exactly the items of the batches so far
        return ctx.look == 2

    with InProcessRunner(tmp_path / "gate.db", workers=4) as runner:
        run_id = run_in_process(
            request(sim, 30), runner=runner, order_seed=7, looks=[10, 20, 30], on_look=on_look, progress=False
        )
        assert seen == [(1, 10, 20), (2, 20, 40)]
        rows = runner.judgments(run_id)
        summary = runner.summary(run_id)
    assert summary is not None and summary.counts.done == 40 and summary.counts.cancelled == 20
    assert {r["error"] for r in rows if r["status"] == "cancelled"} == {EARLY_STOP}
    assert sim.stats()["total_calls"] == 40
    order = seeded_order([f"item-{i:03d}" for i in range(30)], 7)
    assert {r["item_id"] for r in rows if r["status"] == "done"} == set(order[:20])


def test_the_database_is_the_judge_cache(sim: SimulatorProcess, tmp_path: Path) -> None:
    database = tmp_path / "cache" / "gate.db"
    first = run_in_process(request(sim, 12), database=database, progress=False)
    calls = sim.stats()["total_calls"]
    second = run_in_process(request(sim, 12), database=database, progress=False)
    assert sim.stats()["total_calls"] == calls == 24
    with InProcessRunner(database) as runner:
        one, two = runner.summary(first), runner.summary(second)
    assert one is not None and two is not None
    assert one.provider_calls == 24 and two.provider_calls == 0 and two.cached == 24


def test_seeded_order_is_stable_and_seed_dependent() -> None:
    ids = [f"item-{i:03d}" for i in range(50)]
    assert seeded_order(ids, 1) == seeded_order(list(reversed(ids)), 1)
    assert seeded_order(ids, 1) != seeded_order(ids, 2)
    assert sorted(seeded_order(ids, 3)) == ids


def test_runner_leaves_the_process_settings_alone(sim: SimulatorProcess, tmp_path: Path) -> None:
    from judge_api.config import get_settings

    before = get_settings().resolved_database_url()
    with InProcessRunner(workers=2) as runner:
        assert runner.url != before and runner.settings.redis_url is None
        run_id = run_in_process(request(sim, 3), runner=runner, progress=False)
        assert runner.summary(run_id) is not None
    assert get_settings().resolved_database_url() == before


def test_in_memory_sides_and_the_gate_from_python(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path, 40, -40.0, seed=12)
    items = [json.loads(line) for line in data.items.read_text().splitlines()]
    candidate = {
        json.loads(line)["id"]: json.loads(line)["response"] for line in data.responses.read_text().splitlines()
    }
    result = run_gate(
        GateConfig(
            baseline=data.baseline,
            candidate=candidate,
            items=items,
            judge=judge_for(sim),
            max_drop=3.0,
            cache=False,
            progress=False,
        )
    )
    assert result.status == "regression" and result.exit_code == 1, result.headline
    assert result.candidate == "<in-memory responses>"
    with pytest.raises(GateInputError, match="map item ids to response strings"):
        load_side({"item-000": 3}, "candidate")
    assert isinstance(load_side(Side("x", {"a": "b"}), "baseline"), Side)


def test_run_ids_in_the_standalone_database_reuse_their_verdicts(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "runs", 30, -40.0, seed=15)
    database = tmp_path / "cache" / "gate.db"
    run_ids = []
    for path in (data.baseline, data.candidate):
        items = [json.loads(line) for line in path.read_text().splitlines()]
        body = {"items": items, "rubrics": ["rsum-single"], "judges": [judge_for(sim)], "aspects": ["consistency"]}
        run_ids.append(run_in_process(RunCreate.model_validate(body), database=database, progress=False))
    calls = sim.stats()["total_calls"]
    result = run_gate(
        GateConfig(
            baseline=run_ids[0],
            candidate=run_ids[1],
            judge=judge_for(sim),
            max_drop=3.0,
            database=database,
            progress=False,
        )
    )
    assert sim.stats()["total_calls"] == calls
    assert result.status == "regression", result.headline
    assert result.calls.reused and result.calls.provider_calls == 0 and not result.sequential
    assert result.aspects[0].decided_by == "final test"
    missing = run_gate(
        GateConfig(
            baseline="run_0123456789abcdef",
            candidate=run_ids[1],
            judge=judge_for(sim),
            database=database,
            progress=False,
        )
    )
    assert missing.exit_code == 2
    assert missing.headline.startswith("ERROR: run 'run_0123456789abcdef' is not in the standalone database ")
