"""Monitors' retention (issue 25 item 7, issue 36 finding 8, docs/monitoring.md#retention): the judgments of
responses received more than ``retention_days`` ago are deleted once all of them are finished; their verdicts stay in
the hourly sums (``monitor_hourly``, kept by the database as verdicts are written), so the series stays as it was; the
response ids are kept ``DJ_MONITOR_REPLAY_DAYS`` at least, so a replayed batch stays a duplicate. Taken by the
sweeper (under its lock, at most every ``RETENTION_EVERY_S`` per process)."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from judge_api.config import get_settings
from judge_api.db import session_factory, session_scope
from judge_api.repository import alerts as alert_store
from judge_api.repository import monitors as store

log = logging.getLogger(__name__)

RETENTION_EVERY_S = 300.0


def apply(sessions: sessionmaker[Session] | None = None, now: datetime | None = None, chunk: int = store.CHUNK) -> int:
    """Apply every monitor's retention; returns the responses deleted. Each chunk is one transaction."""
    sessions = sessions or session_factory()
    replay_days = get_settings().monitor_replay_days
    with session_scope(sessions) as session:
        monitor_ids = [m.id for m in store.monitors_with_retention(session)]
    deleted = 0
    for monitor_id in monitor_ids:
        while True:
            with session_scope(sessions) as session:
                monitor = store.get_monitor(session, monitor_id)
                if monitor is None:
                    break
                counted = alert_store.counted_marks(session, monitor.id)
                removed = store.apply_retention(session, monitor, now, chunk, replay_days, counted)
            deleted += removed
            if removed < chunk:
                break
    if deleted:
        log.info("monitor retention deleted %d responses (their verdicts kept as hourly sums)", deleted)
    return deleted
