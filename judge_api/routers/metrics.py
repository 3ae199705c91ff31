"""``GET /metrics``: this API process's Prometheus metrics (its sweeper's re-sends) and the service's queue
(depth, unfinished judgments, the oldest one's age, workers alive), read when scraped. Workers serve their own on
``--metrics-port``. Unauthenticated like the health probes: scrape it from inside the deployment's network."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from judge_api import metrics, operations
from judge_api.config import Settings
from judge_api.deps import app_settings

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
def prometheus_metrics(settings: Settings = Depends(app_settings)) -> Response:
    body, content_type = metrics.exposition(
        metrics.Collectors(
            metrics.QueueCollector(lambda: operations.queue_state(settings)),
            metrics.AlertCollector(operations.alert_states),
        )
    )
    return Response(body, media_type=content_type)
