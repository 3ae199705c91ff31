"""Review r57b: GET /v1/runs/{id}/report read in parts (``repository.judgments_parts``, ``stats.parts``) against the
report of the whole frame (``build_report(repository.judgments_frame(...))``): runs of several rubrics whose scales
differ, a judgment whose own scale differs from its rubric's, and a small real batch saving summed over parts."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from judge_api import repository
from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.reference_metrics import LEXICAL_METRICS, REFERENCE_JUDGE
from judge_api.reference_tokens import tokenisation_section
from judge_api.repository import frames as repository_frames
from tests.api.conftest import ApiFactory, run_body
from tests.api.test_report_cache import _figures, _judge, _judgment_ids, _report
from tests.api.test_review_r57a import _compare, _whole
from tests.stats.test_report_parts import COST_RTOL


def _mixed_rubrics_run(api: Any) -> str:
    body = run_body(
        5,
        rubrics=["rsum-single", "geval-consistency", "rsum-pairwise"],
        mode=["single", "pairwise"],
        aspects=["consistency", "overall"],
    )
    body["items"] = [{**it, "candidates": {"a": "A says Rex.", "b": "B says Max."}} for it in body["items"]]
    return str(api.submit(None, body)["id"])


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_rubrics_of_different_scales_and_an_own_scale_read_in_parts(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, backend: str, request: pytest.FixtureRequest
) -> None:
    """HELD (review r57b): a run of three rubrics (1-100, 1-5, pairwise), one judgment scored on its own scale
    (0-10), some rows failed, read 3 rows a part on SQLite and PostgreSQL: the route's report is the whole frame's
    (counts by rubric, scores, bias score use, cost)."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    api = api_factory(database_url=url, DJ_REPORT_CACHE="false")
    run_id = _mixed_rubrics_run(api)
    rows = _judgment_ids(run_id)
    _judge(rows[:-3])
    _judge(rows[-3:], status="failed")
    with session_scope() as session:
        first_single = next(jid for jid, system_b in rows if system_b is None)
        session.execute(update(Judgment).where(Judgment.id == first_single).values(scale_min=0.0, scale_max=10.0))
        for k, (jid, _) in enumerate(rows):
            cost = 1e-4 * (k + 1)
            session.execute(update(Judgment).where(Judgment.id == jid).values(cost_usd=cost, list_cost_usd=cost))
    monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", 3)
    got = _figures(_report(api, run_id, n_boot=20))
    whole = _whole(run_id, n_boot=20)
    assert _compare(whole, got) == []
    assert sorted(got["counts"]["by_rubric"]) == ["geval-consistency", "rsum-pairwise", "rsum-single"]


def _costs_whose_parts_round_apart(n: int, part: int) -> tuple[np.ndarray, np.ndarray]:
    """Random real-time costs of up to a cent and one batched row (list $2e-6, paid $1e-6) whose batch saving
    summed part by part (``stats.parts``: each part's ``nansum``, then the parts added) is not the one sum's."""
    for seed in range(100):
        costs = np.round(np.random.default_rng(seed).random(n) * 1e-2, 9)
        costs[0] = 1e-6
        listed = costs.copy()
        listed[0] = 2e-6
        whole = float(np.nansum(listed)) - float(np.nansum(costs))
        parts = sum(float(np.nansum(listed[a : a + part])) for a in range(0, n, part)) - sum(
            float(np.nansum(costs[a : a + part])) for a in range(0, n, part)
        )
        if not math.isclose(whole, parts, rel_tol=COST_RTOL):
            return costs, listed
    raise AssertionError("no seed found")


def test_a_small_real_batch_saving_read_in_parts_is_the_whole_frames(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (review r57b): promise D (the route's cost floats within 1e-12 of ``build_report(judgments_frame)``)
    and C (a real batch saving still reported) together: ``saved_usd.batch`` is ``list - cost - cache_saved``, a
    difference of two nearly equal sums. With one batched row (list $2e-6, paid $1e-6) among real-time rows of up to
    a cent, the saving ($1e-6) is ~5e-7 of the list price (above the 1e-9 noise line, so reported), but the parts'
    sums round differently from the whole frame's: the route's figure differs from the whole frame's by ~1e-10
    relative (9.999999999177334e-07 vs 1.0000000000287557e-06). Reproduction: a 60-item run (120 rows), random
    costs (a seed whose part sums round apart), every row at list price but the first, REPORT_PART_ROWS=3. The rows'
    savings are now summed (0 below a billionth of a row's list price): only the batched row adds to it."""
    api = api_factory(DJ_REPORT_CACHE="false")
    run_id = str(api.submit(None, run_body(60))["id"])
    rows = _judgment_ids(run_id)
    _judge(rows)
    costs, listed = _costs_whose_parts_round_apart(len(rows), 3)
    with session_scope() as session:
        for k, (jid, _) in enumerate(rows):
            values = {"cost_usd": float(costs[k]), "list_cost_usd": float(listed[k])}
            session.execute(update(Judgment).where(Judgment.id == jid).values(**values))
    monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", 3)
    got = _figures(_report(api, run_id, n_boot=20))
    whole = _whole(run_id, n_boot=20)
    assert whole["cost"]["saved_usd"]["batch"] > 0
    batch_whole, batch_got = whole["cost"]["saved_usd"]["batch"], got["cost"]["saved_usd"]["batch"]
    assert math.isclose(batch_got, batch_whole, rel_tol=COST_RTOL), (batch_got, batch_whole)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_reference_metrics_section_read_in_parts_is_the_whole_frames(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, backend: str, request: pytest.FixtureRequest
) -> None:
    """HELD (review r57b): a reference-metric run (F1, BLEU-1, BLEU-2 on three items), scored, read one row a part:
    the route's ``reference_metrics`` section (its tokenisation versions gathered part by part) is the one
    ``tokenisation_section`` makes of the whole frame's F1 / BLEU versions, and every other figure is the whole
    frame's."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    api = api_factory(database_url=url, DJ_REPORT_CACHE="false")
    items = [
        {
            "id": f"r{i}",
            "dialogue": [{"speaker": "user", "text": "Do you remember my dog's name?"}],
            "reference": "Yes, your beagle is called Rex!",
            "candidates": {"a": "Your beagle Rex!", "b": "I like cats."},
        }
        for i in range(3)
    ]
    body = {"items": items, "judges": ["reference"], "metrics": ["f1", "bleu-1", "bleu-2"]}
    created = api.client.post("/v1/runs", json=body)
    assert created.status_code == 202, created.text
    run_id = str(created.json()["id"])
    _judge(_judgment_ids(run_id))
    monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", 1)
    got = _figures(_report(api, run_id, n_boot=20))
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
        lexical = frame[(frame["judge"] == REFERENCE_JUDGE) & frame["aspect"].isin(LEXICAL_METRICS)]
        versions = set(zip(lexical["item_id"], lexical["rubric_version"], strict=True))
        run = session.get(Run, run_id)
        assert run is not None
        tokenize = (run.config or {}).get("tokenize", "whitespace")  # as the route reads it
        expected = tokenisation_section(versions, repository.item_references(session, run_id), tokenize)
    assert versions and got["reference_metrics"] == json.loads(json.dumps(expected))
    others = {k: v for k, v in got.items() if k != "reference_metrics"}
    assert _compare(_whole(run_id, n_boot=20), others) == []
