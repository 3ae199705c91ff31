"""Review r56b of ``DJ_MAX_REPORT_JUDGMENTS`` (commit 5f03ad9): the routes that read a run's every judgment into the
API's memory refuse a run above the limit with a 409 naming the setting, the run's count and the limit.

Findings (failing until fixed):

* the alert rules the sweeper evaluates in every API process: a floor rule (or a ``compare.by: time`` one) reads
  every judgment of its stream since id 0, whatever its window, at each evaluation: a monitor's run read whole
  past the limit with nobody asking (``test_a_floor_rule_reads_the_monitors_whole_run_at_every_evaluation``);
* ``GET /v1/runs/{id}/facts`` reads every finished fact-check judgment of the run (``repository.fact_labels_frame``:
  each judgment's ``details`` JSON, one row per labelled fact) and pages the frame in Python, whatever the run's
  size;
* the aggregates the 409 points to (``/item-scores``; ``/score-deltas`` and ``/worse-items`` alike) read one row
  per (item, system, aspect, judge) of the whole run and page in Python: a monitor's run has one judgment per such
  group, so it is read whole;
* a running run's provisional report (the settle window) is served to one reader and refused to another on the
  very same state once the limit is below the run's count;
* ``GET /v1/limits`` shows the app's settings, ``frame_readable`` enforces the process environment's.

What held (passing): ``Run.n_judgments`` equals the run's judgment rows after creation, verdict imports (a repeated
file included), retries, bundle import, deletion, monitor ingestion and retention pruning; the 409 of the report of
a run found finished at that request stores no ``finished_at`` stamp and no kept report; the limit equal to the
count reads the run; a monitor back within the limit after retention is read again; the CLI shows the 409 as one
error line (exit 2).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from judge_api import repository
from judge_api.routers import facts as facts_router
from judge_api.routers import reports as reports_router

from .conftest import Api, ApiFactory, item, run_body
from .test_monitors import ingest, response, sampling_monitor


def _sql(api: Api, statement: str, **params: Any) -> list[Any]:
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            result = connection.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        engine.dispose()


def _stored_count(api: Api, run_id: str) -> tuple[int, int]:
    """(``runs.n_judgments``, the run's judgment rows)."""
    (n,) = _sql(api, "SELECT n_judgments FROM runs WHERE id = :r", r=run_id)[0]
    (rows,) = _sql(api, "SELECT count(*) FROM judgments WHERE run_id = :r", r=run_id)[0]
    return int(n), int(rows)


def _fact_check_run(api: Api, n_items: int) -> str:
    """A fact-check run whose every judgment is finished with two labelled facts (as a worker writes them)."""
    facts = [{"id": "rex", "text": "The user has a dog called Rex.", "source": "session 1 turn 1"}]
    body = run_body(n_items, rubrics=["fact-check"], aspects=None)
    body["items"] = [item(i, facts=facts) for i in range(n_items)]
    run_id = api.submit(body=body)["id"]
    details = {
        "facts": [
            {"id": "rex", "label": "supported", "evidence": "Rex", "source": "session 1 turn 1"},
            {"id": "other", "label": "contradicted", "evidence": "cat", "source": "persona.user"},
        ],
        "contradiction_count": 1,
        "contradiction_rate": 0.5,
        "retention_rate": 1.0,
    }
    _sql(
        api,
        "UPDATE judgments SET status = 'done', score = 50, details = :d WHERE run_id = :r",
        d=json.dumps(details),
        r=run_id,
    )
    return run_id


def test_fact_labels_of_a_run_over_the_limit_are_not_read_whole(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 4 fact-check judgments with ``DJ_MAX_REPORT_JUDGMENTS=1``: its report is refused, yet a page of one
    fact label reads all 4 judgments' details (8 label rows) into the API's memory. Fixed: a 409 as the report's,
    or a read of the asked page only (the database pages it)."""
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="1")
    run_id = _fact_check_run(api, 2)
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 409  # the run is over the limit
    read_whole: list[int] = []
    whole = repository.fact_labels_frame

    def spy(session: Any, rid: str) -> Any:
        frame = whole(session, rid)
        read_whole.append(len(frame))
        return frame

    monkeypatch.setattr(facts_router.repository, "fact_labels_frame", spy)
    response = api.client.get(f"/v1/runs/{run_id}/facts", params={"limit": 1})
    assert response.status_code in (200, 409), response.text
    assert not read_whole, (
        f"GET /facts read the whole run's fact labels ({read_whole[0]} rows of {_stored_count(api, run_id)[1]} "
        f"judgments) for a run over DJ_MAX_REPORT_JUDGMENTS=1; answered {response.status_code}"
    )


def test_a_provisional_report_is_refused_to_one_reader_and_served_to_another_on_the_same_state(
    api_factory: ApiFactory, settings_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running run (4 pending judgments) whose report was kept within the settle window (``DJ_REPORT_SETTLE_SECONDS
    =2``) under a larger limit; the limit is then lowered below its count (an operator's change, or the upgrade to
    this commit for a monitor's run already past 2,000,000). Nothing of the run changes. The reader that recomputes
    the provisional report gets the 409, a reader arriving while another request of the process recomputes it is
    served the kept report, computed on this very state: two answers for one state. Fixed: both get the same (the
    check applied to the provisional entry served as well, or the kept entry served to both)."""
    api = api_factory(DJ_REPORT_SETTLE_SECONDS="2", DJ_REPORT_FRESH_SECONDS="0")
    run_id = api.submit(body=run_body(2))["id"]
    first = api.client.get(f"/v1/runs/{run_id}/report")
    assert first.status_code == 200 and first.json()["cached"] is False, first.text
    time.sleep(2.3)  # the settle window passes: the kept entry is provisional from now on
    run = api.client.get(f"/v1/runs/{run_id}").json()
    assert run["n_judgments"] == 4 and run["finished_at"] is None
    # the same database served by an app with the lower limit; another request of this process is recomputing it
    # (reports._claim says so): this reader is served the kept entry meanwhile
    with _app_with(DJ_MAX_REPORT_JUDGMENTS=3, DJ_REPORT_SETTLE_SECONDS=2.0, DJ_REPORT_FRESH_SECONDS=0.0) as lowered:
        with monkeypatch.context() as patched:
            patched.setattr(reports_router, "_claim", lambda *_: False)
            meanwhile = lowered.get(f"/v1/runs/{run_id}/report")
        alone = lowered.get(f"/v1/runs/{run_id}/report")
    answers = {meanwhile.status_code, alone.status_code}
    assert len(answers) == 1, (
        f"same state, two answers: {meanwhile.status_code} while another request recomputes it, "
        f"{alone.status_code} to the recomputing request ({alone.text[:160]})"
    )


def _monitor_like_run(api: Api, n_items: int) -> str:
    """A run shaped like a monitor's: one response (system) per item, one aspect, one judge: one judgment per item,
    every one done."""
    body = run_body(n_items)
    body["items"] = [item(i, systems=("bot",)) for i in range(n_items)]
    run_id = api.submit(body=body)["id"]
    _sql(
        api,
        "UPDATE judgments SET status = 'done', score = 5, scale_min = 1, scale_max = 10 WHERE run_id = :r",
        r=run_id,
    )
    return run_id


@pytest.mark.parametrize("route", ["/item-scores", "/score-deltas", "/worse-items"])
def test_the_aggregates_the_refusal_points_to_read_a_monitor_shaped_run_whole(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """The 409 sends a run over the limit to ``/item-scores`` (docs/operations.md: aggregates "have no such limit").
    A monitor's run has one judgment per response and aspect, so its (item, system, aspect, judge) groups are its
    judgments: ``/item-scores?limit=1`` reads every group into Python dicts (and keeps them in the process cache up
    to 10,000 rows) and pages in Python; ``/score-deltas`` and ``/worse-items`` read every group of both runs. Here
    6 judgments over a limit of 2: the one-row page reads 6 groups. Fixed: the page read from the database, or the
    same 409 past the limit."""
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="2")
    run_id = _monitor_like_run(api, 6)
    baseline = _monitor_like_run(api, 6)
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 409
    from judge_api.repository import item_aggregates

    read: list[int] = []
    for name in ("item_score_groups", "judge_score_sums"):
        original = getattr(item_aggregates, name)

        def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            rows = _original(*args, **kwargs)
            read.append(len(rows))
            return rows

        monkeypatch.setattr(item_aggregates, name, spy)
    params: dict[str, Any] = {"limit": 1} if route != "/score-deltas" else {"n_boot": 10}
    if route != "/item-scores":
        params["baseline"] = baseline
    response = api.client.get(f"/v1/runs/{run_id}{route}", params=params)
    assert response.status_code in (200, 409), response.text
    assert response.status_code == 409 or max(read, default=0) <= 2, (
        f"{route} of a run of 6 judgments over DJ_MAX_REPORT_JUDGMENTS=2 read {read} rows per run "
        "(one per judgment) into the API's memory"
    )


def test_the_limit_enforced_is_the_one_get_v1_limits_shows(api_factory: ApiFactory) -> None:
    """``create_app(settings)`` keeps its settings on ``app.state`` and the routes take them from there, so two apps
    in one process keep their own (judge_api/deps.py). ``GET /v1/limits`` reads ``max_judgments_per_report`` from
    the app's settings, ``frame_readable`` from the process's environment (``get_settings()``): an app built with
    ``DJ_MAX_REPORT_JUDGMENTS=3`` says 3 and reads a run of 4 whole."""
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.config import Settings

    api = api_factory()
    run_id = api.submit(body=run_body(2))["id"]
    with TestClient(create_app(Settings(DJ_MAX_REPORT_JUDGMENTS=3)), raise_server_exceptions=False) as client:
        said = client.get("/v1/limits").json()["max_judgments_per_report"]
        report = client.get(f"/v1/runs/{run_id}/report")
    assert said == 3
    assert report.status_code == 409, f"/v1/limits says {said}, yet a run of 4 judgments got {report.status_code}"


@contextlib.contextmanager
def _app_with(**settings: Any) -> Iterator[Any]:
    """A second app on the test's database (``DATABASE_URL`` of the environment) with these settings: an operator
    lowering the limit while runs and kept reports exist."""
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.config import Settings

    with TestClient(create_app(Settings(**settings)), raise_server_exceptions=False) as client:
        yield client


def _iso(moment: Any) -> str:
    return str(moment.isoformat()).replace("+00:00", "Z")


def _monitor(api: Api, n: int, old: int = 0, **overrides: Any) -> tuple[str, str]:
    """A monitor sampling every response, ``n`` responses ingested and judged (done), the first ``old`` of them
    answered two days ago: (monitor id, run id)."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(microsecond=0)
    monitor_id, run_id = sampling_monitor(api, **overrides)
    ingest(
        api,
        monitor_id,
        [
            response(
                i, timestamp=(now - timedelta(days=2 if i < old else 0, minutes=1)).isoformat().replace("+00:00", "Z")
            )
            for i in range(n)
        ],
    )
    _sql(api, "UPDATE judgments SET status = 'done', score = 5 WHERE run_id = :r", r=run_id)
    return monitor_id, run_id


def test_a_floor_rule_reads_the_monitors_whole_run_at_every_evaluation(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweeper of every API process evaluates the monitors' alert rules (judge_api/alerts.py): a floor rule (or
    a ``compare.by: time`` rule) is not kept as state, so ``repository.alerts.stream`` reads every judgment of the
    rule's (rubric, aspect, judge) since id 0 into Python dicts, at every evaluation (each minute for such rules:
    ``_fingerprint`` holds the minute), whatever the rule's ``window``. A monitor's run of one rubric, aspect and
    judge is read whole this way, past ``DJ_MAX_REPORT_JUDGMENTS``, with nobody asking: the memory blow-up the limit
    was added against, in the API process. Here a floor rule over the last hour, 8 judgments over a limit of 5, 6 of
    them of responses two days old: 8 rows read. Fixed: the stream read from the database within the window or
    the limit, or the rule not evaluated past the limit with a word in the log or the alert.
    """
    from judge_api import alerts
    from judge_api.repository import alerts as alert_store

    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="5")
    _, run_id = _monitor(
        api,
        8,
        old=6,
        alerts=[{"name": "low", "floor": {"below": 3, "min_n": 1, "window": "1h"}, "aspect": "consistency"}],
    )
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 409
    read: list[int] = []
    whole = alert_store.stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        rows = whole(*args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(alert_store, "stream", spy)
    assert alerts.evaluate_all(force=True)["evaluated"] == 1
    assert read and max(read) <= 5, f"the alert evaluation read {read} rows of a run over DJ_MAX_REPORT_JUDGMENTS=5"


# -- what held ---------------------------------------------------------------------------------------------------


def test_n_judgments_is_the_row_count_after_creation_imports_retries_and_bundles(
    api_factory: ApiFactory, db_url: str
) -> None:
    api = api_factory(database_url=db_url)
    run_id = api.submit(body=run_body(2, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"]))["id"]
    assert _stored_count(api, run_id)[0] == _stored_count(api, run_id)[1]
    verdicts = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "judge": "paper-judge", "score": 3.0,
         "scale_min": 1.0, "scale_max": 5.0}
        for i in range(2)
        for s in ("a", "b")
    ]  # fmt: skip
    for created in (4, 0):  # the same rows twice: the second stores nothing
        response = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": verdicts})
        assert response.status_code == 201 and response.json()["created"] == created, response.text
        n, rows = _stored_count(api, run_id)
        assert n == rows, (n, rows)
    _sql(api, "UPDATE judgments SET status = 'failed' WHERE run_id = :r AND source IS NULL", r=run_id)
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200
    assert _stored_count(api, run_id)[0] == _stored_count(api, run_id)[1]
    bundle = api.client.get(f"/v1/runs/{run_id}/export")
    assert bundle.status_code == 200, bundle.text
    imported = api.client.post(
        "/v1/runs/import", content=bundle.content, headers={"content-type": "application/x-ndjson"}
    )
    assert imported.status_code == 201, imported.text
    new_id = imported.json()["run_id"]
    n, rows = _stored_count(api, new_id)
    assert n == rows == _stored_count(api, run_id)[1]
    assert api.client.delete(f"/v1/runs/{new_id}").status_code == 200
    assert _sql(api, "SELECT count(*) FROM judgments WHERE run_id = :r", r=new_id)[0][0] == 0


def test_the_409_of_a_run_found_finished_at_the_report_stores_no_stamp(
    api_factory: ApiFactory, settings_env: pytest.MonkeyPatch
) -> None:
    """A kept report of the running run, then every judgment settles and the limit is below the count: the report
    request finds the run finished (the summary stamps ``finished_at``), drops the kept report and refuses: the
    stamp is not committed half-way, no report is kept."""
    api = api_factory(DJ_REPORT_FRESH_SECONDS="0")
    run_id = api.submit(body=run_body(2))["id"]
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 200
    _sql(api, "UPDATE judgments SET status = 'done', score = 5 WHERE run_id = :r", r=run_id)
    before = _sql(api, "SELECT count(*) FROM report_cache WHERE run_id = :r", r=run_id)[0][0]
    with _app_with(DJ_MAX_REPORT_JUDGMENTS=3, DJ_REPORT_FRESH_SECONDS=0.0) as lowered:  # the same database
        response = lowered.get(f"/v1/runs/{run_id}/report")
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert "DJ_MAX_REPORT_JUDGMENTS" in detail and "holds 4 judgments" in detail and "the 3 " in detail
    assert _sql(api, "SELECT finished_at FROM runs WHERE id = :r", r=run_id)[0][0] is None
    assert _sql(api, "SELECT count(*) FROM report_cache WHERE run_id = :r", r=run_id)[0][0] <= before


@pytest.mark.parametrize("path", ["/report", "/calibrated"])
def test_a_run_at_the_limit_exactly_is_read(api_factory: ApiFactory, path: str) -> None:
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="4")
    run_id = api.submit(body=run_body(2))["id"]
    assert api.client.get(f"/v1/runs/{run_id}{path}").status_code == 200


def test_a_monitors_run_is_refused_past_the_limit_and_read_again_once_retention_prunes_it(
    api_factory: ApiFactory, db_url: str
) -> None:
    """The path the docs give a monitor past the limit: ``retention_days``. Ingestion and pruning keep
    ``n_judgments`` equal to the stored rows, and the report answers again once the run is back within the limit."""
    from datetime import timedelta

    from judge_api import monitor_retention
    from judge_api.models import utcnow

    api = api_factory(database_url=db_url, DJ_MAX_REPORT_JUDGMENTS="5", DJ_REPORT_FRESH_SECONDS="0")
    monitor_id, run_id = sampling_monitor(api, retention_days=2)
    ingest(api, monitor_id, [response(i) for i in range(8)])
    assert _stored_count(api, run_id) == (8, 8)
    refused = api.client.get(f"/v1/runs/{run_id}/report")
    assert refused.status_code == 409 and "holds 8 judgments" in refused.json()["detail"], refused.text
    _sql(api, "UPDATE judgments SET status = 'done', score = 5 WHERE run_id = :r", r=run_id)
    assert monitor_retention.apply(now=utcnow() + timedelta(days=3)) == 8
    assert _stored_count(api, run_id) == (0, 0)
    again = api.client.post(f"/v1/monitors/{monitor_id}/responses", json=[response(0, id="resp-new")])
    assert again.json()["sampled"] == 1
    assert _stored_count(api, run_id) == (1, 1)
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 200


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{run}"],
        ["agreement", "{run}"],
        ["calibrated", "{run}", "--format", "json"],
        ["label-queue", "{run}", "--n", "1"],
        ["label-queue", "{run}", "--show"],
    ],
)
def test_the_cli_shows_the_refusal_as_one_error_line(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    from typing import cast

    import httpx
    from typer.testing import CliRunner

    from dialogue_judge.cli import app, calibration, reports
    from dialogue_judge.client import ApiClient

    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(2))["id"]
    ratings = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "rater": "ann", "kind": "score", "value": 5.0,
         "scale_min": 1.0, "scale_max": 10.0}
        for i in range(2) for s in ("a", "b")
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201

    def client(api_url: str | None, api_key: str | None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)
        return wrapped

    monkeypatch.setattr(calibration, "api_client", client)
    monkeypatch.setattr(reports, "api_client", client)
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(app, [a.format(run=run_id) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    shown = " ".join(result.stderr.split())
    assert "HTTP 409" in shown and "DJ_MAX_REPORT_JUDGMENTS" in shown and "holds 4 judgments" in shown, shown
    assert "Traceback" not in result.stderr
