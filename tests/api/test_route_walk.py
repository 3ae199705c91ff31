"""The route walk (issue 42, "one gate for every way in"): every route by which rows get into the database, with
every forbidden value planted through it, answers 4xx and stores nothing.

``WALK`` is the table: for each route that stores rows, for each forbidden value, how to plant it (one or more
ways: the run's config and the rows of a bundle, say), or ``Cannot`` saying why the route has no field that could
carry it. ``NO_VALUES_IN`` lists the other POST/PUT/PATCH routes with why none of them brings values into rows.
``test_the_walk_covers_every_route_that_takes_a_body`` fails when the app serves a POST/PUT/PATCH route in neither,
so a new way in cannot be added without its row here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from tests.otlp.spans import SpanSpec, current, export
from tests.otlp.spans import encoded as otlp_encoded

from .conftest import JUDGE, Api, ApiFactory, item, run_body, served_routes
from .test_import_gate import bundle_of, encoded, grown
from .test_monitors import monitor_body, response

MAX_ITEMS = 3
MAX_JUDGMENTS = 20
OUTSIDE_JUDGE = "openai-compatible:m@https://judge.example.org/v1"  # not under DJ_JUDGE_URL_ALLOWLIST
LOOPBACK_JUDGE = "openai-compatible:m@http://127.0.0.1:6379/v1"  # loopback, another port than the allowed one
PYTHON_RESPONDER = "python:subprocess:run"
LOOPBACK_RESPONDER = "http:http://127.0.0.1:6379/internal/admin"
ALLOWED_RESPONDER = "http:http://127.0.0.1:9/v1/respond"  # under the test allowlist: a run with systems
UNKNOWN_RUBRIC = "no-such-rubric"

# each forbidden value, and words one of which the refusal names (so it is refused for the value, not by chance)
VALUES: dict[str, tuple[str, ...]] = {
    "unknown rubric": (UNKNOWN_RUBRIC,),
    "judge URL outside the allowlist": ("DJ_JUDGE_URL_ALLOWLIST",),
    "judge URL on loopback": ("DJ_JUDGE_URL_ALLOWLIST",),
    "python responder (auth on)": ("python responders",),
    "http responder to loopback": ("DJ_JUDGE_URL_ALLOWLIST",),
    "over the limits": ("DJ_MAX_ITEMS", "DJ_MAX_JUDGMENTS", "more than 20 judgments", "at most 200000"),
}


@dataclass
class World:
    """What the plants need: the app (auth on), a key, a run, a monitor and bundles to alter."""

    api: Api
    run_id: str
    monitor_id: str
    bundle: list[dict[str, Any]]  # a run of 2 items x 2 given candidates: 4 judgments
    systems_bundle: list[dict[str, Any]]  # a run with a system: its generation rows

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.api.client.post(path, headers=self.api.as_key("alpha"), **kwargs)


Plant = Callable[[World], Any]


@dataclass(frozen=True)
class Cannot:
    """The route has no field that could carry the value: why."""

    reason: str


# -- how each value is planted -------------------------------------------------------------------------------------


def submit(**overrides: Any) -> Plant:
    return lambda w: w.post("/v1/runs", json=run_body(**overrides))


def submit_systems(responder: str) -> Plant:
    body = run_body(items=[item(0, systems=())], systems={"x": responder})
    return lambda w: w.post("/v1/runs", json=body)


def jsonl(n_items: int = 2, **params: Any) -> Plant:
    query = {"rubric": ["rsum-single"], "judge": [JUDGE], **params}
    body = "\n".join(json.dumps(item(i)) for i in range(n_items))
    return lambda w: w.post("/v1/runs/jsonl", params=query, content=body.encode())


def jsonl_system(responder: str) -> Plant:
    body = json.dumps(item(0, systems=()))
    query = {"rubric": ["rsum-single"], "judge": [JUDGE], "system": [f"x={responder}"]}
    return lambda w: w.post("/v1/runs/jsonl", params=query, content=body.encode())


def import_config(**config: Any) -> Plant:
    def plant(w: World) -> Any:
        lines = copy.deepcopy(w.systems_bundle if "systems" in config else w.bundle)
        lines[0]["run"]["config"].update(config)
        return w.post("/v1/runs/import", content=encoded(lines))

    return plant


def import_rows(record: str, **values: Any) -> Plant:
    def plant(w: World) -> Any:
        lines = copy.deepcopy(w.systems_bundle if record == "generation" else w.bundle)
        changed = [line for line in lines if line["record"] == record]
        assert changed, record
        for line in changed:
            line.update(values)
        return w.post("/v1/runs/import", content=encoded(lines))

    return plant


def import_grown(copies: int = 1, samples: int = 1) -> Plant:
    return lambda w: w.post("/v1/runs/import", content=encoded(grown(w.bundle, copies, samples)))


def verdicts(judge: str = "paper-gpt4", judges: int = 1) -> Plant:
    rows = [
        {"item_id": f"item-{i}", "system": s, "judge": f"{judge}-{n}" if judges > 1 else judge, "score": 3}
        for i in range(2)
        for s in ("a", "b")
        for n in range(judges)
    ]
    body = {"verdicts": rows, "scale_min": 1, "scale_max": 5}
    return lambda w: w.post(f"/v1/runs/{w.run_id}/verdicts", json=body)


def ratings(n: int) -> Plant:
    rows = [
        {
            "item_id": "item-0",
            "system": "a",
            "aspect": "overall",
            "rater": f"r{i}",
            "value": 3,
            "scale_min": 1,
            "scale_max": 5,
        }
        for i in range(n)
    ]
    return lambda w: w.post(f"/v1/runs/{w.run_id}/human-ratings", json={"ratings": rows})


def create_monitor(**overrides: Any) -> Plant:
    return lambda w: w.post("/v1/monitors", json=monitor_body(name="walk", **overrides))


def patch_monitor(**fields: Any) -> Plant:
    return lambda w: w.api.client.patch(f"/v1/monitors/{w.monitor_id}", json=fields, headers=w.api.as_key("alpha"))


def post_responses(n: int) -> Plant:
    body = [response(i) for i in range(n)]
    return lambda w: w.post(f"/v1/monitors/{w.monitor_id}/responses", json=body)


def otlp_spans(n: int) -> Plant:
    """An OTLP/JSON export of ``n`` LLM spans naming the world's monitor."""

    def plant(w: World) -> Any:
        specs = [SpanSpec(7, i + 1, attrs=current([("user", f"Hi {i}")], f"Hello {i}")) for i in range(n)]
        body, headers = otlp_encoded(export(specs, {"dialogue_judge.monitor": w.monitor_id}), "json")
        return w.api.client.post("/v1/otlp/v1/traces", content=body, headers={**headers, **w.api.as_key("alpha")})

    return plant


