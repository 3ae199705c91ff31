"""Monitors through the real app and database (no worker): CRUD with the runs' auth, projects and scopes, 422s
that store nothing, and ingestion (stored once per id, deterministic sampling, duplicates acknowledged)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from judge_api.monitor_ingest import is_sampled, sample_point
from tests.api.conftest import JUDGE, Api

MONITOR_TABLES = ("monitors", "monitor_responses", "runs", "items", "judgments")


def monitor_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "prod-bot",
        "rubrics": ["rsum-single"],
        "judges": [JUDGE],
        "aspects": ["consistency"],
        "sample_rate": 0.5,
        "daily_budget_usd": 20,
        "retention_days": 90,
        "alerts": [
            {
                "name": "v-regression",
                "compare": {"by": "version", "baseline": "v2.3", "candidate": "v2.4"},
                "aspect": "consistency",
                "confidence": 0.95,
            },
            {"name": "floor", "floor": {"below": 60, "min_n": 200}, "aspect": "consistency"},
        ],
        "callback_url": "https://hooks.example.org/dj",
        "callback_secret": "s3cret-s3cret-s3cret",
    }
    body.update(overrides)
    return body


def response(i: int, version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {
        "id": f"resp-{i}",
        "dialogue": [
            {"speaker": "user", "text": f"My dog is called Rex {i}.", "session": 1},
            {"speaker": "user", "text": "What's my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a dog called Rex."], "bot": []},
        "response": f"Your dog is Rex {i}.",
        "system": "bot",
        "version": version,
        **extra,
    }


def table_counts(database_url: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return {t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in MONITOR_TABLES}
    finally:
        engine.dispose()


def create(api: Api, key: str | None = None, **overrides: Any) -> dict[str, Any]:
    answer = api.client.post("/v1/monitors", json=monitor_body(**overrides), headers=api.as_key(key))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def sampling_monitor(api: Api, rules: Sequence[dict[str, Any]] = (), **overrides: Any) -> tuple[str, str]:
    """A monitor that samples every response (no budget, retention or callback), with these alert rules on the
    consistency aspect: (monitor id, run id)."""
    body: dict[str, Any] = {
        "sample_rate": 1.0,
        "daily_budget_usd": None,
        "retention_days": None,
        "callback_url": None,
        "callback_secret": None,
        "alerts": [{**rule, "aspect": "consistency"} for rule in rules],
    }
    created = create(api, **{**body, **overrides})
    return created["id"], created["run_id"]


def ingest(api: Api, monitor_id: str, responses: list[dict[str, Any]]) -> None:
    """Post the responses to the monitor; every one is sampled."""
    answer = api.client.post(f"/v1/monitors/{monitor_id}/responses", json=responses)
    assert answer.status_code in (200, 202) and answer.json()["sampled"] == len(responses), answer.text


def test_crud_round_trip_keeps_the_alert_and_callback_contract(api: Api) -> None:
    created = create(api)
    assert created["alerts"][0]["compare"] == {"by": "version", "baseline": "v2.3", "candidate": "v2.4"}
    assert created["alerts"][1]["floor"] == {"below": 60.0, "min_n": 200, "window": None}
    assert created["callback_url"] == "https://hooks.example.org/dj"
    assert created["callback_secret_set"] is True
    assert "callback_secret" not in created
    assert created["status"]["state"] == "active"
    monitor_id = created["id"]

    listed = api.client.get("/v1/monitors").json()
    assert [m["id"] for m in listed["items"]] == [monitor_id]
    # the internal run is not in the runs list, and cannot be deleted on its own
    assert api.client.get("/v1/runs").json()["total"] == 0
    assert api.client.get(f"/v1/runs/{created['run_id']}").status_code == 200
    assert api.client.delete(f"/v1/runs/{created['run_id']}").status_code == 409

    patched = api.client.patch(f"/v1/monitors/{monitor_id}", json={"sample_rate": 0.1, "daily_budget_usd": None})
    assert patched.status_code == 200, patched.text
    assert patched.json()["sample_rate"] == 0.1
    assert patched.json()["daily_budget_usd"] is None
    assert patched.json()["retention_days"] == 90  # not given: kept
    assert api.client.get(f"/v1/monitors/{monitor_id}").json()["sample_rate"] == 0.1

    deleted = api.client.delete(f"/v1/monitors/{monitor_id}")
    assert deleted.status_code == 200
    assert api.client.get(f"/v1/monitors/{monitor_id}").status_code == 404
    assert table_counts(api.database_url) | {"runs": 0} == dict.fromkeys(MONITOR_TABLES, 0)
    assert table_counts(api.database_url)["runs"] == 0


def test_a_daily_budget_over_an_unpriced_judge_is_refused_on_create_and_patch(api: Api) -> None:
    """A judge the price table does not list counts $0 a call: a daily budget over it could never pause sampling."""
    before = table_counts(api.database_url)
    refused = api.client.post("/v1/monitors", json=monitor_body(judges=["openai:gpt-5.4"]))
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert error["loc"] == ["body", "daily_budget_usd"] and "'openai:gpt-5.4'" in error["msg"]
    assert table_counts(api.database_url) == before
    # without a budget the judge is accepted; adding a budget later, or the judge to a budgeted monitor, is not
    created = api.client.post("/v1/monitors", json=monitor_body(judges=["openai:gpt-5.4"], daily_budget_usd=None))
    assert created.status_code == 201, created.text
    monitor = f"/v1/monitors/{created.json()['id']}"
    for change in ({"daily_budget_usd": 5}, {"judges": [JUDGE, "anthropic:claude-opus-4-8"], "daily_budget_usd": 5}):
        answer = api.client.patch(monitor, json=change)
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == ["body", "daily_budget_usd"]
    stored = api.client.get(monitor).json()
    assert stored["judges"] == ["openai:gpt-5.4"] and stored["daily_budget_usd"] is None  # nothing changed
    priced = api.client.patch(monitor, json={"judges": ["openai:gpt-5.2"], "daily_budget_usd": 5})
    assert priced.status_code == 200, priced.text
    assert priced.json()["daily_budget_usd"] == 5


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"rubrics": ["no-such-rubric"]}, "rubrics"),
        ({"aspects": ["nonsense"]}, "aspects"),
        ({"callback_secret": None}, "callback_secret"),
        ({"callback_url": "ftp://x"}, "callback_url"),
        ({"alerts": [{"name": "a", "aspect": "consistency"}]}, "alerts"),
        (
            {"alerts": [{"name": "a", "aspect": "c", "compare": {"by": "version", "baseline": "v", "candidate": "v"}}]},
            "alerts",
        ),
        (
            {"alerts": [{"name": "a", "aspect": "c", "compare": {"by": "time", "baseline": "7x", "candidate": "24h"}}]},
            "alerts",
        ),
        ({"daily_budget_usd": -1}, "daily_budget_usd"),
        ({"retention_days": 0}, "retention_days"),
        ({"options": {"samples": "adaptive", "temperature": 0.7}}, "options"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_monitor_is_422_naming_the_field_and_stores_nothing(
    api: Api, overrides: dict[str, Any], field: str
) -> None:
    before = table_counts(api.database_url)
    answer = api.client.post("/v1/monitors", json=monitor_body(**overrides))
    assert answer.status_code == 422, answer.text
    # the field is in the location, or (a rule across fields, as in runs) the message starts with it
    named = [e for e in answer.json()["detail"] if field in e["loc"] or field in e["msg"].split(":")[0]]
    assert named, answer.json()
    assert table_counts(api.database_url) == before


def test_monitors_are_per_project_with_the_runs_scopes(secured: Api) -> None:
    created = create(secured, "alpha")
    monitor_id = created["id"]
    assert secured.client.get(f"/v1/monitors/{monitor_id}", headers=secured.as_key("beta")).status_code == 404
    assert secured.client.get("/v1/monitors", headers=secured.as_key("beta")).json()["total"] == 0
    assert secured.client.get(f"/v1/monitors/{monitor_id}", headers=secured.as_key("alpha-read")).status_code == 200
    body = json.dumps([response(1)])
    read_only = secured.client.post(
        f"/v1/monitors/{monitor_id}/responses", content=body, headers=secured.as_key("alpha-read")
    )
    assert read_only.status_code == 403
    other = secured.client.post(f"/v1/monitors/{monitor_id}/responses", content=body, headers=secured.as_key("beta"))
    assert other.status_code == 404
    assert secured.client.post("/v1/monitors", json=monitor_body()).status_code == 401
    assert secured.client.delete(f"/v1/monitors/{monitor_id}", headers=secured.as_key("alpha-read")).status_code == 403


def test_ingestion_stores_each_id_once_and_samples_deterministically(api: Api) -> None:
    monitor = create(api, sample_rate=0.5)
    batch = [response(i) for i in range(40)]
    first = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=batch)
    assert first.status_code == 202, first.text
    expected = sum(is_sampled(monitor["id"], r["id"], 0.5) for r in batch)
    assert first.json() == {"accepted": 40, "sampled": expected, "duplicates": 0, "paused": False}
    assert 0 < expected < 40
    again = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=batch)
    assert again.json() == {"accepted": 0, "sampled": 0, "duplicates": 40, "paused": False}
    counts = table_counts(api.database_url)
    assert counts["monitor_responses"] == 40
    assert counts["items"] == expected
    assert counts["judgments"] == expected  # one rubric, one aspect, one judge
    # JSON Lines, with a duplicate inside the batch and one already stored
    lines = "\n".join(json.dumps(r) for r in [response(100), response(100), response(0)])
    mixed = api.client.post(f"/v1/monitors/{monitor['id']}/responses", content=lines)
    assert mixed.json()["accepted"] == 1
    assert mixed.json()["duplicates"] == 2
    run = api.client.get(f"/v1/runs/{monitor['run_id']}").json()
    assert run["n_judgments"] == table_counts(api.database_url)["judgments"]


def run_estimate(api: Api, responses: list[dict[str, Any]], judge: str) -> float:
    """POST /v1/runs/estimate's real-time cost of judging ``responses`` as one run (one judgment each)."""
    items = [
        {"id": r["id"], "dialogue": r["dialogue"], "persona": r["persona"], "candidates": {r["system"]: r["response"]}}
        for r in responses
    ]
    body = {"items": items, "rubrics": ["rsum-single"], "judges": [judge], "mode": ["single"]}
    answer = api.client.post(
        "/v1/runs/estimate", json={**body, "aspects": ["consistency"], "options": {"cache": "off"}}
    )
    assert answer.status_code == 200, answer.text
    return float(answer.json()["cost_usd"]["realtime"])


