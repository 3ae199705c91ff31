"""Issue 39: the Compare runs page reads ``GET /v1/runs/{id}/score-deltas`` and ``GET /v1/runs/{id}/worse-items``
instead of both runs' whole frames. Their figures equal what the dashboard computed from the two ``/judgments.csv``
frames before (``tests.compare_reference``, moved out of the dashboard): deltas, means, counts and the bootstrap CIs
with the same seed; with two judges, two samples and items only one run has. A write to either run is in the next
answer; another project's run is a 404; bad input a 422 naming the field."""

from __future__ import annotations

import math
import random
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import select

from dashboard import analysis
from dashboard.api import parse_judgments_csv
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment
from judge_api.repository import claims
from tests import compare_reference
from tests.api.conftest import JUDGE, Api, run_body

JUDGE_2 = JUDGE.replace("sim-judge", "sim-judge-2")


def _submit(api: Api, items: range, key: str | None = None) -> str:
    body = run_body(1, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"], judges=[JUDGE, JUDGE_2])
    body["aspects"] = ["consistency", "overall"]
    body["options"] = {"samples": 2, "temperature": 0.7}  # two samples per key: a judge's score is their mean
    template = body["items"][0]
    body["items"] = [
        {**template, "id": f"item-{i}", "candidates": {"a": "A: Rex.", "b": "B: Max", "c": "C: ?"}} for i in items
    ]
    return str(api.submit(key, body)["id"])


def _judge(run_id: str, seed: int, hold: tuple[str, ...] = ()) -> int:
    """Write verdicts for the run's pending judgments but those of the ``hold`` items (scores 1-10, halves too,
    preferences, a few failures); returns how many were written."""
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.system_b)
            .where(Judgment.run_id == run_id, Judgment.status == "pending", Judgment.item_key.not_in(hold))
            .order_by(Judgment.id)
        ).all()
    chosen = list(rows)
    engine = get_engine()
    token, claimed = claims.claim_many(engine, [r.id for r in chosen], 600.0)
    rng = random.Random(seed)
    verdicts = []
    for jid, system_b in chosen:
        if jid not in claimed:
            continue
        if rng.random() < 0.05:
            values: dict[str, Any] = {"status": "failed", "error": "provider said no"}
        elif system_b is None:
            values = {"status": "done", "score": rng.randint(2, 20) / 2}
        else:
            p = rng.choice([-2, -1, 1, 2])
            values = {"status": "done", "preference": float(p), "outcome": {2: "win", -2: "loss"}.get(p, "tie")}
        values.update(input_tokens=10, output_tokens=3, latency_ms=12.5, provider_calls=1)
        verdicts.append((jid, token, values))
    assert all(claims.write_verdicts(engine, verdicts))
    return len(verdicts)


@pytest.fixture
def runs(api: Api) -> tuple[str, str]:
    """(baseline, candidate): 14 items each, 11 of them shared, judged with different seeds; item-12 of the baseline
    and item-13 of the candidate still pending."""
    base, cand = _submit(api, range(0, 14)), _submit(api, range(3, 17))
    _judge(base, 1, hold=("item-12",))
    _judge(cand, 2, hold=("item-13",))
    return base, cand


def _frame(api: Api, run_id: str) -> pd.DataFrame:
    response = api.client.get(f"/v1/runs/{run_id}/judgments.csv")
    assert response.status_code == 200
    return parse_judgments_csv(response.text)


