"""Webhook deliveries in storage (SQLite and PostgreSQL): an event is stored once per event key, four processes'
sweepers sending at once POST it once (the claim is a compare-and-set), a delivered event is never sent again, a
failing receiver gets back-off retries logged one by one, and past the retry window the delivery is given up."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import select, update

from judge_api import webhooks
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.models import WebhookAttempt, WebhookDelivery, utcnow
from judge_api.repository import ensure_project
from judge_api.repository import webhooks as store
from tests.e2e.receiver import WebhookReceiver

SECRET = "a-secret-of-some-length"


def add(url: str, key: str = "run.finished:run_x") -> str | None:
    with session_scope() as session:
        ensure_project(session, "p")
        return store.add_delivery(
            session,
            event_key=key,
            project_id="p",
            event="run.finished",
            url=url,
            secret=SECRET,
            payload={"event": "run.finished", "run": {"id": "run_x"}, "rule": None},
        )


def rows() -> tuple[WebhookDelivery, list[WebhookAttempt]]:
    with session_scope() as session:
        delivery = session.scalars(select(WebhookDelivery)).one()
        attempts = list(session.scalars(select(WebhookAttempt).order_by(WebhookAttempt.attempt)))
        session.expunge_all()
    return delivery, attempts


def test_stored_once_sent_once_by_concurrent_sweepers_and_never_again(store_db: str) -> None:
    with WebhookReceiver([200]) as receiver:
        first = add(receiver.url + "/hook")
        assert first is not None and add(receiver.url + "/hook") is None  # the same event key: not stored twice
        settings = Settings()
        threads = [threading.Thread(target=webhooks.deliver_due, args=(settings,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(receiver.requests) == 1
        assert webhooks.verify(receiver.requests[0].body, receiver.requests[0].headers, SECRET)["id"] == first
        delivery, attempts = rows()
        assert delivery.status == "delivered" and delivery.attempts == 1 and delivery.delivered_at is not None
        assert [(a.attempt, a.status_code, a.outcome) for a in attempts] == [(1, 200, "delivered")]
        # due again on paper (a stale next_attempt_at): a delivered event is never claimed again
        with session_scope() as session:
            session.execute(update(WebhookDelivery).values(next_attempt_at=utcnow() - timedelta(hours=1)))
        assert webhooks.deliver_due(settings) == {}
        assert len(receiver.requests) == 1


def test_failures_back_off_are_logged_and_given_up_after_the_window(store_db: str) -> None:
    with WebhookReceiver([500]) as receiver:
        add(receiver.url + "/hook")
        settings = Settings(DJ_WEBHOOK_BACKOFF=60, DJ_WEBHOOK_RETRY_FOR=3600)
        assert webhooks.deliver_due(settings) == {"failed": 1}
        assert webhooks.deliver_due(settings) == {}  # not due before its back-off
        delivery, attempts = rows()
        assert delivery.status == "pending" and delivery.last_error == "HTTP 500"
        wait = (delivery.next_attempt_at - attempts[0].started_at).total_seconds()
        assert 59 <= wait <= 62
        # an hour later the next wait would end past the retry window: the attempt is the last one
        with session_scope() as session:
            session.execute(
                update(WebhookDelivery).values(
                    next_attempt_at=utcnow() - timedelta(seconds=1), created_at=utcnow() - timedelta(minutes=59)
                )
            )
        assert webhooks.deliver_due(settings) == {"failed": 1}
        delivery, attempts = rows()
        assert delivery.status == "failed" and [a.attempt for a in attempts] == [1, 2]
        assert len(receiver.requests) == 2
        assert webhooks.deliver_due(settings) == {}


def test_a_url_no_longer_allowed_is_refused_at_send_time(store_db: str, settings_env: object) -> None:
    add("http://10.0.0.8/hook")
    settings = Settings(DJ_AUTH=True)
    assert webhooks.deliver_due(settings) == {"refused": 1}
    delivery, attempts = rows()
    assert attempts[0].outcome == "refused" and "private" in (attempts[0].error or "")
    assert delivery.status == "pending"
