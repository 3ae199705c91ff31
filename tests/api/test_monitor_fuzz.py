"""Fuzz every monitor route with schemathesis (issue 36, finding 7), in process, auth on, SQLite: no 5xx, and a
rejected request stores nothing. Most cases address a stored monitor (sampling every response), so ingestion,
the series, alerts and deliveries run their real code; the posted responses' body has its schema in the OpenAPI
document (a JSON list of responses), so positive cases are stored and sampled."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from sqlalchemy import create_engine, text

from .conftest import ApiFactory
from .test_monitors import monitor_body

pytestmark = pytest.mark.soak  # a load / fuzz test: ./scripts/test.sh -m soak (left out of the default run)

MAX_EXAMPLES = 20  # per operation and mode: ~10 monitor operations x 2 modes, about a minute and a half
TABLES = ("monitors", "monitor_responses", "runs", "items", "judgments", "monitor_alerts", "webhook_deliveries")


class MonitorTarget:
    def __init__(self, database_url: str, monitor_id: str, headers: dict[str, str]) -> None:
        self.monitor_id = monitor_id
        self.headers = headers
        self.engine = create_engine(database_url)

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as connection:
            return {t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}


@pytest.fixture(scope="module")
def schema() -> Any:
    from judge_api.app import create_app

    return schemathesis.openapi.from_asgi("/openapi.json", create_app())


@pytest.fixture
def target(api_factory: ApiFactory) -> Iterator[MonitorTarget]:
    api = api_factory(auth=True, DJ_SWEEP_INTERVAL="3600", DJ_MAX_JUDGMENTS="2000", DJ_MAX_ITEMS="200")
    api.create_key("fuzz", ["admin"], "fuzz")
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, callback_url=None, callback_secret=None)
    created = api.client.post("/v1/monitors", json=body, headers=api.as_key("fuzz"))
    assert created.status_code == 201, created.text
    built = MonitorTarget(api.database_url, created.json()["id"], api.as_key("fuzz"))
    yield built
    built.engine.dispose()


def fuzz_operation(
    operation: Any, mode: GenerationMode, target: MonitorTarget, statuses: dict[str, set[int]]
) -> str | None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case: Any) -> None:
        parameters = case.path_parameters or {}
        # three cases in four address the stored monitor
        if "monitor_id" in parameters and hashlib.sha256(repr(parameters).encode()).digest()[0] % 4 != 0:
            parameters["monitor_id"] = target.monitor_id
        if case.method == "DELETE":  # deleting the stored monitor would leave the other cases nothing to reach
            parameters["monitor_id"] = "mon_not_there"
        before = target.counts()
        response = case.call_and_validate(headers=target.headers, checks=[not_a_server_error])
        statuses.setdefault(operation.label, set()).add(response.status_code)
        if response.status_code >= 400:
            after = target.counts()
            assert after == before, f"{case.method} {case.formatted_path} -> {response.status_code} stored rows"

    try:
        run()
    except Unsatisfiable:
        return None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__name__}: {str(exc)[:3000]}"
    return None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_fuzz_every_monitor_route(schema: Any, target: MonitorTarget, mode: GenerationMode) -> None:
    operations = [result.ok() for result in schema.get_all_operations() if "/monitors" in result.ok().path]
    labels = {operation.label for operation in operations}
    assert "POST /v1/monitors/{monitor_id}/responses" in labels and len(operations) >= 6, labels
    failures = {}
    statuses: dict[str, set[int]] = {}
    for operation in operations:
        problem = fuzz_operation(operation, mode, target, statuses)
        if problem:
            failures[operation.label] = problem
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    if mode == GenerationMode.POSITIVE:  # generated responses were stored and sampled: ingestion ran to its end
        assert 202 in statuses["POST /v1/monitors/{monitor_id}/responses"], statuses
