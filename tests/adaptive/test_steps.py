"""Planning steps against a real database (SQLite and PostgreSQL): adaptive runs grow batch by batch from what the
database holds, never plan a comparison or a sample twice, and stop saying why. Verdicts are written straight into
the rows here (as a worker's compare-and-set would), so every step's input is known exactly."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from judge_api import planning, repository
from judge_api.adaptive import steps
from judge_api.db import engine_for
from judge_api.migrate import upgrade
from judge_api.models import Judgment, Run
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate

QUALITY = re.compile(r"<<q=(\d+)>>")
STRENGTH = {"s1": 80, "s2": 65, "s3": 50, "s4": 35}


@pytest.fixture
def sessions(settings_env: pytest.MonkeyPatch, db_url: str) -> sessionmaker[Session]:
    settings_env.setenv("DATABASE_URL", db_url)
    upgrade(db_url)
    return sessionmaker(bind=engine_for(db_url), expire_on_commit=False)


def items(n: int, strengths: dict[str, int] = STRENGTH) -> list[dict[str, Any]]:
    out = []
    for k in range(n):
        candidates = {}
        for system, base in strengths.items():
            noise = hashlib.sha256(f"{k}{system}".encode()).digest()[0] % 21 - 10  # item-level noise
            candidates[system] = f"Answer of {system} on item {k}. <<q={base + noise}>>"
        out.append({"id": f"item-{k:03d}", "dialogue": [{"speaker": "user", "text": "Hi?"}], "candidates": candidates})
    return out


def create(sessions: sessionmaker[Session], **request: Any) -> str:
    req = RunCreate.model_validate(request)
    registry = get_registry()
    planned = planning.plan_run(req, registry, 1_000_000)
    with sessions() as session:
        run = repository.create_run(session, req, planned, rubrics=[registry.get(r) for r in req.rubrics])
        assert run.plan_open == planning.is_adaptive(run.config)  # create_run opens adaptive runs for planning
        session.commit()
        return run.id


def pairwise_request(n_items: int, **adaptive: Any) -> dict[str, Any]:
    return {
        "items": items(n_items),
        "rubrics": ["mtbench-pair-v2"],
        "judges": ["openai:gpt-4o"],
        "mode": ["pairwise"],
        "pairing": "adaptive",
        "adaptive": adaptive,
    }


def quality(text: str) -> int:
    match = QUALITY.search(text)
    assert match
    return int(match.group(1))


def judge_pending(sessions: sessionmaker[Session], run_id: str, sample_scores: Any = None) -> int:
    """Write a verdict into every pending row: pairwise by the planted qualities (both orders agree), single from
    ``sample_scores(row)``."""
    with sessions() as session:
        rows = list(session.scalars(select(Judgment).where(Judgment.run_id == run_id, Judgment.status == "pending")))
        for row in rows:
            if row.mode == "pairwise":
                texts = _candidates(session, run_id, row.item_key)
                assert row.system_b is not None
                diff = quality(texts[row.system_a]) - quality(texts[row.system_b])
                outcome = "win" if diff > 0 else "loss" if diff < 0 else "tie"
                row.outcome, row.preference = outcome, {"win": 2.0, "tie": 0.0, "loss": -2.0}[outcome]
            else:
                row.score = float(sample_scores(row))
            row.status = "done"
        session.commit()
        return len(rows)


def _candidates(session: Session, run_id: str, item_key: str) -> dict[str, str]:
    (payload,) = repository.get_items(session, run_id, [item_key])
    return dict(payload["candidates"])


def drive(sessions: sessionmaker[Session], run_id: str, sample_scores: Any = None, limit: int = 500) -> list[int]:
    """Judge, step, judge, step ... until the run is finished; returns the judgments each step added."""
    added = []
    for _ in range(limit):
        judge_pending(sessions, run_id, sample_scores)
        step = steps.advance(sessions, run_id)
        added.append(len(step.new_ids))
        if step.finished:
            return added
    raise AssertionError("the run never finished")


def run_of(sessions: sessionmaker[Session], run_id: str) -> Run:
    with sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def all_rows(sessions: sessionmaker[Session], run_id: str) -> list[Judgment]:
    with sessions() as session:
        return list(session.scalars(select(Judgment).where(Judgment.run_id == run_id)))


def test_adaptive_run_grows_batch_by_batch_and_stops_separated(sessions: sessionmaker[Session]) -> None:
    run_id = create(sessions, **pairwise_request(60, batch=10))
    first = all_rows(sessions, run_id)
    # the first batch: every pair once (warm-up), both orders
    assert len(first) == 2 * 10 and Counter(j.order for j in first) == {"ab": 10, "ba": 10}
    assert len({(j.system_a, j.system_b) for j in first}) == 6
    added = drive(sessions, run_id)
    run = run_of(sessions, run_id)
    rows = all_rows(sessions, run_id)
    assert run.plan_open is False and run.n_judgments == len(rows)
    state = run.plan_state or {}
    pairing = state["pairing"]
    assert state["finished"] and pairing["stop"] == "separated"
    assert [r["system"] for r in pairing["ranking"]] == ["s1", "s2", "s3", "s4"]
    assert all(g["separated"] for g in pairing["gaps"])
    assert pairing["calls"] == len(rows) < pairing["round_robin_calls"] == 6 * 60 * 2
    assert pairing["comparisons"] == len(rows) // 2
    assert all(s > 0 for s in added[:-1]) and added[-1] == 0
    # never the same comparison twice: each (item, pair, order) once
    keys = [(j.item_key, j.system_a, j.system_b, j.order) for j in rows]
    assert len(keys) == len(set(keys))
    # calls go where the ranking is undecided: adjacent pairs get more comparisons than distant ones
    per_pair = Counter((j.system_a, j.system_b) for j in rows if j.order == "ab")
    assert per_pair["s1", "s4"] < max(per_pair["s1", "s2"], per_pair["s2", "s3"], per_pair["s3", "s4"])


def test_budget_stops_the_run_and_is_kept(sessions: sessionmaker[Session]) -> None:
    run_id = create(sessions, **pairwise_request(60, batch=10, max_calls=50))
    drive(sessions, run_id)
    run = run_of(sessions, run_id)
    rows = all_rows(sessions, run_id)
    assert (run.plan_state or {})["pairing"]["stop"] == "budget"
    assert len(rows) <= 50 and len(rows) >= 48


def test_racing_steps_plan_one_batch(sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers finish the batch's last judgments at once and both step from the same state: one plans, the
    other computes the same plan but loses the compare-and-set on the planning round and stores nothing."""
    run_id = create(sessions, **pairwise_request(40, batch=8))
    judge_pending(sessions, run_id)
    planned_by: list[str] = []
    computed = threading.Event()
    plan_pairing = steps._plan_pairing

    def recording(*args: Any, **kwargs: Any) -> Any:
        planned_by.append(threading.current_thread().name)
        if threading.current_thread().name == "second":
            computed.set()
        return plan_pairing(*args, **kwargs)

    monkeypatch.setattr(steps, "_plan_pairing", recording)
    results: dict[str, steps.Step] = {}
    with sessions() as first:
        results["first"] = steps._advance(first, run_id, None, False)  # holds its writes, uncommitted

        def second() -> None:
            with sessions() as session:
                results["second"] = steps._advance(session, run_id, None, False)
                session.commit()

        thread = threading.Thread(target=second, name="second")
        thread.start()
        assert computed.wait(30)  # the second step read the same state and planned from it
        time.sleep(0.3)
        first.commit()
    thread.join(60)
    assert planned_by.count("second") == 1
    assert len(results["first"].new_ids) == 16 and results["second"].new_ids == []
    assert steps.advance(sessions, run_id).new_ids == []  # the new batch is in flight: nothing to plan
    rows = all_rows(sessions, run_id)
    assert len(rows) == run_of(sessions, run_id).n_judgments == 16 + 16
    assert (run_of(sessions, run_id).plan_round, len({j.dedup_key for j in rows})) == (1, 32)


