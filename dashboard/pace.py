"""A run's pace on the runs page: judgments finished per second and the time left, from the counts the API reports
(pure functions; the page keeps the observations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

PACE_WINDOW_S = 60.0  # throughput over the last minute of observations


def finished_count(run: dict[str, Any]) -> int:
    counts = run.get("counts") or {}
    return sum(int(counts.get(s) or 0) for s in ("done", "failed", "unparseable", "cancelled"))


def pace(run: dict[str, Any], history: list[tuple[float, int]], now: float) -> tuple[float | None, float | None]:
    """(judgments finished per second, seconds left) of a run. ``history``: (time, finished) observations of this
    page session, the last ``PACE_WINDOW_S`` of which give the current throughput; with fewer than two, the
    average since the run was created. None where it cannot be told (nothing finished yet); ETA 0 when done."""
    finished = finished_count(run)
    remaining = max(0, int(run.get("n_judgments") or 0) - finished)
    recent = [(t, n) for t, n in history if now - t <= PACE_WINDOW_S]
    rate: float | None = None
    if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
        rate = max(0.0, (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0]))
    else:
        created = utc_seconds(run.get("created_at"))
        until = utc_seconds(run.get("finished_at")) or now
        if created is not None and until > created and finished:
            rate = finished / (until - created)
    if remaining == 0:
        return rate, 0.0
    if not rate:
        return rate, None
    return rate, remaining / rate


def utc_seconds(value: Any) -> float | None:
    """An API time (ISO 8601, UTC; naive means UTC) as a Unix time."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