def _old(api: Api, base: str, cand: str, **kwargs: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The figures as the page computed them before: from both runs' whole frames."""
    b, c = (analysis.judge_item_scores(_frame(api, r)) for r in (base, cand))
    return compare_reference.compare_scores(b, c, **kwargs), compare_reference.worse_items(b, c)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    def norm(value: Any) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    return [{k: norm(v) for k, v in row.items()} for row in df.to_dict("records")]


def _deltas(api: Api, base: str, cand: str, **params: Any) -> list[dict[str, Any]]:
    response = api.client.get(f"/v1/runs/{cand}/score-deltas", params={"baseline": base, **params})
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


def _worse(api: Api, base: str, cand: str, limit: int = 7) -> tuple[list[dict[str, Any]], int]:
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:
        response = api.client.get(
            f"/v1/runs/{cand}/worse-items", params={"baseline": base, "offset": offset, "limit": limit}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) <= limit
        rows += page["items"]
        offset += limit
        if offset >= page["total"]:
            return rows, int(page["total"])


def test_score_deltas_equal_the_frames_figures_with_the_same_bootstrap(api: Api, runs: tuple[str, str]) -> None:
    base, cand = runs
    for params in ({"n_boot": 300}, {"n_boot": 500, "seed": 7, "ci": 0.9}):
        old, _ = _old(api, base, cand, **params)
        new = _deltas(api, base, cand, **params)
        assert len(old) == 3 and (old["n_items"] == 9).all()  # systems a, b, c (single: consistency); shared items
        assert old["ci_low"].notna().all() and (old["ci_low"] < old["ci_high"]).all()
        assert _records(pd.DataFrame(new, columns=analysis.DELTA_COLUMNS)) == _records(old), params
    # another seed draws other resamples: the CIs are the seed's, not fixed
    other = _deltas(api, base, cand, n_boot=300, seed=1)
    assert [r["ci_low"] for r in other] != [r["ci_low"] for r in _deltas(api, base, cand, n_boot=300)]
    # n_boot 0: no interval, the same deltas
    plain = _deltas(api, base, cand, n_boot=0)
    assert all(r["ci_low"] is None and r["ci_high"] is None for r in plain)
    assert [r["delta"] for r in plain] == [r["delta"] for r in other]


def test_worse_items_equal_the_frames_in_the_same_order(api: Api, runs: tuple[str, str]) -> None:
    base, cand = runs
    _, old = _old(api, base, cand, n_boot=0)
    rows, total = _worse(api, base, cand)
    assert total == len(old) > 7  # more than one page
    assert _records(pd.DataFrame(rows, columns=analysis.WORSE_COLUMNS)) == _records(old)
    assert [r["delta"] for r in rows] == sorted(r["delta"] for r in rows)


def test_a_write_to_either_run_is_in_the_next_answer(api: Api, runs: tuple[str, str]) -> None:
    base, cand = runs
    before = _deltas(api, base, cand, n_boot=200)
    worse_before, _ = _worse(api, base, cand, limit=5000)
    assert _judge(cand, 3) > 0  # the candidate's item-13
    after = _deltas(api, base, cand, n_boot=200)
    assert [r["n_items"] for r in after] == [10, 10, 10] and [r["n_items"] for r in before] == [9, 9, 9]
    old, old_worse = _old(api, base, cand, n_boot=200)
    assert _records(pd.DataFrame(after, columns=analysis.DELTA_COLUMNS)) == _records(old)
    assert _judge(base, 4) > 0  # the baseline's item-12
    old, old_worse = _old(api, base, cand, n_boot=200)
    last = _deltas(api, base, cand, n_boot=200)
    assert [r["n_items"] for r in last] == [11, 11, 11]
    assert _records(pd.DataFrame(last, columns=analysis.DELTA_COLUMNS)) == _records(old)
    worse_after, _ = _worse(api, base, cand, limit=5000)
    assert worse_after != worse_before
    assert _records(pd.DataFrame(worse_after, columns=analysis.WORSE_COLUMNS)) == _records(old_worse)


def test_runs_without_shared_scores_give_no_rows(api: Api) -> None:
    base, cand = _submit(api, range(0, 3)), _submit(api, range(5, 8))
    _judge(base, 1)
    _judge(cand, 2)
    assert _deltas(api, base, cand) == []
    assert _worse(api, base, cand) == ([], 0)


def test_bad_input_is_a_422_naming_the_field(api: Api, runs: tuple[str, str]) -> None:
    base, cand = runs
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        ("score-deltas", {}, "baseline", "required"),
        ("score-deltas", {"baseline": cand}, "baseline", "another run"),
        ("score-deltas", {"baseline": base, "n_boot": 5001}, "n_boot", "less than or equal to 5000"),
        ("score-deltas", {"baseline": base, "n_boot": -1}, "n_boot", "greater than or equal to 0"),
        ("score-deltas", {"baseline": base, "ci": 1.0}, "ci", "less than 1"),
        ("score-deltas", {"baseline": base, "seed": -1}, "seed", "greater than or equal to 0"),
        ("worse-items", {"baseline": base, "limit": 5001}, "limit", "less than or equal to 5000"),
        ("worse-items", {"baseline": base, "offset": -1}, "offset", "greater than or equal to 0"),
    ]
    for route, params, name, message in cases:
        response = api.client.get(f"/v1/runs/{cand}/{route}", params=params)
        assert response.status_code == 422, (route, params, response.text)
        detail = response.json()["detail"]
        assert detail[0]["loc"] == ["query", name], (route, params, detail)
        assert message in detail[0]["msg"], (route, params, detail)
    for route in ("score-deltas", "worse-items"):
        missing = api.client.get(f"/v1/runs/{cand}/{route}", params={"baseline": "no-such-run"})
        assert missing.status_code == 404 and "no-such-run" in missing.json()["detail"]
        assert api.client.get(f"/v1/runs/no-such-run/{route}", params={"baseline": base}).status_code == 404


def test_another_projects_run_is_a_404(secured: Api) -> None:
    mine, theirs = _submit(secured, range(0, 3), key="alpha"), _submit(secured, range(0, 3), key="beta")
    other_mine = _submit(secured, range(0, 3), key="alpha")
    for route in ("score-deltas", "worse-items"):
        path = f"/v1/runs/{mine}/{route}"
        as_alpha = secured.as_key("alpha-read")
        assert secured.client.get(path, params={"baseline": theirs}, headers=as_alpha).status_code == 404
        assert secured.client.get(path, params={"baseline": other_mine}, headers=as_alpha).status_code == 200
        theirs_path = f"/v1/runs/{theirs}/{route}"
        assert secured.client.get(theirs_path, params={"baseline": mine}, headers=as_alpha).status_code == 404
        assert secured.client.get(path, params={"baseline": other_mine}).status_code == 401


def test_the_same_comparison_asked_twice_at_once_is_computed_once() -> None:
    """A page drawn again while its first request still runs waits for that answer (not a second computation
    beside it on the same cores)."""
    import threading
    import time

    from judge_api.routers import comparisons

    calls: list[int] = []

    def slow() -> str:
        calls.append(1)
        time.sleep(0.3)
        return "answer"

    key = ("test", "run_x", "run_y", time.monotonic())
    out: list[str] = []
    threads = [threading.Thread(target=lambda: out.append(comparisons._cached(key, slow))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert out == ["answer"] * 3 and len(calls) == 1
    assert comparisons._cached(key, slow) == "answer" and len(calls) == 1
    assert key not in comparisons._COMPUTING
