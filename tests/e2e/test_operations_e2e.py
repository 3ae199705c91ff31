"""Operating the real stack (API process, Celery worker process, Redis, the simulator judge): the worker's
``--metrics-port`` exporter and the API's ``/metrics`` agree with the database after real runs, and ``/readyz``
reports the worker's heartbeat, the queue depth and the oldest pending judgment."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService, free_port
from judge_simulator.process import SimulatorProcess

from .test_service_e2e import make_items

pytestmark = [pytest.mark.e2e]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels)."""
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(
        value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name and all((k, v) in sample_labels for k, v in labels.items())
    )


def sql(database_url: str, query: str) -> float:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        value = connection.execute(text(query)).scalar()
    engine.dispose()
    return float(value or 0)


def test_worker_and_api_metrics_equal_the_runs_counts(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"faults": [{"kind": "rate_limit", "first_n": 2, "retry_after": 1}]})
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    port = free_port()
    body = {
        "items": make_items(4, {"good": 91, "bad": 12}),
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "mode": ["single"],
        "aspects": ["consistency"],
    }
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc", env_overrides={"DJ_METRICS_PORT": str(port)})
    with service:
        client = service.client()
        first = client.create_run(body)
        service.wait_run(first["id"], timeout_s=120)
        second = client.create_run(body)  # identical: every judgment from the cache
        summary = service.wait_run(second["id"], timeout_s=120)
        assert summary["cached"] == 8 and summary["provider_calls"] == 0

        worker = scrape(f"http://127.0.0.1:{port}/metrics")
        done = sql(sqlite_url, "SELECT COUNT(*) FROM judgments WHERE status = 'done'")
        calls = sql(sqlite_url, "SELECT SUM(provider_calls) FROM judgments")
        hits = sql(sqlite_url, "SELECT COUNT(*) FROM judgments WHERE cached")
        assert done == 16 and hits == 8 and calls == 8 + 2  # two 429s, retried
        assert total(worker, "dj_judgments_total", judge=judge, status="done") == done
        assert total(worker, "dj_provider_calls_total", judge=judge) == calls
        assert total(worker, "dj_provider_calls_total", outcome="error") == 2
        assert total(worker, "dj_cache_hits_total", judge=judge) == hits
        assert total(worker, "dj_provider_rate_limited_total", judge=judge) == 2
        assert total(worker, "dj_provider_retries_total", judge=judge, kind="rate_limited") == 2
        assert total(worker, "dj_judge_call_duration_seconds_count", judge=judge) == calls
        assert total(worker, "dj_judge_call_tokens_count", judge=judge, direction="output") == 8
        assert total(worker, "dj_judge_call_tokens_sum", direction="input") == sql(
            sqlite_url, "SELECT SUM(input_tokens) FROM judgments WHERE NOT cached"
        )
        assert total(worker, "dj_provider_calls_in_flight", judge=judge) == 0
        assert total(worker, "dj_verdict_write_duration_seconds_count") >= 1
        assert total(worker, "dj_verdict_writes_total") == 8  # the paid judgments go through the writer
        assert judge_simulator.stats()["total_calls"] == calls
        for (name, labels), _ in worker.items():  # bounded labels: never a run or judgment id
            assert not any(value.startswith("run_") for _, value in labels), (name, labels)

        api = scrape(f"{service.api_url}/metrics")
        assert total(api, "dj_pending_judgments") == 0
        assert total(api, "dj_oldest_pending_age_seconds") == 0
        assert total(api, "dj_queue_depth") == 0
        assert total(api, "dj_workers_alive") == 1

        ready = httpx.get(f"{service.api_url}/readyz", timeout=5).json()
        assert ready["ready"] and ready["workers"]["alive"] == 1
        assert ready["workers"]["list"][0]["metrics_port"] == port
        assert ready["queue_depth"] == 0 and ready["pending"] == 0 and ready["oldest_pending_age_s"] is None

        # a backlog with no worker: /readyz and /metrics tell the truth about it
        for process in list(service.workers):
            service.kill_worker(process)
        service.workers.clear()
        third = client.create_run({**body, "items": make_items(2, {"new": 50})})
        time.sleep(1.5)
        ready = httpx.get(f"{service.api_url}/readyz", timeout=5).json()
        assert ready["pending"] == 2 and ready["oldest_pending_age_s"] >= 1.0
        assert ready["queue_depth"] >= 1
        api = scrape(f"{service.api_url}/metrics")
        assert total(api, "dj_pending_judgments") == 2 and total(api, "dj_oldest_pending_age_seconds") >= 1.0
        assert third["n_judgments"] == 2