NO_SYSTEMS_VERDICTS = Cannot("verdicts are about the run's given candidates: a verdict names no responder")
NO_SYSTEMS_RATINGS = Cannot("ratings are about the run's given candidates: a rating names no responder")
NO_SYSTEMS_MONITOR = Cannot("a monitor judges the responses posted to it and generates none: no responder field")
FROM_THE_MONITOR = Cannot(
    "a response carries texts only (extra fields are 422): its rubrics and judges are the monitor's, checked when it "
    "is created or patched (those rows)"
)

FROM_THE_SPANS = Cannot(
    "a span's attributes become a response's texts and slice keys only (the monitor is one of the key's project's, "
    "else the span is rejected): its rubrics and judges are the monitor's, checked when it is created or patched"
)

WALK: dict[tuple[str, str], dict[str, list[Plant] | Cannot]] = {
    ("POST", "/v1/runs"): {
        "unknown rubric": [submit(rubrics=[UNKNOWN_RUBRIC])],
        "judge URL outside the allowlist": [submit(judges=[OUTSIDE_JUDGE])],
        "judge URL on loopback": [submit(judges=[LOOPBACK_JUDGE])],
        "python responder (auth on)": [submit_systems(PYTHON_RESPONDER)],
        "http responder to loopback": [submit_systems(LOOPBACK_RESPONDER)],
        "over the limits": [
            submit(n_items=MAX_ITEMS + 1),
            submit(n_items=MAX_ITEMS, options={"samples": 5, "temperature": 0.7}),
        ],
    },
    ("POST", "/v1/runs/jsonl"): {
        "unknown rubric": [jsonl(rubric=[UNKNOWN_RUBRIC])],
        "judge URL outside the allowlist": [jsonl(judge=[OUTSIDE_JUDGE])],
        "judge URL on loopback": [jsonl(judge=[LOOPBACK_JUDGE])],
        "python responder (auth on)": [jsonl_system(PYTHON_RESPONDER)],
        "http responder to loopback": [jsonl_system(LOOPBACK_RESPONDER)],
        "over the limits": [jsonl(n_items=MAX_ITEMS + 1)],
    },
    ("POST", "/v1/runs/import"): {
        "unknown rubric": [import_config(rubrics=[UNKNOWN_RUBRIC]), import_rows("judgment", rubric_id=UNKNOWN_RUBRIC)],
        "judge URL outside the allowlist": [
            import_config(judges=[OUTSIDE_JUDGE]),
            import_rows("judgment", judge=OUTSIDE_JUDGE),
        ],
        "judge URL on loopback": [
            import_config(judges=[LOOPBACK_JUDGE]),
            import_rows("judgment", judge=LOOPBACK_JUDGE),
        ],
        "python responder (auth on)": [
            import_config(systems={"x": PYTHON_RESPONDER}),
            import_rows("generation", responder=PYTHON_RESPONDER),
        ],
        "http responder to loopback": [
            import_config(systems={"x": LOOPBACK_RESPONDER}),
            import_rows("generation", responder=LOOPBACK_RESPONDER),
        ],
        "over the limits": [import_grown(copies=2), import_grown(copies=1, samples=MAX_JUDGMENTS // 4 + 1)],
    },
    ("POST", "/v1/runs/{run_id}/verdicts"): {
        "unknown rubric": Cannot(
            "a verdict's rubric is a label filed with rubric_version 'imported': never rendered, and an imported "
            "verdict is never sent to a judge (retry skips it: test_retry_never_sends_an_imported_verdict)"
        ),
        "judge URL outside the allowlist": [verdicts(judge=OUTSIDE_JUDGE)],
        "judge URL on loopback": [verdicts(judge=LOOPBACK_JUDGE)],
        "python responder (auth on)": NO_SYSTEMS_VERDICTS,
        "http responder to loopback": NO_SYSTEMS_VERDICTS,
        "over the limits": [verdicts(judges=MAX_JUDGMENTS // 4)],  # the run's 4 judgments + 20 verdicts > 20
    },
    ("POST", "/v1/runs/{run_id}/human-ratings"): {
        "unknown rubric": Cannot("a rating names an aspect, no rubric (extra fields are 422); no judge reads it"),
        "judge URL outside the allowlist": Cannot("a rating names a rater, no judge: nothing is called"),
        "judge URL on loopback": Cannot("a rating names a rater, no judge: nothing is called"),
        "python responder (auth on)": NO_SYSTEMS_RATINGS,
        "http responder to loopback": NO_SYSTEMS_RATINGS,
        "over the limits": [ratings(200_001)],  # HumanRatingsIn's cap per request; each names the run's item
    },
    ("POST", "/v1/monitors"): {
        "unknown rubric": [create_monitor(rubrics=[UNKNOWN_RUBRIC])],
        "judge URL outside the allowlist": [create_monitor(judges=[OUTSIDE_JUDGE])],
        "judge URL on loopback": [create_monitor(judges=[LOOPBACK_JUDGE])],
        "python responder (auth on)": NO_SYSTEMS_MONITOR,
        "http responder to loopback": NO_SYSTEMS_MONITOR,
        "over the limits": Cannot(
            "a monitor is a config, no items or judgments: the sizes come with each posted batch (its responses row)"
        ),
    },
    ("PATCH", "/v1/monitors/{monitor_id}"): {
        "unknown rubric": [patch_monitor(rubrics=[UNKNOWN_RUBRIC])],
        "judge URL outside the allowlist": [patch_monitor(judges=[OUTSIDE_JUDGE])],
        "judge URL on loopback": [patch_monitor(judges=[LOOPBACK_JUDGE])],
        "python responder (auth on)": NO_SYSTEMS_MONITOR,
        "http responder to loopback": NO_SYSTEMS_MONITOR,
        "over the limits": Cannot("a monitor is a config, no items or judgments (see its responses row)"),
    },
    ("POST", "/v1/monitors/{monitor_id}/responses"): {
        "unknown rubric": FROM_THE_MONITOR,
        "judge URL outside the allowlist": FROM_THE_MONITOR,
        "judge URL on loopback": FROM_THE_MONITOR,
        "python responder (auth on)": FROM_THE_MONITOR,
        "http responder to loopback": FROM_THE_MONITOR,
        "over the limits": [post_responses(MAX_ITEMS + 1)],
    },
    ("POST", "/v1/otlp/v1/traces"): {
        "unknown rubric": FROM_THE_SPANS,
        "judge URL outside the allowlist": FROM_THE_SPANS,
        "judge URL on loopback": FROM_THE_SPANS,
        "python responder (auth on)": FROM_THE_SPANS,
        "http responder to loopback": FROM_THE_SPANS,
        "over the limits": [otlp_spans(MAX_ITEMS + 1)],
    },
}

# each route's request without a forbidden value: accepted (2xx), so the refusals above are the values'
CONTROLS: dict[tuple[str, str], Plant] = {
    ("POST", "/v1/runs"): submit(),
    ("POST", "/v1/runs/jsonl"): jsonl(),
    ("POST", "/v1/runs/import"): lambda w: w.post("/v1/runs/import", content=encoded(w.bundle)),
    ("POST", "/v1/runs/{run_id}/verdicts"): verdicts(),
    ("POST", "/v1/runs/{run_id}/human-ratings"): ratings(1),
    ("POST", "/v1/monitors"): create_monitor(),
    ("PATCH", "/v1/monitors/{monitor_id}"): patch_monitor(rubrics=["rsum-single"]),
    ("POST", "/v1/monitors/{monitor_id}/responses"): post_responses(1),
    ("POST", "/v1/otlp/v1/traces"): otlp_spans(1),
}

# POST/PUT/PATCH routes that bring no values into rows, and why
NO_VALUES_IN: dict[tuple[str, str], str] = {
    ("POST", "/v1/runs/estimate"): "plans the body through the same checks and stores nothing",
    ("POST", "/v1/runs/{run_id}/retry"): "re-queues the run's own rows (never an imported verdict); no values in",
    ("POST", "/v1/runs/{run_id}/cancel"): "marks the run's own pending rows cancelled; no values in",
    ("POST", "/v1/runs/prune"): "deletes the project's old runs; no values in",
    ("POST", "/v1/runs/{run_id}/label-queue"): "draws among the run's own judged items (n, strategy and seed are "
    "bounded by its schema); no rubric, judge, responder or URL in",
}


def stored(database_url: str) -> dict[str, Any]:
    """Every table's row count, and the monitors' stored settings (a PATCH changes rows without adding any)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            found: dict[str, Any] = {
                t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
                for t in inspect(connection).get_table_names()
                if t != "alembic_version"
            }
            found["monitor settings"] = [
                tuple(row) for row in connection.execute(text("SELECT id, name, config FROM monitors ORDER BY id"))
            ]
            return found
    finally:
        engine.dispose()


def world(api_factory: ApiFactory) -> World:
    api = api_factory(
        auth=True,
        DJ_MAX_ITEMS=str(MAX_ITEMS),
        DJ_MAX_JUDGMENTS=str(MAX_JUDGMENTS),
        DJ_CALLBACK_URL_ALLOWLIST="https://hooks.example.org",
    )
    api.create_key("alpha", ["submit", "read"], "alpha")
    bundle = bundle_of(api, "alpha", run_body())
    systems_bundle = bundle_of(api, "alpha", run_body(items=[item(0, systems=())], systems={"x": ALLOWED_RESPONDER}))
    assert any(line["record"] == "generation" for line in systems_bundle)
    for exported in (bundle, systems_bundle):  # the bundles' runs are gone: importing them is otherwise fine
        deleted = api.client.delete(f"/v1/runs/{exported[0]['run']['id']}", headers=api.as_key("alpha"))
        assert deleted.status_code == 200, deleted.text
    run_id = api.submit("alpha", run_body())["id"]  # 2 items x 2 given candidates: 4 judgments
    created = api.client.post("/v1/monitors", json=monitor_body(), headers=api.as_key("alpha"))
    assert created.status_code == 201, created.text
    return World(api, run_id, created.json()["id"], bundle, systems_bundle)


@pytest.mark.parametrize("route", list(WALK), ids=[f"{m} {p}" for m, p in WALK])
def test_every_forbidden_value_through_every_route_is_refused_and_nothing_is_stored(
    api_factory: ApiFactory, route: tuple[str, str]
) -> None:
    cells = WALK[route]
    assert set(cells) == set(VALUES), f"{route}: every forbidden value needs a cell (a plant or a Cannot)"
    w = world(api_factory)
    for value in VALUES:
        cell = cells[value]
        if isinstance(cell, Cannot):
            assert len(cell.reason) > 20, (route, value)  # said, not skipped: the reason is in the table
            continue
        assert cell, (route, value)
        for index, plant in enumerate(cell):
            before = stored(w.api.database_url)
            answer = plant(w)
            where = f"{route} {value} (way {index})"
            assert 400 <= answer.status_code < 500, f"{where}: {answer.status_code} {answer.text[:300]}"
            assert answer.status_code != 404, f"{where}: {answer.text[:300]}"  # refused for the value, not the path
            detail = answer.json().get("detail")
            assert detail, f"{where}: the refusal names no field and reason"
            assert any(word in json.dumps(detail) for word in VALUES[value]), f"{where}: refused for {detail}"
            assert stored(w.api.database_url) == before, f"{where}: something was stored"
    control = CONTROLS[route](w)
    assert 200 <= control.status_code < 300, f"{route} without a forbidden value: {control.text[:300]}"


def test_the_walk_covers_every_route_that_takes_a_body(api_factory: ApiFactory) -> None:
    from judge_api.app import create_app

    api_factory(auth=False)  # the environment create_app reads
    writing = {(m, p) for m, p in served_routes(create_app()) if m in ("POST", "PUT", "PATCH")}
    assert not set(WALK) & set(NO_VALUES_IN) and set(CONTROLS) == set(WALK)
    assert writing == set(WALK) | set(NO_VALUES_IN), (
        f"not in the walk: {sorted(writing - set(WALK) - set(NO_VALUES_IN))}; "
        f"gone from the app: {sorted(set(WALK) | set(NO_VALUES_IN) - writing)}"
    )


def test_retry_never_sends_an_imported_verdict(api_factory: ApiFactory) -> None:
    """Old: POST /retry with unparseable=true turned an imported unparseable verdict back to pending, so a worker
    would ask its judge - a name the importer chose, of a rubric version no run planned. Now imported verdicts are
    never re-queued."""
    w = world(api_factory)
    body = {
        "verdicts": [{"item_id": "item-0", "system": "a", "judge": "paper-judge", "unparseable": True}],
        "rubric": "rsum-single",
    }
    assert w.post(f"/v1/runs/{w.run_id}/verdicts", json=body).status_code == 201
    retried = w.post(f"/v1/runs/{w.run_id}/retry", json={"unparseable": True})
    assert retried.status_code == 200 and retried.json()["requeued"] == 0, retried.text
    judgments = w.api.client.get(f"/v1/runs/{w.run_id}/judgments", params={"limit": 100}, headers=w.api.as_key("alpha"))
    [imported] = [j for j in judgments.json()["items"] if j["judge"] == "paper-judge"]
    assert imported["status"] == "unparseable"
