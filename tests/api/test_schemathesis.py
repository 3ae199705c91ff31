"""Fuzz every operation of the OpenAPI spec with schemathesis, in process (ASGI), auth on, on SQLite and
PostgreSQL: no 5xx, a rejected request stores nothing, and the stored runs stay whole (items and judgments as
counted on the run)."""

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

from dialogue_judge.testing import OwnRedis

from .conftest import ApiFactory, run_body

MAX_EXAMPLES = 20  # per operation and mode; ~15 operations x 2 modes x 2 databases stays under 2 minutes


class Target:
    def __init__(self, database_url: str, run_id: str, headers: dict[str, str]) -> None:
        self.database_url = database_url
        self.run_id = run_id
        self.headers = headers
        self.engine = create_engine(database_url)

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as connection:
            return {
                t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
                for t in ("runs", "items", "judgments", "human_ratings", "projects", "api_keys")
            }

    def broken_runs(self) -> list[Any]:
        """Runs whose stored items or judgments differ from the counts the run was created with."""
        query = text(
            "SELECT r.id, r.n_items, r.n_judgments, "
            "(SELECT COUNT(*) FROM items i WHERE i.run_id = r.id), "
            "(SELECT COUNT(*) FROM judgments j WHERE j.run_id = r.id) FROM runs r"
        )
        with self.engine.connect() as connection:
            return [tuple(r) for r in connection.execute(query) if r[1] != r[3] or r[2] != r[4]]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, api_factory: ApiFactory, own_redis: OwnRedis) -> Iterator[Target]:
    """The app with auth on, a real Redis database (so /readyz is honestly ready) and one stored run."""
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    api = api_factory(
        auth=True,
        database_url=url,
        REDIS_URL=own_redis.url,
        DJ_SWEEP_INTERVAL="3600",
        DJ_MAX_JUDGMENTS="2000",
        DJ_MAX_ITEMS="200",
    )
    api.create_key("fuzz", ["admin"], "fuzz")
    run_id = api.submit("fuzz", run_body(n_items=2))["id"]
    built = Target(api.database_url, run_id, api.as_key("fuzz"))
    yield built
    built.engine.dispose()


def fuzz_operation(operation: Any, mode: GenerationMode, target: Target) -> str | None:
    """Run MAX_EXAMPLES generated cases against one operation; the first failure as text, else None."""

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
        # half of the cases address the stored run, so deeper code (filters, report, ratings) is reached
        if "run_id" in (case.path_parameters or {}):
            digest = hashlib.sha256(repr(case.path_parameters).encode()).digest()
            if digest[0] % 2 == 0:
                case.path_parameters["run_id"] = target.run_id
        before = target.counts()
        response = case.call_and_validate(headers=target.headers, checks=[not_a_server_error])
        after = target.counts()
        label = f"{case.method} {case.formatted_path} -> {response.status_code}"
        if response.status_code >= 400:
            assert after == before, f"{label} stored rows: {before} -> {after}"
        assert not target.broken_runs(), label

    try:
        run()
    except Unsatisfiable:  # negative mode: the operation has no input that could be made invalid
        return None
    except BaseException as exc:  # hypothesis re-raises the (shrunk) failing example, often as a group
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__name__}: {str(exc)[:3000]}"
    return None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_fuzz_every_operation(target: Target, mode: GenerationMode) -> None:
    from judge_api.app import create_app

    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 14
    failures = {}
    for operation in operations:
        problem = fuzz_operation(operation, mode, target)
        if problem:
            failures[operation.label] = problem
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
