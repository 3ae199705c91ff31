"""What the routes share: the app's settings, a database session, the caller's Principal with a scope check, the
run-or-404 lookup and the submit rate limit.

``create_app`` keeps the settings and the rate limiter it built on ``app.state``; the dependencies below hand them to
the routes, so two apps in one process (tests, ``--workers``) each keep their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal, authenticate
from judge_api.config import Settings
from judge_api.db import session_factory
from judge_api.models import Run
from judge_api.submit_limit import SubmitRateLimit

MAX_OFFSET = 1_000_000_000  # beyond any real table; larger values overflow SQLite's integers


def get_session() -> Iterator[Session]:
    session = session_factory()()
    try:
        yield session
    finally:
        session.close()


def app_settings(request: Request) -> Settings:
    """The settings ``create_app`` was built with."""
    settings: Settings = request.app.state.settings
    return settings


def submit_limit(request: Request) -> SubmitRateLimit:
    """The app's submit rate limit (shared by every API process through Redis when REDIS_URL is set)."""
    limit: SubmitRateLimit = request.app.state.submit_limit
    return limit


def require(scope: str) -> Callable[..., Principal]:
    """A route dependency: the caller's Principal, or 401 (no / bad key) / 403 (key without ``scope``)."""

    def dependency(request: Request, session: Session = Depends(get_session)) -> Principal:
        return authorize(request, session, scope)

    return dependency


def authorize(request: Request, session: Session, scope: str) -> Principal:
    """What ``require(scope)`` does, for a route that opens its session itself: the caller's Principal (also kept
    on ``request.state.principal``), or 401 / 403."""
    client_host = request.client.host if request.client else None
    principal = authenticate(session, request.headers.get("authorization"), client_host)
    if scope not in principal.scopes and "admin" not in principal.scopes:
        has = ", ".join(sorted(principal.scopes)) or "none"
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this API key lacks the '{scope}' scope needed here (it has: {has}); create a key with --scope {scope}",
        )
    request.state.principal = principal
    return principal


def run_or_404(session: Session, run_id: str, principal: Principal) -> Run:
    """The caller's run, or 404 (another project's run is 404 too, so ids do not leak).

    Called inside the route rather than declared as a dependency: dependencies run before the query and body are
    validated, and a malformed request must still answer 422 whether or not the run exists.
    """
    run = repository.get_run(session, run_id, principal.project_id)
    if run is None:
        raise run_not_found(run_id)
    return run


def frame_readable(run: Run, settings: Settings) -> None:
    """409 when the run holds more judgments than a route may read into memory at once (``DJ_MAX_REPORT_JUDGMENTS``
    of the app's settings, as ``GET /v1/limits`` says it): the report, the agreement, the calibrated estimate, the
    label queue, the item scores, the comparisons and the fact labels hold every judgment (or group) of the run.
    Called before anything is read or stored; what pages or streams (the judgments, the exports, a monitor's
    series) has no such limit."""
    limit = settings.report_judgments_limit
    if run.n_judgments > limit:
        raise HTTPException(
            409,
            f"run {run.id} holds {run.n_judgments:,} judgments, more than the {limit:,} this deployment reads into "
            "memory at once (DJ_MAX_REPORT_JUDGMENTS): page or export its judgments (GET /v1/runs/{id}/judgments, "
            "?format=jsonl|csv|parquet); a monitor's run keeps fewer days with retention_days and has its series "
            "(GET /v1/monitors/{id}/series)",
        )


def run_not_found(run_id: str) -> HTTPException:
    return HTTPException(404, f"run {run_id!r} not found")


def refuse_unknown_query(request: Request, known: frozenset[str]) -> None:
    """A 422 naming a query parameter the route does not know (a misspelt filter or option would otherwise be ignored
    and the answer be for the whole run or the defaults: reviews r39, r39g)."""
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise HTTPException(
            422,
            [
                {
                    "loc": ["query", name],
                    "msg": f"unknown query parameter; the known ones are {', '.join(sorted(known))}",
                    "type": "value_error",
                }
                for name in unknown
            ],
        )