def test_the_daily_budget_counts_queued_judgments_at_their_expected_cost(api: Api) -> None:
    """No worker runs here, so nothing is recorded: the queued judgments alone, at the estimator's cost, fill the
    budget and pause sampling (old code: a backlog cost $0 until judged and sampling went on)."""
    judge = "anthropic:claude-sonnet-4-5"
    per_response = run_estimate(api, [response(0)], judge)
    assert per_response > 0
    monitor = create(api, judges=[judge], sample_rate=1.0, daily_budget_usd=round(2.5 * per_response, 9), alerts=[])
    url = f"/v1/monitors/{monitor['id']}/responses"
    first = api.client.post(url, json=[response(0), response(1)]).json()
    assert first == {"accepted": 2, "sampled": 2, "duplicates": 0, "paused": False}
    status = api.client.get(f"/v1/monitors/{monitor['id']}").json()["status"]
    assert status["spent_today_usd"] == 0
    assert status["queued_estimate_usd"] == pytest.approx(run_estimate(api, [response(0), response(1)], judge))
    assert status["state"] == "active"  # 2 of 2.5 responses' worth
    # under the budget when it arrives: sampled whole (the overshoot is at most one request's sample)
    second = api.client.post(url, json=[response(2), response(3)]).json()
    assert second["sampled"] == 2 and second["paused"] is False
    status = api.client.get(f"/v1/monitors/{monitor['id']}").json()["status"]
    assert status["state"] == "paused_budget" and "expected for the queued judgments" in status["message"]
    third = api.client.post(url, json=[response(4)]).json()  # at once: this process counted what it queued
    assert third == {"accepted": 1, "sampled": 0, "duplicates": 0, "paused": True}

    # a judged judgment counts at its recorded cost, no longer at its estimate
    engine = create_engine(api.database_url)
    with engine.begin() as connection:
        judged = connection.execute(
            text("SELECT id, estimated_cost_usd FROM judgments WHERE run_id = :r ORDER BY id LIMIT 1"),
            {"r": monitor["run_id"]},
        ).one()
        connection.execute(
            text("UPDATE judgments SET status = 'done', cost_usd = 0.000001 WHERE id = :i"), {"i": judged[0]}
        )
    engine.dispose()
    status = api.client.get(f"/v1/monitors/{monitor['id']}").json()["status"]
    assert status["spent_today_usd"] == pytest.approx(0.000001)
    assert status["queued_estimate_usd"] == pytest.approx(
        run_estimate(api, [response(i) for i in range(4)], judge) - judged[1]
    )
    assert status["state"] == "paused_budget"  # 3 queued responses' worth is still over 2.5