def test_prefork_worker_sums_its_children(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    """With the prefork pool the judgments run in child processes: each writes its samples to
    PROMETHEUS_MULTIPROC_DIR (``dialogue-judge worker --pool prefork --metrics-port`` makes one) and the worker's
    exporter sums them."""
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    port = free_port()
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc", env_overrides={"DJ_TASK_BATCH": "1"})
    try:
        service.start_api()
        multiproc = tmp_path / "prom"
        multiproc.mkdir()
        service.env_overrides.update(DJ_METRICS_PORT=str(port), PROMETHEUS_MULTIPROC_DIR=str(multiproc))
        service.start_worker(concurrency=2, pool="prefork")
        client = service.client()
        created = client.create_run(
            {
                "items": make_items(6, {"good": 91, "bad": 12}),
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "mode": ["single"],
                "aspects": ["consistency"],
            }
        )
        service.wait_run(created["id"], timeout_s=120)
        worker = scrape(f"http://127.0.0.1:{port}/metrics")
        pids = {p.name.split("_")[-1] for p in multiproc.glob("counter_*.db")}
    finally:
        service.stop()
    assert len(pids) >= 2  # the samples came from more than one process
    assert total(worker, "dj_judgments_total", judge=judge, status="done") == 12
    assert total(worker, "dj_provider_calls_total", judge=judge, outcome="ok") == 12
    assert total(worker, "dj_provider_calls_in_flight", judge=judge) == 0


def test_runs_cli_deletes_prunes_exports_and_imports(sqlite_url: str, redis_url: str, tmp_path: Path) -> None:
    """The README's commands as written, against a live API (no worker: the runs stay pending)."""
    from typer.testing import CliRunner

    from dialogue_judge.cli import app

    runner = CliRunner()
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc")
    try:
        service.start_api()
        client = service.client()
        body = {
            "items": make_items(2, {"a": 50, "b": 60}),
            "rubrics": ["rsum-single"],
            "judges": ["openai-compatible:sim@http://127.0.0.1:9/v1"],
            "aspects": ["consistency"],
        }
        keep, drop, old = (client.create_run(body)["id"] for _ in range(3))
        api = ["--api", service.api_url]

        listed = runner.invoke(app, ["runs", *api])
        assert listed.exit_code == 0 and keep in listed.output

        bundle = tmp_path / "keep.jsonl"
        exported = runner.invoke(app, ["runs", "export", keep, "-o", str(bundle), *api])
        assert exported.exit_code == 0, exported.output
        assert bundle.read_text().count("\n") == 1 + 2 + 4 + 1  # header, items, judgments, rubric; no cache yet

        deleted = runner.invoke(app, ["runs", "delete", drop, keep, *api])
        assert deleted.exit_code == 0, deleted.output
        assert f"{drop} deleted" in deleted.output and "4 judgments" in deleted.output
        assert sql(sqlite_url, f"SELECT COUNT(*) FROM judgments WHERE run_id IN ('{drop}', '{keep}')") == 0
        missing = runner.invoke(app, ["runs", "delete", drop, *api])
        assert missing.exit_code == 2 and "not found" in missing.output

        imported = runner.invoke(app, ["runs", "import", str(bundle), *api])
        assert imported.exit_code == 0, imported.output
        # an import gets a run id of its own (issue 42, finding 11): it says which run it came from
        match = re.search(rf"(run_[0-9a-f]+) imported from {keep}: 2 items, 4 judgments", imported.output)
        assert match is not None, imported.output
        restored = match.group(1)
        assert restored != keep and client.run(restored)["counts"]["pending"] == 4
        again = runner.invoke(app, ["runs", "import", str(bundle), *api])
        assert again.exit_code == 0 and f"imported from {keep}" in again.output  # a second, separate run
        assert restored not in again.output

        engine = create_engine(sqlite_url)
        with engine.begin() as connection:
            connection.execute(text("UPDATE runs SET created_at = '2020-01-01 00:00:00' WHERE id = :r"), {"r": old})
        engine.dispose()
        dry = runner.invoke(app, ["runs", "prune", "--older-than", "30d", "--dry-run", *api])
        assert dry.exit_code == 0 and old in dry.output and "1 runs would be deleted" in dry.output
        pruned = runner.invoke(app, ["runs", "prune", "--older-than", "30d", *api])
        assert pruned.exit_code == 0 and "1 runs deleted" in pruned.output
        assert sql(sqlite_url, f"SELECT COUNT(*) FROM runs WHERE id = '{old}'") == 0
        assert sql(sqlite_url, f"SELECT COUNT(*) FROM runs WHERE id = '{restored}'") == 1
        bad = runner.invoke(app, ["runs", "prune", "--older-than", "soon", *api])
        assert bad.exit_code == 2 and "older_than" in bad.output
    finally:
        service.stop()
