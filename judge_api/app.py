"""The HTTP API (OpenAPI docs at /docs). ``create_app`` only assembles it: settings, middleware, exception handlers,
the routers and the lifespan (migrate, load rubrics, warm the statistics up, start the sweeper).

Where things live: a route in ``judge_api/routers/<resource>.py``, what routes share in ``deps.py``, request guards in
``middleware.py`` and ``guards.py``, error bodies in ``errors.py``, the submit rate limit in ``submit_limit.py``,
publishing a stored run and the sweeper in ``sweeper.py`` (over the broker code in ``queue.py``). ``judge_api``
imports nothing from ``workers``, ``dashboard`` or ``dialogue_judge`` (tests/api/test_layout.py checks).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from judge_api import __version__, logs, tracing
from judge_api.auth import AUTH_OFF_NOTICE
from judge_api.config import Settings, get_settings
from judge_api.errors import install_exception_handlers
from judge_api.middleware import BodySizeLimit, InputGuard
from judge_api.migrate import upgrade
from judge_api.routers import ROUTERS
from judge_api.rubrics import get_registry
from judge_api.secrets import install_log_scrubber
from judge_api.stats.report import warm_up as warm_up_reports
from judge_api.submit_limit import SubmitRateLimit
from judge_api.sweeper import OtlpProcessor, Sweeper, redis_client

log = logging.getLogger(__name__)


def _start_sweeper(settings: Settings) -> Sweeper | None:
    """The API's own sweeper re-sends judgments whose publishing failed, also when no worker is up yet."""
    if settings.resolved_redis_url() is None:
        return None
    sweeper = Sweeper(settings, redis_client(settings), otlp=settings.otlp_process == "all")
    sweeper.start()
    return sweeper


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    if not settings.auth_enabled:
        log.warning("%s; set DJ_AUTH=true to require API keys", AUTH_OFF_NOTICE)
    upgrade(settings.resolved_database_url())
    tracing.setup("dialogue-judge-api")
    get_registry(refresh=True)
    try:
        warm_up_reports()  # ~0.2 s here instead of in the first GET /report
    except Exception as exc:  # a report still works without it, only its first one is slower
        log.warning("report warm-up failed: %s", exc)
    sweeper = None
    try:
        sweeper = _start_sweeper(settings)
    except Exception as exc:
        log.warning("sweeper not started: %s", exc)
    processor = None
    if sweeper is None and settings.otlp_process == "all":  # no Redis: the spans received are processed all the same
        processor = OtlpProcessor(settings, threading.Event())
        processor.start()
    freeze_startup_objects()
    yield
    gc.unfreeze()  # an app started in a test process: what it kept alive can be collected again
    if sweeper is not None:
        sweeper.stop_event.set()
    if processor is not None:
        processor.stop_event.set()


def freeze_startup_objects() -> None:
    """Move everything alive after startup (modules, schemas, rubrics, the statistics warmed up: some 250,000
    objects) out of the cyclic garbage collector's reach. They live as long as the process, but each full collection
    walked them all: about 0.15 s of CPU inside whichever request triggered it (docs/monitoring.md#ingestion-speed)."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    install_log_scrubber()
    logs.configure(settings.log_format)
    app = FastAPI(
        title="dialogue-judge",
        version=__version__,
        description="Scores chatbot responses for dialogue consistency with LLM judges.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.submit_limit = SubmitRateLimit(settings.resolved_redis_url())
    install_exception_handlers(app)  # its DatabaseOutages middleware first: the innermost
    app.add_middleware(InputGuard)
    app.add_middleware(BodySizeLimit)  # added last: runs first
    for router in ROUTERS:
        app.include_router(router)
    return app


app = create_app()