def _judged_as_recorded(database_url: str, run_id: str, n: int, output_tokens: int) -> None:
    """Mark the run's first ``n`` judgments succeeded by one call each, with ``output_tokens`` and the input tokens
    of 4 characters a token plus the request's overhead, as the judge would have recorded them."""
    from judge_api.prompting import render
    from judge_api.rubrics import get_registry

    rubric = get_registry().get("rsum-single")
    engine = create_engine(database_url)
    with engine.begin() as connection:
        rows = connection.execute(
            text(
                "SELECT j.id, j.system_a, i.payload FROM judgments j JOIN items i ON i.id = j.item_pk "
                "WHERE j.run_id = :r ORDER BY j.id LIMIT :n"
            ),
            {"r": run_id, "n": n},
        ).all()
        assert len(rows) == n
        for judgment_id, system, payload in rows:
            item = payload if isinstance(payload, dict) else json.loads(payload)
            messages = render(rubric, item, "consistency", item["candidates"][system]).messages
            chars = sum(len(m["content"]) for m in messages)
            connection.execute(
                text(
                    "UPDATE judgments SET status = 'done', provider_calls = 1, cached = :no, cost_usd = 0, "
                    "output_tokens = :out, input_tokens = :inp WHERE id = :id"
                ),
                {"no": False, "out": output_tokens, "inp": chars // 4 + 4 * len(messages) + 3, "id": judgment_id},
            )
    engine.dispose()


def test_the_daily_budget_counts_queued_judgments_at_the_length_the_judge_really_writes(api: Api) -> None:
    """Issue 24's calibration reaches the monitors: once the project has 20 succeeded judgments of the rubric and
    judge, a queued judgment counts at the estimator's calibrated figure, not at the rubric's stated 75-token reply
    (old code: the stated figure for ever, so a judge writing short replies paused its monitor early)."""
    from judge_api import estimate

    judge = "anthropic:claude-sonnet-4-5"
    monitor = create(api, judges=[judge], sample_rate=1.0, daily_budget_usd=1000, alerts=[])
    url = f"/v1/monitors/{monitor['id']}/responses"
    assert api.client.post(url, json=[response(i) for i in range(20)]).json()["sampled"] == 20
    later = [response(20), response(21)]
    stated = run_estimate(api, later, judge)
    _judged_as_recorded(api.database_url, monitor["run_id"], 20, output_tokens=6)
    estimate._recent.clear()  # the calibration a monitor remembers is a minute old
    calibrated = run_estimate(api, later, judge)
    assert calibrated < 0.6 * stated  # 6 output tokens a reply instead of 75
    assert api.client.post(url, json=later).json()["sampled"] == 2
    status = api.client.get(f"/v1/monitors/{monitor['id']}").json()["status"]
    assert status["queued_estimate_usd"] == pytest.approx(calibrated)
    # remembered for its minute: a request within it reads no history
    with estimate._recent_lock:
        assert len(estimate._recent) == 1


def test_bad_response_is_422_naming_index_and_field_and_stores_nothing(api: Api) -> None:
    monitor = create(api, sample_rate=1.0)
    before = table_counts(api.database_url)
    bad = [response(0), {**response(1), "version": ""}]
    answer = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=bad)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"][:3] == ["body", 1, "version"]
    missing = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=[{**response(0), "response": " "}])
    assert missing.json()["detail"][0]["loc"][:3] == ["body", 0, "response"]
    broken = api.client.post(f"/v1/monitors/{monitor['id']}/responses", content='{"id": "x"}\n{nope')
    assert broken.status_code == 422
    assert broken.json()["detail"][0]["loc"] == ["body", "line 2"]
    assert table_counts(api.database_url) == before
    assert api.client.post("/v1/monitors/mon_nope/responses", json=[response(0)]).status_code == 404


