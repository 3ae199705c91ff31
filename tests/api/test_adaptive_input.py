"""pairing='adaptive' and samples='adaptive' through the API: bad combinations are a 422 naming the field and
storing nothing; a good one stores only the first batch and opens the run for planning."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from .conftest import JUDGE, ApiFactory, item, run_body
from .test_bad_input import Case, check


def adaptive_body(n_items: int = 3, systems: tuple[str, ...] = ("a", "b", "c"), **changes: Any) -> dict[str, Any]:
    body = run_body(
        n_items=0,
        items=[item(i, systems) for i in range(n_items)],
        rubrics=["mtbench-pair-v2"],
        mode=["pairwise"],
        aspects=None,
        pairing="adaptive",
    )
    body.update(changes)
    return body


CASES = [
    Case(
        "adaptive without pairwise mode",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "pairing: 'adaptive' ranks systems pairwise",
        json=adaptive_body(mode=["single"], rubrics=["rsum-single"], aspects=["consistency"]),
    ),
    Case(
        "adaptive with one random order",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "orders: adaptive pairing judges both presentation orders",
        json=adaptive_body(orders="random"),
    ),
    Case(
        "adaptive options without adaptive pairing",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "adaptive: only with pairing='adaptive'",
        json=adaptive_body(pairing="all", adaptive={"confidence": 0.9}),
    ),
    Case(
        "confidence out of range",
        "POST",
        "/v1/runs",
        422,
        ["body", "adaptive", "confidence"],
        "less than or equal to 0.999",
        json=adaptive_body(adaptive={"confidence": 1.0}),
    ),
    Case(
        "top_k not below the systems",
        "POST",
        "/v1/runs",
        422,
        ["body", "adaptive.top_k"],
        "top_k must be below the number of systems (3)",
        json=adaptive_body(adaptive={"top_k": 3}),
    ),
    Case(
        "budget below one comparison",
        "POST",
        "/v1/runs",
        422,
        ["body", "adaptive.max_calls"],
        "a comparison takes 2 calls",
        json=adaptive_body(adaptive={"max_calls": 1}),
    ),
    Case(
        "two judges to rank by",
        "POST",
        "/v1/runs",
        422,
        ["body", "pairing"],
        "ranks the systems by one pairwise rubric, aspect and judge; this run has 2",
        json=adaptive_body(judges=[JUDGE, "openai:gpt-4o"]),
    ),
    Case(
        "adaptive samples at temperature 0",
        "POST",
        "/v1/runs",
        422,
        ["body", "options"],
        "samples: 'adaptive' needs temperature > 0",
        json=adaptive_body(options={"samples": "adaptive"}),
    ),
    Case(
        "max_samples without adaptive samples",
        "POST",
        "/v1/runs",
        422,
        ["body", "options"],
        "max_samples: only with samples='adaptive'",
        json=adaptive_body(options={"samples": 2, "max_samples": 4, "temperature": 0.5}),
    ),
    Case(
        "samples neither a count nor adaptive",
        "POST",
        "/v1/runs",
        422,
        ["body", "options", "samples"],
        "",
        json=adaptive_body(options={"samples": "many", "temperature": 0.5}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_adaptive_input_is_rejected_clearly_and_stores_nothing(api_factory: ApiFactory, case: Case) -> None:
    api = api_factory()
    run_id = api.submit()["id"]
    assert check(api, run_id, copy.deepcopy(case)) is None


def test_an_adaptive_run_stores_its_first_batch_only(api_factory: ApiFactory) -> None:
    api = api_factory()
    body = adaptive_body(
        n_items=20,
        systems=("a", "b", "c", "d"),
        adaptive={"batch": 8, "max_calls": 100},
        options={"samples": "adaptive", "temperature": 0.7, "max_samples": 3},
    )
    created = api.submit(body=body)
    # the first batch: every one of the 6 pairs once, then 2 more comparisons; both orders, one first sample each
    assert created["n_judgments"] == 8 * 2
    engine = create_engine(api.database_url)
    with engine.connect() as connection:
        run = connection.execute(
            text("SELECT plan_open, plan_round, config FROM runs WHERE id = :id"), {"id": created["id"]}
        ).one()
        pairs = connection.execute(
            text("SELECT DISTINCT system_a, system_b FROM judgments WHERE run_id = :id"), {"id": created["id"]}
        ).all()
    engine.dispose()
    assert bool(run.plan_open) and run.plan_round == 0
    config = run.config if isinstance(run.config, dict) else json.loads(run.config)
    assert config["adaptive"]["max_calls"] == 100 and config["options"]["samples"] == "adaptive"
    assert len(pairs) == 6 and all(a < b for a, b in pairs)


def test_adaptive_samples_must_fit_the_judgment_limit_at_their_maximum(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_JUDGMENTS="40")
    before = api.row_counts()
    body = run_body(n_items=5, options={"samples": "adaptive", "temperature": 0.7, "max_samples": 5})
    response = api.client.post("/v1/runs", json=body)  # 10 judgments of 2 first samples: 20 rows, up to 50
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", "options.max_samples"] and "could need 50 judgments" in error["msg"]
    assert api.row_counts() == before
    body["options"]["max_samples"] = 4
    assert api.client.post("/v1/runs", json=body).status_code == 202
