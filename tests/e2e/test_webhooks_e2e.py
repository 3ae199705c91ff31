"""Webhooks through the real stack (API process, Celery worker process, Redis, SQLite and PostgreSQL, the simulator, a
loopback receiver), with auth on: a private-network callback URL is refused (422 naming callback_url), and a run's
``run.finished`` callback arrives once, signed, after the receiver answered 500 twice; every attempt is listed by
``GET /v1/runs/{id}/deliveries`` and the secret is in no answer and no log. A monitor's callback URL is held to the
same rules on POST and PATCH of /v1/monitors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_api import webhooks
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines, session_scope
from judge_api.migrate import upgrade
from judge_simulator.process import SimulatorProcess

from .receiver import WebhookReceiver
from .test_service_e2e import make_items

pytestmark = [pytest.mark.e2e]

SECRET = "whsec-test-0123456789abcdef"


def mint_key(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from judge_api.auth import create_key

    monkeypatch.setenv("DATABASE_URL", database_url)
    reset_settings_cache()
    reset_engines()
    upgrade(database_url)
    with session_scope() as session:
        _, secret = create_key(session, "team-a", "ci", ["submit", "read"])
    reset_engines()
    return secret


def test_run_callback_arrives_once_signed_after_500s_and_private_urls_are_refused(
    db_url: str,
    redis_url: str,
    tmp_path: Path,
    judge_simulator: SimulatorProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    key = mint_key(db_url, monkeypatch)
    headers = {"Authorization": f"Bearer {key}"}
    with WebhookReceiver([500, 500, 200]) as receiver:
        env = {
            "DJ_AUTH": "true",
            "DJ_JUDGE_URL_ALLOWLIST": judge_simulator.base_url,
            "DJ_CALLBACK_URL_ALLOWLIST": receiver.url + "/hooks",
            "DJ_WEBHOOK_BACKOFF": "0.5",
        }
        body = {
            "items": make_items(3, {"bot": 70}),
            "rubrics": ["rsum-single"],
            "judges": [judge],
            "mode": ["single"],
            "aspects": ["consistency"],
            "callback_secret": SECRET,
        }
        service = LiveService(redis_url, db_url, tmp_path / "svc", env_overrides=env)
        with service:
            api = service.api_url
            # private, loopback and link-local hosts not under the allowlist: 422 naming the field, nothing stored
            for url in ("http://10.0.0.8/hook", "http://127.0.0.1:1/x", "http://169.254.169.254/latest", receiver.url):
                refused = httpx.post(f"{api}/v1/runs", json={**body, "callback_url": url}, headers=headers, timeout=30)
                assert refused.status_code == 422, refused.text
                detail = refused.json()["detail"][0]
                assert detail["loc"] == ["body", "callback_url"] and "DJ_CALLBACK_URL_ALLOWLIST" in detail["msg"]
            assert httpx.get(f"{api}/v1/runs", headers=headers, timeout=30).json()["total"] == 0

            callback = receiver.url + "/hooks/dj?tenant=7"
            created = httpx.post(f"{api}/v1/runs", json={**body, "callback_url": callback}, headers=headers, timeout=30)
            assert created.status_code == 202, created.text
            run_id = created.json()["id"]
            receiver.wait_for(lambda got: any(r.answered == 200 for r in got), 90, "the callback's 2xx")
            time.sleep(4 * 1.0 + 2)  # several more sweeps (DJ_SWEEP_INTERVAL=1): nothing is sent again
            got = list(receiver.requests)
            assert [r.answered for r in got] == [500, 500, 200]
            assert all(r.path == "/hooks/dj?tenant=7" for r in got)
            payloads = [webhooks.verify(r.body, r.headers, SECRET) for r in got]
            assert len({p["id"] for p in payloads}) == 1  # one event, three attempts
            assert [p["attempt"] for p in payloads] == [1, 2, 3]
            last = payloads[-1]
            assert last["event"] == "run.finished" and last["rule"] is None
            assert last["run"]["id"] == run_id and last["run"]["status"] == "done"
            assert last["run"]["counts"]["done"] == 3
            assert got[-1].headers[webhooks.EVENT_HEADER] == "run.finished"
            assert got[-1].headers[webhooks.DELIVERY_HEADER] == last["id"]
            # back-off: the second retry waited about twice as long as the first
            gap1, gap2 = got[1].at - got[0].at, got[2].at - got[1].at
            assert gap1 >= 0.4 and gap2 >= 0.9, (gap1, gap2)
            # a tampered body or a wrong secret does not verify
            with pytest.raises(ValueError, match="signature"):
                webhooks.verify(got[-1].body.replace(b"done", b"fail"), got[-1].headers, SECRET)
            with pytest.raises(ValueError, match="signature"):
                webhooks.verify(got[-1].body, got[-1].headers, "another-secret-0123456789")
            with pytest.raises(ValueError, match="replay"):
                webhooks.verify(got[-1].body, got[-1].headers, SECRET, now=time.time() + 3600)

            listed = httpx.get(f"{api}/v1/runs/{run_id}/deliveries", headers=headers, timeout=30)
            assert listed.status_code == 200, listed.text
            page = listed.json()
            assert page["total"] == 1
            delivery = page["items"][0]
            assert delivery["id"] == last["id"] and delivery["status"] == "delivered" and delivery["attempts"] == 3
            assert [(a["attempt"], a["status_code"], a["outcome"]) for a in delivery["history"]] == [
                (1, 500, "failed"),
                (2, 500, "failed"),
                (3, 200, "delivered"),
            ]
            summary = httpx.get(f"{api}/v1/runs/{run_id}", headers=headers, timeout=30).json()
            assert summary["callback_url"] == callback
            for answer in (json.dumps(page), json.dumps(summary)):
                assert SECRET not in answer
        logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "svc").glob("*.log"))
        assert SECRET not in logs
    engine = create_engine(db_url)
    with engine.connect() as connection:
        config = connection.execute(text("SELECT config FROM runs WHERE id = :r"), {"r": run_id}).scalar_one()
        attempts = connection.execute(text("SELECT COUNT(*) FROM webhook_attempts")).scalar_one()
    engine.dispose()
    assert SECRET not in str(config) and attempts == 3


def test_monitor_callback_urls_are_refused_on_post_and_patch(
    db_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With auth on, a monitor's callback may not point at a private, loopback or link-local host outside
    DJ_CALLBACK_URL_ALLOWLIST, nor carry credentials: 422 naming callback_url, no monitor stored, a PATCH changes
    nothing."""
    key = mint_key(db_url, monkeypatch)
    headers = {"Authorization": f"Bearer {key}"}
    allowed = "http://127.0.0.1:9/hooks"  # a loopback prefix the operator listed: allowed though private
    env = {"DJ_AUTH": "true", "DJ_JUDGE_URL_ALLOWLIST": "http://127.0.0.1:9/v1", "DJ_CALLBACK_URL_ALLOWLIST": allowed}
    body = {
        "name": "prod-bot",
        "rubrics": ["rsum-single"],
        "judges": ["openai-compatible:sim-judge@http://127.0.0.1:9/v1"],
        "aspects": ["consistency"],
        "sample_rate": 0.05,
        "callback_secret": SECRET,
    }
    refused_urls = {
        "http://10.0.0.8/hook": "DJ_CALLBACK_URL_ALLOWLIST",
        "http://127.0.0.1:1/x": "DJ_CALLBACK_URL_ALLOWLIST",
        "http://169.254.169.254/latest": "DJ_CALLBACK_URL_ALLOWLIST",
        "http://[::1]:9/hooks/dj": "DJ_CALLBACK_URL_ALLOWLIST",
        "http://user:pass@127.0.0.1:9/hooks/dj": "credentials",
    }
    service = LiveService(redis_url, db_url, tmp_path / "svc", env_overrides=env)
    try:
        service.start_api()  # the refusal is the API's: no worker needed
        monitors = f"{service.api_url}/v1/monitors"
        for url, reason in refused_urls.items():
            refused = httpx.post(monitors, json={**body, "callback_url": url}, headers=headers, timeout=30)
            assert refused.status_code == 422, refused.text
            detail = refused.json()["detail"]
            assert [d["loc"] for d in detail] == [["body", "callback_url"]] and reason in detail[0]["msg"], detail
        assert httpx.get(monitors, headers=headers, timeout=30).json()["total"] == 0

        created = httpx.post(monitors, json={**body, "callback_url": allowed + "/dj"}, headers=headers, timeout=30)
        assert created.status_code == 201, created.text
        monitor = f"{monitors}/{created.json()['id']}"
        stored = httpx.get(monitor, headers=headers, timeout=30).json()
        for url, reason in refused_urls.items():
            patched = httpx.patch(monitor, json={"callback_url": url}, headers=headers, timeout=30)
            assert patched.status_code == 422, patched.text
            detail = patched.json()["detail"]
            assert [d["loc"] for d in detail] == [["body", "callback_url"]] and reason in detail[0]["msg"], detail
        assert httpx.get(monitor, headers=headers, timeout=30).json() == stored
        assert stored["callback_url"] == allowed + "/dj" and SECRET not in json.dumps(stored)
    finally:
        service.stop()