def test_sample_point_is_the_stated_hash() -> None:
    import hashlib

    digest = hashlib.sha256(b"mon_x:resp-1").digest()
    assert sample_point("mon_x", "resp-1") == int.from_bytes(digest[:8], "big") / 2.0**64
    points = [sample_point("mon_x", f"r{i}") for i in range(4000)]
    assert 0.45 < sum(p < 0.5 for p in points) / len(points) < 0.55
    # a higher rate samples a superset
    assert all(is_sampled("mon_x", f"r{i}", 0.3) <= is_sampled("mon_x", f"r{i}", 0.6) for i in range(500))


def _judge_all(database_url: str, scores: dict[str, float]) -> None:
    """Stand in for the workers: every pending judgment of the listed responses done with its score."""
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            for key, score in scores.items():
                connection.execute(
                    text("UPDATE judgments SET status='done', score=:s, cost_usd=0.01 WHERE item_key=:k"),
                    {"s": score, "k": key},
                )
    finally:
        engine.dispose()


def test_series_equals_pandas_on_the_stored_verdicts_and_csv_matches(api: Api) -> None:
    import io

    import pandas as pd
    from scipy import stats

    monitor = create(api, sample_rate=1.0)
    batch = [
        response(i, version="v1" if i % 2 else "v2", timestamp=f"2026-11-20T{10 + i % 3:02d}:{i % 60:02d}:00Z")
        for i in range(60)
    ]
    assert api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=batch).json()["sampled"] == 60
    scores = {r["id"]: float(1 + (i * 7) % 10) for i, r in enumerate(batch)}
    _judge_all(api.database_url, scores)
    answer = api.client.get(f"/v1/monitors/{monitor['id']}/series", params={"bucket": "1h", "by": "version"})
    assert answer.status_code == 200, answer.text
    rows = pd.DataFrame(answer.json()["rows"])

    frame = pd.DataFrame(
        {
            "hour": [pd.Timestamp(r["timestamp"]).tz_convert(None).floor("h") for r in batch],
            "version": [r["version"] for r in batch],
            "score": [scores[r["id"]] for r in batch],
        }
    )
    expected = frame.groupby(["hour", "version"])["score"].agg(["count", "mean", "std"]).reset_index()
    assert len(rows) == len(expected)
    for got, want in zip(rows.to_dict("records"), expected.to_dict("records"), strict=True):
        assert pd.Timestamp(got["bucket_start"]).tz_localize(None) == want["hour"]
        assert got["version"] == want["version"]
        assert got["system"] is None
        assert got["n"] == want["count"]
        assert got["mean"] == pytest.approx(want["mean"])
        half = stats.t.ppf(0.975, want["count"] - 1) * want["std"] / want["count"] ** 0.5
        assert got["ci_low"] == pytest.approx(want["mean"] - half)
        assert got["ci_high"] == pytest.approx(want["mean"] + half)

    daily = api.client.get(f"/v1/monitors/{monitor['id']}/series", params={"bucket": "1d", "by": "system"}).json()
    assert len(daily["rows"]) == 1
    assert daily["rows"][0]["n"] == 60
    assert daily["rows"][0]["mean"] == pytest.approx(sum(scores.values()) / 60)

    csv_text = api.client.get(
        f"/v1/monitors/{monitor['id']}/series", params={"bucket": "1h", "by": "version", "format": "csv"}
    ).text
    from_csv = pd.read_csv(io.StringIO(csv_text))
    assert list(from_csv["n"]) == list(rows["n"])
    assert list(from_csv["mean"]) == pytest.approx(list(rows["mean"]))

    bucket = api.client.get(
        f"/v1/monitors/{monitor['id']}/responses",
        params={"start": rows.iloc[0]["bucket_start"], "version": rows.iloc[0]["version"]},
    ).json()
    assert len(bucket["items"]) == rows.iloc[0]["n"]
    assert bucket["run_id"] == monitor["run_id"]
    assert all(item["verdicts"][0]["status"] == "done" for item in bucket["items"])


