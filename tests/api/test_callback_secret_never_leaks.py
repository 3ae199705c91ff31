"""A callback secret never leaves the service (issue 36): with a run and a monitor that carry one, their deliveries
stored and attempted, every GET route of the app (exports, reports, lists, deliveries, /metrics ...) is read with a
read-only key and with an admin key, and neither any response nor any log record holds the planted secret."""

from __future__ import annotations

import logging
import re

import pytest

from judge_api import webhooks
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.repository import webhooks as store
from tests.e2e.receiver import WebhookReceiver

from .conftest import ApiFactory, run_body, served_routes
from .test_monitors import monitor_body

PLANTED = "TOP-SECRET-HMAC-KEY-123-planted"


def test_no_route_and_no_log_holds_a_callback_secret(api_factory: ApiFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver([500]) as receiver:
        hook = receiver.url + "/hook"
        api = api_factory(auth=True, DJ_CALLBACK_URL_ALLOWLIST=receiver.url)
        api.create_key("alpha", ["submit", "read"], "submit")
        api.create_key("alpha", ["read"], "read")
        api.create_key("alpha", ["admin"], "admin")
        run = api.submit("submit", run_body(callback_url=hook, callback_secret=PLANTED))
        created = api.client.post(
            "/v1/monitors",
            json=monitor_body(callback_url=hook, callback_secret=PLANTED),
            headers=api.as_key("submit"),
        )
        assert created.status_code == 201, created.text
        monitor = created.json()
        with session_scope() as session:
            for key, ids in ((f"run.finished:{run['id']}", {"run_id": run["id"]}), ("alert.opened:1", {})):
                store.add_delivery(
                    session,
                    event_key=key,
                    project_id="alpha",
                    event=key.split(":")[0],
                    url=hook,
                    secret=PLANTED,
                    payload={"event": key.split(":")[0], "rule": None},
                    monitor_id=None if ids else monitor["id"],
                    **ids,
                )
        settings = Settings(DJ_AUTH=True, DJ_CALLBACK_URL_ALLOWLIST=receiver.url)
        assert webhooks.deliver_due(settings) == {"failed": 2}  # attempts logged, with the receiver's 500
        assert len(receiver.requests) == 2

    values = {"run_id": run["id"], "monitor_id": monitor["id"], "rubric_id": "rsum-single", "version": "1"}
    read: dict[str, int] = {}
    for method, path in served_routes(api.client.app):  # type: ignore[arg-type]
        if method != "GET":
            continue
        url = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
        for key in ("read", "admin"):
            response = api.client.get(url, headers=api.as_key(key))
            assert response.status_code < 500 or path == "/readyz", (url, response.text)  # no Redis here: 503
            assert PLANTED not in response.text, (url, key)
            if response.status_code == 200:
                read[path] = read.get(path, 0) + 1
    # what the secret could have leaked through was read, not refused
    for path in (
        "/v1/runs/{run_id}/export",
        "/v1/runs/{run_id}",
        "/v1/runs",
        "/v1/runs/{run_id}/report",
        "/v1/runs/{run_id}/deliveries",
        "/v1/monitors",
        "/v1/monitors/{monitor_id}",
        "/v1/monitors/{monitor_id}/deliveries",
        "/metrics",
    ):
        assert read.get(path), (path, read)
    assert PLANTED not in caplog.text


def test_a_judge_url_carrying_credentials_is_refused_not_shown_to_every_reader(api_factory: ApiFactory) -> None:
    """A judge's base URL with a user and password (``http://u:pw@host/v1``) was accepted and shown in the run's
    config to every read key, and in exports (issue 36 review). It is a 422 naming the field, without echoing the
    password, and nothing is stored; the server's key goes in OPENAI_COMPATIBLE_API_KEY."""
    api = api_factory(DJ_JUDGE_URL_ALLOWLIST="http://u:S3CRET-PW@127.0.0.1:9/v1")
    before = api.row_counts()
    judge = "openai-compatible:sim-judge@http://u:S3CRET-PW@127.0.0.1:9/v1"
    for path, body in (("/v1/runs", run_body(judges=[judge])), ("/v1/monitors", monitor_body(judges=[judge]))):
        answer = api.client.post(path, json=body)
        assert answer.status_code == 422, answer.text
        assert "judges" in answer.text and "credentials" in answer.text
        assert "S3CRET-PW" not in answer.text
    assert api.row_counts() == before
