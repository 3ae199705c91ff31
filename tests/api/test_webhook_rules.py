"""Webhook rules without a network: where a callback may go (auth off: anywhere http(s); auth on: a public host or
a DJ_CALLBACK_URL_ALLOWLIST prefix), the request fields' validation (422 naming the field, nothing stored), the
retry schedule, and that the secret is never stored in the run's config nor returned."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from judge_api.config import Settings
from judge_api.webhooks import callback_url_refusal, next_attempt, sign

from .conftest import ApiFactory, run_body

ADDRESSES = {
    "hooks.example.org": ["93.184.216.34"],
    "intranet.corp": ["10.1.2.3"],
    "mixed.example.org": ["93.184.216.34", "192.168.0.7"],
    "v6.example.org": ["2606:2800:220:1:248:1893:25c8:1946"],
}


def fake_resolve(host: str) -> list[str]:
    if host in ADDRESSES:
        return ADDRESSES[host]
    try:
        import ipaddress

        return [str(ipaddress.ip_address(host))]
    except ValueError:
        raise OSError("no such host") from None


@pytest.mark.parametrize(
    ("auth", "allowlist", "url", "allowed"),
    [
        (False, "", "http://127.0.0.1:8080/hook", True),
        (False, "", "http://10.0.0.8/hook", True),
        (True, "", "https://hooks.example.org/dj", True),
        (True, "", "https://v6.example.org/dj", True),
        (True, "", "http://10.0.0.8/hook", False),
        (True, "", "http://127.0.0.1:8080/hook", False),
        (True, "", "http://169.254.169.254/latest/meta-data", False),
        (True, "", "http://[::1]:8080/hook", False),
        (True, "", "http://[::ffff:10.0.0.1]/hook", False),
        (True, "", "http://0.0.0.0/hook", False),
        # IPv6 forms that carry a private or loopback IPv4 address reach it through a translator or tunnel
        (True, "", "http://[64:ff9b::a00:8]/hook", False),
        (True, "", "http://[64:ff9b::a9fe:a9fe]/hook", False),
        (True, "", "http://[::7f00:1]/hook", False),
        (True, "", "http://[2002:7f00:1::]/hook", False),
        (True, "", "http://[::ffff:7f00:1]/hook", False),
        (True, "", "http://[64:ff9b:1::808:808]/hook", False),
        (True, "", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook", False),
        # issue 36 review: the IPv4-translated form (SIIT, ::ffff:0:a.b.c.d) and deprecated site-local fec0::/10
        (True, "", "http://[::ffff:0:7f00:1]/hook", False),
        (True, "", "http://[::ffff:0:a00:8]/hook", False),
        (True, "", "http://[fec0::1]/hook", False),
        (True, "", "http://[::ffff:0:808:808]/hook", True),
        (True, "", "http://[64:ff9b::808:808]/hook", True),
        (True, "", "http://[2002:808:808::]/hook", True),
        (True, "", "http://[::ffff:8.8.8.8]/hook", True),
        (True, "", "https://intranet.corp/hook", False),
        (True, "", "https://mixed.example.org/hook", False),
        (True, "", "https://unknown.invalid/hook", False),
        (True, "http://10.0.0.8/hooks", "http://10.0.0.8/hooks/dj", True),
        (True, "http://10.0.0.8/hooks", "http://10.0.0.8/hooksx", False),
        (True, "http://10.0.0.8/hooks", "http://10.0.0.9/hooks/dj", False),
        (False, "", "ftp://hooks.example.org/dj", False),
    ],
)
def test_where_a_callback_may_go(auth: bool, allowlist: str, url: str, allowed: bool) -> None:
    settings = Settings(DJ_AUTH=auth, DJ_CALLBACK_URL_ALLOWLIST=allowlist)
    assert (callback_url_refusal(url, settings, fake_resolve) is None) is allowed


def test_retry_schedule_doubles_caps_and_stops_after_a_day() -> None:
    settings = Settings(DJ_WEBHOOK_BACKOFF=30, DJ_WEBHOOK_BACKOFF_MAX=3600)
    created = datetime(2026, 1, 1)
    waits = [(next_attempt(settings, created, k, created) - created).total_seconds() for k in range(1, 9)]  # type: ignore[operator]
    assert waits == [30, 60, 120, 240, 480, 960, 1920, 3600]
    late = created + timedelta(hours=23, minutes=59)
    assert next_attempt(settings, created, 30, late) is None  # the next try would fall after 24 h: given up
    assert next_attempt(settings, created, 30, created + timedelta(hours=20)) is not None


def test_signature_is_the_hmac_of_the_body() -> None:
    # RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?")
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign(b"what do ya want for nothing?", "Jefe") == f"sha256={expected}"


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"callback_url": "https://hooks.example.org/dj"}, "callback_secret", "required with callback_url"),
        ({"callback_secret": "s" * 20}, "callback_secret", "without callback_url"),
        ({"callback_url": "https://hooks.example.org/dj", "callback_secret": "short"}, "callback_secret", "16"),
        ({"callback_url": "hooks.example.org/dj", "callback_secret": "s" * 20}, "callback_url", "http"),
        (
            {"callback_url": "https://u:p@hooks.example.org/", "callback_secret": "s" * 20},
            "callback_url",
            "credentials",
        ),
    ],
)
def test_bad_callback_fields_are_422_naming_the_field(
    api_factory: ApiFactory, extra: dict[str, str], field: str, message: str
) -> None:
    api = api_factory()
    before = api.row_counts()
    response = api.client.post("/v1/runs", json={**run_body(), **extra})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert any(d["loc"][-1] == field and message in d["msg"] for d in detail), detail
    assert api.row_counts() == before


def test_auth_on_refuses_a_private_callback_and_the_secret_is_never_returned(api_factory: ApiFactory) -> None:
    api = api_factory(auth=True)
    api.create_key("p1", ["submit", "read"], "k")
    secret = "a-long-webhook-secret-123"
    before = api.row_counts()
    refused = api.client.post(
        "/v1/runs",
        json=run_body(callback_url="http://192.168.1.20:9000/hook", callback_secret=secret),
        headers=api.as_key("k"),
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "callback_url"]
    assert api.row_counts() == before
    allowed = api_factory(auth=False)
    run = allowed.submit(body=run_body(callback_url="http://192.168.1.20:9000/hook", callback_secret=secret))
    summary = allowed.client.get(f"/v1/runs/{run['id']}")
    assert summary.json()["callback_url"] == "http://192.168.1.20:9000/hook"
    assert secret not in summary.text
    deliveries = allowed.client.get(f"/v1/runs/{run['id']}/deliveries")
    assert deliveries.status_code == 200 and deliveries.json()["total"] == 0
    assert allowed.client.get("/v1/runs/nope/deliveries").status_code == 404


MONITOR_SECRET = "a-long-webhook-secret-123"


@pytest.mark.parametrize(
    ("auth", "url", "reason"),
    [
        (True, "http://192.168.1.20:9000/hook", "DJ_CALLBACK_URL_ALLOWLIST"),
        (True, "http://127.0.0.1:8080/hook", "DJ_CALLBACK_URL_ALLOWLIST"),
        (True, "http://169.254.169.254/latest/meta-data", "DJ_CALLBACK_URL_ALLOWLIST"),
        (True, "https://u:p@hooks.example.org/dj", "credentials"),
        (False, "https://u:p@hooks.example.org/dj", "credentials"),
        (False, "https://token@hooks.example.org/dj", "credentials"),
    ],
)
def test_a_monitor_callback_is_refused_as_a_runs_on_post_and_patch(
    api_factory: ApiFactory, auth: bool, url: str, reason: str
) -> None:
    """A monitor's callback follows the runs' rules: with auth on no private host outside the allowlist, and never
    credentials in the URL; 422 naming callback_url, no monitor stored, a PATCH leaves the monitor as it was."""
    from tests.api.test_monitors import monitor_body, table_counts

    # the example host is allowed by prefix, so no DNS is needed for the accepted monitor
    api = api_factory(auth=auth, DJ_CALLBACK_URL_ALLOWLIST="https://hooks.example.org")
    headers: dict[str, str] = {}
    if auth:
        api.create_key("p1", ["submit", "read"], "k")
        headers = api.as_key("k")
    before = table_counts(api.database_url)
    body = monitor_body(callback_url=url, callback_secret=MONITOR_SECRET)
    refused = api.client.post("/v1/monitors", json=body, headers=headers)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert [d["loc"] for d in detail] == [["body", "callback_url"]], detail
    assert reason in detail[0]["msg"]
    assert table_counts(api.database_url) == before

    created = api.client.post("/v1/monitors", json=monitor_body(), headers=headers)
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]
    stored = api.client.get(f"/v1/monitors/{monitor_id}", headers=headers).json()
    counts = table_counts(api.database_url)
    for patch in ({"callback_url": url}, {"callback_url": url, "callback_secret": MONITOR_SECRET}):
        patched = api.client.patch(f"/v1/monitors/{monitor_id}", json=patch, headers=headers)
        assert patched.status_code == 422, patched.text
        detail = patched.json()["detail"]
        assert [d["loc"] for d in detail] == [["body", "callback_url"]], detail
        assert reason in detail[0]["msg"]
    after = api.client.get(f"/v1/monitors/{monitor_id}", headers=headers).json()
    assert after == stored and after["callback_url"] == "https://hooks.example.org/dj"
    assert table_counts(api.database_url) == counts