def test_retention_deletes_old_judgments_and_keeps_the_series(api: Api) -> None:
    from datetime import timedelta

    from judge_api import monitor_retention
    from judge_api.models import utcnow

    monitor = create(api, sample_rate=1.0, retention_days=2)
    url = f"/v1/monitors/{monitor['id']}/responses"
    batch = [
        response(i, version="v1" if i % 2 else "v2", timestamp=f"2026-11-20T{10 + i % 3:02d}:{i:02d}:00Z")
        for i in range(30)
    ]
    assert api.client.post(url, json=batch).json()["sampled"] == 30
    _judge_all(api.database_url, {r["id"]: float(1 + (i * 3) % 10) for i, r in enumerate(batch[:25])})
    params = {"bucket": "1h", "by": ["version"]}
    before = api.client.get(f"/v1/monitors/{monitor['id']}/series", params=params).json()["rows"]
    assert sum(r["n"] for r in before) == 25  # five still pending

    assert monitor_retention.apply(now=utcnow() + timedelta(days=1)) == 0  # not old enough yet
    assert monitor_retention.apply(now=utcnow() + timedelta(days=3), chunk=7) == 25  # in chunks of 7
    counts = table_counts(api.database_url)
    # the five pending judgments keep their items; every response id is kept (a replay stays a duplicate)
    assert counts["items"] == counts["judgments"] == 5
    assert counts["monitor_responses"] == 30
    after = api.client.get(f"/v1/monitors/{monitor['id']}/series", params=params).json()["rows"]
    assert after == before
    daily = api.client.get(f"/v1/monitors/{monitor['id']}/series", params={"bucket": "1d", "by": "system"}).json()
    assert daily["rows"][0]["n"] == 25

    # a late response of a folded hour adds to it: the kept sums and the live verdicts add up
    late = response(99, version="v2", timestamp=before[0]["bucket_start"])
    assert api.client.post(url, json=[late]).json()["sampled"] == 1
    _judge_all(api.database_url, {late["id"]: 7.0})
    merged = api.client.get(f"/v1/monitors/{monitor['id']}/series", params=params).json()["rows"]
    first = next(r for r in merged if r["bucket_start"] == before[0]["bucket_start"] and r["version"] == "v2")
    was = next(r for r in before if r["bucket_start"] == before[0]["bucket_start"] and r["version"] == "v2")
    assert first["n"] == was["n"] + 1
    assert first["mean"] == pytest.approx((was["mean"] * was["n"] + 7.0) / (was["n"] + 1))
    run = api.client.get(f"/v1/runs/{monitor['run_id']}").json()
    assert run["n_items"] == 6 and run["n_judgments"] == 6  # the five pending ones and the late one


