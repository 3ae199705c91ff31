"""Review r39: a verdict whose ``updated_at`` is older than the run's last write (the writer's stamp is taken
before its lock wait and kept on every retry of a group: workers/writer.py) must still be in the next report.

The report cache's state is ``data_version`` + ``max(updated_at)``; a verdict committed with a stamp below the
maximum changes neither, so without a bump the kept report was served stale for good."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from judge_api.db import get_engine, session_factory, session_scope
from judge_api.models import Judgment, Run, utcnow
from judge_api.repository import claims
from tests.api.conftest import ApiFactory
from tests.api.test_report_cache import NO_WINDOW, _judge, _judgment_ids, _report, _run


def _verdict(system_b: str | None) -> dict[str, Any]:
    if system_b is None:
        return {"status": "done", "score": 7.0}
    return {"status": "done", "preference": 2.0, "outcome": "win"}


def _data_version(run_id: str) -> int:
    with session_scope() as session:
        return int(session.scalar(select(Run.data_version).where(Run.id == run_id)) or 0)


def test_a_verdict_stamped_before_the_last_write_is_in_the_next_report(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    late, early = rows[:2], rows[2:5]
    engine = get_engine()
    token, claimed = claims.claim_many(engine, [jid for jid, _ in early], 600.0)
    assert sorted(claimed) == sorted(jid for jid, _ in early)
    stamp = utcnow() - timedelta(seconds=5)  # the group's stamp, taken before another writer committed
    version = _data_version(run_id)
    _judge(late)  # another writer's group, stamped now
    assert _data_version(run_id) == version  # in stamp order: no write to the run's row on the hot path
    before = _report(api, run_id, n_boot=20)
    assert _report(api, run_id, n_boot=20)["cached"] is True
    written = claims.write_verdicts(engine, [(jid, token, _verdict(b)) for jid, b in early], stamp=stamp)
    assert written == [True] * len(early)
    after = _report(api, run_id, n_boot=20)
    assert after["counts"]["by_status"]["done"] == before["counts"]["by_status"]["done"] + len(early)
    assert after["cached"] is False


def test_an_unknown_filter_of_the_aggregate_pages_is_a_422_naming_it(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=2)
    _judge(_judgment_ids(run_id))
    for path in ("item-scores", "order-outcomes"):
        response = api.client.get(f"/v1/runs/{run_id}/{path}", params={"sytem": "a"})
        assert response.status_code == 422, response.text
        assert [e["loc"] for e in response.json()["detail"]] == [["query", "sytem"]]
        ok = api.client.get(f"/v1/runs/{run_id}/{path}", params={"system": "a", "rated": "false", "limit": 10})
        assert ok.status_code == 200, ok.text
    flipped = api.client.get(f"/v1/runs/{run_id}/item-scores", params={"flipped": "true"})
    assert flipped.status_code == 422 and flipped.json()["detail"][0]["loc"] == ["query", "flipped"]
    assert api.client.get("/v1/runs/nope/item-scores", params={"sytem": "a"}).status_code == 404


def test_a_cache_hit_written_with_an_older_stamp_is_in_the_next_report(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    late, early = rows[:2], rows[2:5]
    _judge(late)
    before = _report(api, run_id, n_boot=20)
    assert _report(api, run_id, n_boot=20)["cached"] is True
    old = utcnow() - timedelta(seconds=5)  # the worker's clock read before its lock wait
    monkeypatch.setattr(claims, "utcnow", lambda: old)
    writes = [{"jid": jid, **_verdict(b)} for jid, b in early]
    assert claims.complete_pending_many(session_factory(), writes) == len(early)
    after = _report(api, run_id, n_boot=20)
    assert after["counts"]["by_status"]["done"] == before["counts"]["by_status"]["done"] + len(early)


def test_a_verdict_with_the_same_stamp_as_the_last_write_is_in_the_next_report(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    late, early = rows[:2], rows[2:5]
    engine = get_engine()
    token, _ = claims.claim_many(engine, [jid for jid, _ in early], 600.0)
    _judge(late)
    with session_scope() as session:  # two writers' clocks read in the same microsecond
        stamp = session.scalar(select(func.max(Judgment.updated_at)).where(Judgment.run_id == run_id))
    before = _report(api, run_id, n_boot=20)
    assert claims.write_verdicts(engine, [(jid, token, _verdict(b)) for jid, b in early], stamp=stamp) == [True] * 3
    after = _report(api, run_id, n_boot=20)
    assert after["counts"]["by_status"]["done"] == before["counts"]["by_status"]["done"] + len(early)