def test_steps_of_a_run_that_is_not_adaptive_do_nothing(sessions: sessionmaker[Session]) -> None:
    request = pairwise_request(5)
    request.pop("adaptive")
    request["pairing"] = "all"
    run_id = create(sessions, **request)
    assert run_of(sessions, run_id).plan_open is False
    judge_pending(sessions, run_id)
    assert steps.advance(sessions, run_id) == steps.Step([], True)


def test_adaptive_samples_only_where_the_first_ones_disagree(sessions: sessionmaker[Session]) -> None:
    """Single mode, samples='adaptive' (2 first, up to 4): system s1's samples agree, s2's scatter."""
    request = {
        "items": items(3, {"s1": 70, "s2": 40}),
        "rubrics": ["rsum-single"],
        "judges": ["openai:gpt-4o"],
        "aspects": ["consistency"],
        "options": {"samples": "adaptive", "max_samples": 4, "temperature": 0.7},
    }
    run_id = create(sessions, **request)
    assert len(all_rows(sessions, run_id)) == 3 * 2 * 2  # two first samples each

    def scores(row: Judgment) -> float:
        if row.system_a == "s1":
            return 70 + row.sample_index % 2  # 70, 71: agree
        return 40 + 15 * (-1) ** row.sample_index  # 55, 25, 55, 25: never settle

    drive(sessions, run_id, scores)
    rows = all_rows(sessions, run_id)
    per_key = Counter((j.item_key, j.system_a) for j in rows)
    assert {n for (_, s), n in per_key.items() if s == "s1"} == {2}
    assert {n for (_, s), n in per_key.items() if s == "s2"} == {4}
    run = run_of(sessions, run_id)
    assert run.plan_open is False and run.n_judgments == len(rows) == 3 * 2 + 3 * 4
    usage = (run.plan_state or {})["samples"]
    assert usage["judgments"] == 6 and usage["samples"] == 18 and usage["fixed_samples"] == 24
    assert usage["saving"] == pytest.approx(0.25) and usage["histogram"] == {"2": 3, "4": 3}


def test_a_failed_sample_counts_against_the_maximum(sessions: sessionmaker[Session]) -> None:
    request = {
        "items": items(1, {"s1": 70}),
        "rubrics": ["rsum-single"],
        "judges": ["openai:gpt-4o"],
        "aspects": ["consistency"],
        "options": {"samples": "adaptive", "max_samples": 3, "temperature": 0.7},
    }
    run_id = create(sessions, **request)
    with sessions() as session:
        session.execute(update(Judgment).where(Judgment.run_id == run_id).values(status="failed", error="boom"))
        session.commit()
    step = steps.advance(sessions, run_id)
    assert len(step.new_ids) == 1  # nothing parsed yet: a third sample, the last
    with sessions() as session:
        session.execute(update(Judgment).where(Judgment.run_id == run_id).values(status="failed", error="boom"))
        session.commit()
    assert steps.advance(sessions, run_id).finished
    assert len(all_rows(sessions, run_id)) == 3