def test_retention_never_rejudges_a_replay_nor_deletes_a_pending_judgment(api: Api) -> None:
    """Issue 36 finding 8: retention_days=1, a pass 25 h later, the same batch replayed: every id is a duplicate
    (nothing sampled or judged again), and the judgment still pending survives the pass."""
    from datetime import timedelta

    from judge_api import monitor_retention
    from judge_api.models import utcnow

    monitor = create(api, sample_rate=1.0, retention_days=1)
    url = f"/v1/monitors/{monitor['id']}/responses"
    batch = [response(i) for i in range(4)]
    assert api.client.post(url, json=batch).json()["sampled"] == 4
    _judge_all(api.database_url, {r["id"]: 5.0 for r in batch[:3]})  # resp-3 stays pending

    assert monitor_retention.apply(now=utcnow() + timedelta(hours=25)) == 3
    counts = table_counts(api.database_url)
    assert counts["items"] == counts["judgments"] == 1
    assert counts["monitor_responses"] == 4
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            left = connection.execute(text("SELECT item_key, status FROM judgments")).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in left] == [("resp-3", "pending")]

    replay = api.client.post(url, json=batch)
    assert replay.status_code == 202, replay.text
    assert replay.json()["duplicates"] == 4
    assert replay.json()["accepted"] == 0 and replay.json()["sampled"] == 0
    assert table_counts(api.database_url)["judgments"] == 1
    # the dashboard's bucket lists only the responses whose content is still kept
    today = {"start": utcnow().strftime("%Y-%m-%dT00:00:00Z"), "bucket": "1d"}
    bucket = api.client.get(url, params=today).json()
    assert [item["response_id"] for item in bucket["items"]] == ["resp-3"]

    # past the replay window (DJ_MONITOR_REPLAY_DAYS, 7) the finished responses' ids go; the pending one stays whole
    assert monitor_retention.apply(now=utcnow() + timedelta(days=8, hours=1)) == 3
    counts = table_counts(api.database_url)
    assert counts["monitor_responses"] == counts["items"] == counts["judgments"] == 1


