"""One ``APIRouter`` per resource; ``judge_api.app.create_app`` includes them in the order of ``ROUTERS``.

A route lives in the module named after its resource: ``POST /v1/runs`` in ``runs.py``, ``GET
/v1/runs/{id}/report`` in ``reports.py``.
"""

from __future__ import annotations

from fastapi import APIRouter

from judge_api.routers import (
    alerts,
    bundles,
    comparisons,
    deliveries,
    facts,
    health,
    item_aggregates,
    judgments,
    label_queue,
    limits,
    metrics,
    monitors,
    otlp,
    ratings,
    reports,
    rubrics,
    runs,
    verdicts,
)

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    metrics.router,
    limits.router,
    rubrics.router,
    bundles.router,
    runs.router,
    judgments.router,
    item_aggregates.router,
    comparisons.router,
    reports.router,
    facts.router,
    ratings.router,
    label_queue.router,
    verdicts.router,
    monitors.router,
    otlp.router,
    alerts.router,
    deliveries.router,
)