def test_a_deleted_monitor_counts_its_alerts(api: Api) -> None:
    """The delete's answer counts the monitor's alerts it removed (they went by ON DELETE CASCADE, uncounted)
    (issue 43 review)."""
    monitor_id = create(api)["id"]
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO monitor_alerts (id, monitor_id, rule, kind, definition, status, epoch, start_id,"
                    " last_id, opened_at, evidence) VALUES ('a1', :m, 'r', 'floor', 'd', 'open', 0, 0, 0,"
                    " CURRENT_TIMESTAMP, '{}')"
                ),
                {"m": monitor_id},
            )
    finally:
        engine.dispose()
    deleted = api.client.delete(f"/v1/monitors/{monitor_id}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"]["monitor_alerts"] == 1, deleted.json()
    assert scalar_count(api.database_url, "monitor_alerts") == 0


def scalar_count(database_url: str, table: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def test_a_sampled_request_larger_than_one_insert_stores_every_judgment_once_in_order(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judgments of a request are built and inserted one chunk at a time (issue 39: not all row dicts at once);
    every sampled response gets its judgments, each once, with its expected cost, in plan order."""
    from judge_api.repository import monitors as monitor_rows

    monkeypatch.setattr(monitor_rows, "CHUNK", 4)
    judge = "anthropic:claude-sonnet-4-5"  # priced: each judgment is stored with its expected cost
    monitor = create(
        api, judges=[judge], sample_rate=1.0, aspects=["consistency", "coherence"], alerts=[], daily_budget_usd=1000
    )
    answer = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=[response(i) for i in range(9)])
    assert answer.json() == {"accepted": 9, "sampled": 9, "duplicates": 0, "paused": False}
    engine = create_engine(api.database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT item_key, aspect, estimated_cost_usd FROM judgments WHERE run_id = :r ORDER BY id"),
            {"r": monitor["run_id"]},
        ).all()
    engine.dispose()
    assert len(rows) == 18  # 9 responses x 2 aspects: five inserts of 4 or fewer
    assert len({(r.item_key, r.aspect) for r in rows}) == 18
    assert [r.item_key for r in rows[::2]] == [f"resp-{i}" for i in range(9)]
    assert all(r.estimated_cost_usd is not None and r.estimated_cost_usd > 0 for r in rows)
    assert api.client.get(f"/v1/runs/{monitor['run_id']}").json()["n_judgments"] == 18
