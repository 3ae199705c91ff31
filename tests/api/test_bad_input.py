"""Bad input for every endpoint: a clear 4xx that names the field at fault and the reason, and nothing stored
half-way (every table's row count is unchanged after each rejected request). Runs on SQLite and PostgreSQL:
some values (NUL characters, NaN) are only unstorable on PostgreSQL."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from .conftest import JUDGE, Api, ApiFactory, item, run_body, served_routes

RUN = "{run}"  # replaced by the id of a stored run


@dataclass
class Case:
    name: str
    method: str
    path: str
    status: int
    loc: list[Any] | None  # the error's loc must start with this (None: a plain-string detail)
    reason: str  # a fragment of the message
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def body_with(change: Any) -> dict[str, Any]:
    body = run_body(n_items=2)
    change(body)
    return body


def set_(path: list[Any], value: Any) -> Any:
    def change(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def drop(path: list[Any]) -> Any:
    def change(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


RATING = {
    "item_id": "item-0",
    "system": "a",
    "aspect": "consistency",
    "rater": "r1",
    "value": 50,
    "scale_min": 1,
    "scale_max": 100,
}


def rating(**changes: Any) -> dict[str, Any]:
    return {"ratings": [{**RATING, **changes}]}


RUN_CASES = [
    Case(
        "not json",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "JSON decode error",
        content=b'{"items": [',
        headers={"content-type": "application/json"},
    ),
    Case("not an object", "POST", "/v1/runs", 422, ["body"], "valid dictionary", json=[1, 2]),
    Case(
        "unknown metric",
        "POST",
        "/v1/runs",
        422,
        ["body", "metrics", 0],
        "'f1', 'bleu-1', 'bleu-2' or 'bertscore'",
        json=body_with(set_(["metrics"], ["rouge"])),
    ),
    Case(
        "bertscore without a local model",
        "POST",
        "/v1/runs",
        422,
        ["body", "metrics", 1],
        "DJ_BERTSCORE_MODEL",
        json=body_with(set_(["metrics"], ["f1", "bertscore"])),
    ),
    Case(
        "panel member not a judge of the run",
        "POST",
        "/v1/runs",
        422,
        ["body", "panel.judges", 1],
        "not one of the run's judges",
        json=body_with(set_(["panel"], {"judges": [JUDGE, "openai:gpt-4o"]})),
    ),
    Case(
        "panel aggregate",
        "POST",
        "/v1/runs",
        422,
        ["body", "panel", "aggregate"],
        "'mean' or 'median'",
        json=body_with(set_(["panel"], {"aggregate": "mode"})),
    ),
    Case(
        "panel quorum above the members",
        "POST",
        "/v1/runs",
        422,
        ["body", "panel.quorum"],
        "more than the panel's members (1)",
        json=body_with(set_(["panel"], {"quorum": 2})),
    ),
    Case(
        "panel quorum zero",
        "POST",
        "/v1/runs",
        422,
        ["body", "panel", "quorum"],
        "greater than or equal to 1",
        json=body_with(set_(["panel"], {"quorum": 0})),
    ),
    Case(
        "expected scoring option",
        "POST",
        "/v1/runs",
        422,
        ["body", "options", "scoring"],
        "'parsed' or 'expected'",
        json=body_with(set_(["options"], {"scoring": "weighted"})),
    ),
    Case(
        "missing items", "POST", "/v1/runs", 422, ["body", "items"], "Field required", json=body_with(drop(["items"]))
    ),
    Case(
        "empty items",
        "POST",
        "/v1/runs",
        422,
        ["body", "items"],
        "at least 1 item",
        json=body_with(set_(["items"], [])),
    ),
    Case(
        "unknown field",
        "POST",
        "/v1/runs",
        422,
        ["body", "itemz"],
        "Extra inputs are not permitted",
        json=body_with(set_(["itemz"], [])),
    ),
    Case(
        "items not a list",
        "POST",
        "/v1/runs",
        422,
        ["body", "items"],
        "valid list",
        json=body_with(set_(["items"], "x")),
    ),
    Case(
        "missing candidates",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 1, "candidates"],
        "at least one candidate",
        json=body_with(drop(["items", 1, "candidates"])),
    ),
    Case(
        "no candidate",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "candidates"],
        "at least one candidate",
        json=body_with(set_(["items", 0, "candidates"], {})),
    ),
    Case(
        "empty candidate",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "candidates"],
        "candidate 'a' is empty",
        json=body_with(set_(["items", 0, "candidates", "a"], "   ")),
    ),
    Case(
        "bad system name",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "candidates"],
        "system name '-x'",
        json=body_with(set_(["items", 0, "candidates", "-x"], "hello")),
    ),
    Case(
        "bad item id",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "id"],
        "should match pattern",
        json=body_with(set_(["items", 0, "id"], "has space")),
    ),
    Case(
        "duplicate item ids",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "items[1].id: duplicate item id 'item-0'",
        json=body_with(set_(["items", 1, "id"], "item-0")),
    ),
    Case(
        "bad speaker",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "dialogue", 1, "speaker"],
        "'user' or 'bot'",
        json=body_with(set_(["items", 0, "dialogue", 1, "speaker"], "narrator")),
    ),
    Case(
        "negative session",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "dialogue", 0, "session"],
        "greater than or equal to 0",
        json=body_with(set_(["items", 0, "dialogue", 0, "session"], -1)),
    ),
    Case(
        "unknown rubric",
        "POST",
        "/v1/runs",
        422,
        ["body", "rubrics", 0],
        "unknown rubric 'nope'",
        json=body_with(set_(["rubrics"], ["nope"])),
    ),
    Case(
        "rubric vs mode",
        "POST",
        "/v1/runs",
        422,
        ["body", "rubrics", 0],
        "is a pairwise rubric",
        json=body_with(set_(["rubrics"], ["rsum-pairwise"])),
    ),
    Case(
        "unknown provider",
        "POST",
        "/v1/runs",
        422,
        ["body", "judges", 0],
        "unknown provider 'acme'",
        json=body_with(set_(["judges"], ["acme:model"])),
    ),
    Case(
        "compatible judge without url",
        "POST",
        "/v1/runs",
        422,
        ["body", "judges", 0],
        "need '<model>@<base_url>'",
        json=body_with(set_(["judges"], ["openai-compatible:model"])),
    ),
    Case(
        "unknown aspect",
        "POST",
        "/v1/runs",
        422,
        ["body", "aspects", 0],
        "no chosen rubric has the aspect 'humour'",
        json=body_with(set_(["aspects"], ["humour"])),
    ),
    Case(
        "pairwise one system",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "pairwise needs at least two candidates",
        json={
            **run_body(),
            "items": [item(0, systems=("a",))],
            "mode": ["pairwise"],
            "rubrics": ["rsum-pairwise"],
            "aspects": None,
        },
    ),
    Case(
        "baseline missing",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "baseline 'zz' is missing",
        json=body_with(set_(["baseline"], "zz")),
    ),
    Case(
        "baseline pairing without name",
        "POST",
        "/v1/runs",
        422,
        ["body"],
        "needs a baseline system name",
        json=body_with(set_(["pairing"], "baseline")),
    ),
    Case(
        "samples at temperature 0",
        "POST",
        "/v1/runs",
        422,
        ["body", "options"],
        "samples > 1 needs temperature",
        json=body_with(set_(["options"], {"samples": 3})),
    ),
    Case(
        "temperature too high",
        "POST",
        "/v1/runs",
        422,
        ["body", "options", "temperature"],
        "less than or equal to 2",
        json=body_with(set_(["options"], {"temperature": 9})),
    ),
    Case(
        "budget not positive",
        "POST",
        "/v1/runs",
        422,
        ["body", "budget_usd"],
        "greater than 0",
        json=body_with(set_(["budget_usd"], 0)),
    ),
    Case(
        "budget on a model the price table does not list",
        "POST",
        "/v1/runs",
        422,
        ["body", "budget_usd"],
        "judge 'openai:gpt-5.4' has no price in the price table",
        json=body_with(lambda b: b.update(judges=[JUDGE, "openai:gpt-5.4"], budget_usd=5)),
    ),
    Case(
        "bad outcome map",
        "POST",
        "/v1/runs",
        422,
        ["body", "outcome_map", "2"],
        "'win', 'tie' or 'loss'",
        json=body_with(set_(["outcome_map"], {"2": "victory"})),
    ),
    Case(
        "bad mode",
        "POST",
        "/v1/runs",
        422,
        ["body", "mode", 0],
        "'single' or 'pairwise'",
        json=body_with(set_(["mode"], ["triple"])),
    ),
    Case(
        "too many judges",
        "POST",
        "/v1/runs",
        422,
        ["body", "judges"],
        "at most 10 items",
        json=body_with(set_(["judges"], [JUDGE] * 11)),
    ),
    Case(
        "NUL in name",
        "POST",
        "/v1/runs",
        422,
        ["body", "name"],
        "NUL character",
        json=body_with(set_(["name"], "run\x00name")),
    ),
    Case(
        "NUL in turn",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 1, "dialogue", 0, "text"],
        "NUL character",
        json=body_with(set_(["items", 1, "dialogue", 0, "text"], "a\x00b")),
    ),
    Case(
        "NUL in meta key",
        "POST",
        "/v1/runs",
        422,
        ["body", "meta", "k\\u0000"],
        "NUL character",
        json=body_with(set_(["meta"], {"k\x00": 1})),
    ),
    Case(
        "NaN in meta",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "meta", "x"],
        "finite number",
        content=json.dumps(body_with(set_(["items", 0, "meta"], {"x": float("nan")}))).encode(),
        headers={"content-type": "application/json"},
    ),
    Case(
        "Infinity budget",
        "POST",
        "/v1/runs",
        422,
        ["body", "budget_usd"],
        "finite number",
        content=json.dumps(body_with(set_(["budget_usd"], float("inf")))).encode(),
        headers={"content-type": "application/json"},
    ),
    # every numeric field has a range (issue 14, finding 6): 422 naming the field, nothing stored
    *[
        Case(
            f"{'.'.join(map(str, loc))} out of range ({reason})",
            "POST",
            "/v1/runs",
            422,
            ["body", *loc],
            reason,
            json=body,
        )
        for path, loc, reason, body in [
            (p, loc, reason, body_with(set_(p, value)))
            for p, loc, reason, value in cast(
                list[tuple[list[Any], list[Any], str, Any]],
                [
                    (["order_seed"], ["order_seed"], "exceeded maximum size", 1e40),
                    (["order_seed"], ["order_seed"], "less than or equal to 4294967295", 2**33),
                    (["order_seed"], ["order_seed"], "greater than or equal to 0", -1),
                    (["budget_usd"], ["budget_usd"], "less than or equal to 1000000", 1e308),
                    (["options"], ["options", "seed"], "less than or equal to", {"seed": 2**40}),
                    (["options"], ["options", "seed"], "greater than or equal to 0", {"seed": -5}),
                    (
                        ["options"],
                        ["options", "sample_margin"],
                        "less than or equal to",
                        {"samples": "adaptive", "temperature": 0.7, "sample_margin": 1e300},
                    ),
                    (
                        ["options"],
                        ["options", "sample_boundaries", 0],
                        "less than or equal to",
                        {"samples": "adaptive", "temperature": 0.7, "sample_boundaries": [1e300]},
                    ),
                    (
                        ["items", 0, "dialogue", 0, "session"],
                        ["items", 0, "dialogue", 0, "session"],
                        "less than",
                        10**12,
                    ),
                ],
            )
        ]
    ],
    *[
        Case(
            f"adaptive {name} out of range",
            "POST",
            "/v1/runs",
            422,
            ["body", "adaptive", name],
            "less than or equal to",
            json=body_with(
                lambda b, name=name, value=value: b.update(
                    mode=["pairwise"], rubrics=["rsum-pairwise"], pairing="adaptive", adaptive={name: value}
                )
            ),
        )
        for name, value in [("seed", 2**33), ("max_calls", 10**12), ("top_k", 10**9)]
    ],
    Case(
        "lone surrogate",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "candidates", "a"],
        "unpaired surrogate",
        content=json.dumps(run_body(n_items=1)).replace("Answer from a", "Answer \\ud800 from a").encode(),
        headers={"content-type": "application/json"},
    ),
    Case("no content type", "POST", "/v1/runs", 422, ["body"], "", content=json.dumps(run_body()).encode()),
    Case(
        "idempotency key with a space",
        "POST",
        "/v1/runs",
        422,
        ["header", "Idempotency-Key"],
        "characters that are not allowed (' ')",
        json=run_body(),
        headers={"Idempotency-Key": "two words"},
    ),
    Case(
        "idempotency key too long",
        "POST",
        "/v1/runs",
        422,
        ["header", "Idempotency-Key"],
        "at most 255",
        json=run_body(),
        headers={"Idempotency-Key": "k" * 300},
    ),
    Case(
        "duplicate fact id",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "facts"],
        "facts[1].id: duplicate fact id 'f1'",
        json=body_with(
            set_(
                ["items", 0, "facts"],
                [{"id": "f1", "text": "a", "source": "memory"}, {"id": "f1", "text": "b", "source": "memory"}],
            )
        ),
    ),
    Case(
        "bad fact source",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "facts", 0, "source"],
        "should match pattern",
        json=body_with(set_(["items", 0, "facts"], [{"id": "f1", "text": "a", "source": "session two"}])),
    ),
    Case(
        "blank fact text",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "facts", 0, "text"],
        "a fact's text is empty",
        json=body_with(set_(["items", 0, "facts"], [{"id": "f1", "text": "  ", "source": "persona.user"}])),
    ),
    Case(
        "fact without id",
        "POST",
        "/v1/runs",
        422,
        ["body", "items", 0, "facts", 0, "id"],
        "Field required",
        json=body_with(set_(["items", 0, "facts"], [{"text": "a", "source": "memory"}])),
    ),
]

# POST /v1/runs/estimate takes the body of POST /v1/runs: a sample of its cases, and nothing is stored either way
ESTIMATE_CASES = [
    Case(
        "estimate not json",
        "POST",
        "/v1/runs/estimate",
        422,
        ["body"],
        "JSON decode error",
        content=b'{"items": [',
        headers={"content-type": "application/json"},
    ),
    Case(
        "estimate unknown rubric",
        "POST",
        "/v1/runs/estimate",
        422,
        ["body", "rubrics", 0],
        "unknown rubric 'nope'",
        json=body_with(set_(["rubrics"], ["nope"])),
    ),
    Case(
        "estimate: budget on a model the price table does not list",
        "POST",
        "/v1/runs/estimate",
        422,
        ["body", "budget_usd"],
        "judge 'anthropic:claude-opus-4-7' has no price",
        json=body_with(lambda b: b.update(judges=["anthropic:claude-opus-4-7"], budget_usd=5)),
    ),
]

JSONL_PARAMS = {"rubric": "rsum-single", "judge": JUDGE}
JSONL_BODY = "\n".join(json.dumps(item(i)) for i in range(2)).encode()
JSONL_CASES = [
    Case(
        "jsonl idempotency key empty",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["header", "Idempotency-Key"],
        "must not be empty",
        content=JSONL_BODY,
        params=JSONL_PARAMS,
        headers={"Idempotency-Key": ""},
    ),
    Case(
        "jsonl missing rubric",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["query", "rubric"],
        "Field required",
        content=JSONL_BODY,
        params={"judge": JUDGE},
    ),
    Case(
        "jsonl missing judge",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["query", "judge"],
        "Field required",
        content=JSONL_BODY,
        params={"rubric": "rsum-single"},
    ),
    Case(
        "jsonl bad line",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["body", "items", "line 2"],
        "not valid JSON",
        content=JSONL_BODY.splitlines()[0] + b"\n{oops\n",
        params=JSONL_PARAMS,
    ),
    Case(
        "jsonl bad item",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["body", "items", 1, "candidates"],
        "at least one candidate",
        content=JSONL_BODY.splitlines()[0] + b'\n{"id": "x"}\n',
        params=JSONL_PARAMS,
    ),
    Case(
        "jsonl empty body",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["body", "items"],
        "at least 1 item",
        content=b"\n\n",
        params=JSONL_PARAMS,
    ),
    Case(
        "jsonl bad mode",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["query", "mode", 0],
        "'single' or 'pairwise'",
        content=JSONL_BODY,
        params={**JSONL_PARAMS, "mode": "both"},
    ),
    Case(
        "jsonl bad orders",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["query", "orders"],
        "'both' or 'random'",
        content=JSONL_BODY,
        params={**JSONL_PARAMS, "orders": "sideways"},
    ),
    Case(
        "jsonl unknown rubric",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["body", "rubrics", 0],
        "unknown rubric",
        content=JSONL_BODY,
        params={**JSONL_PARAMS, "rubric": "nope"},
    ),
    Case(
        "jsonl baseline missing",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["body"],
        "baseline 'zz' is missing",
        content=JSONL_BODY,
        params={**JSONL_PARAMS, "baseline": "zz"},
    ),
    Case(
        "jsonl NUL in query",
        "POST",
        "/v1/runs/jsonl",
        422,
        ["query", "name"],
        "NUL character",
        content=JSONL_BODY,
        params={**JSONL_PARAMS, "name": "a\x00"},
    ),
]

READ_CASES = [
    Case(
        "list negative offset",
        "GET",
        "/v1/runs",
        422,
        ["query", "offset"],
        "greater than or equal to 0",
        params={"offset": -1},
    ),
    Case(
        "list huge offset",
        "GET",
        "/v1/runs",
        422,
        ["query", "offset"],
        "less than or equal to",
        params={"offset": 10**20},
    ),
    Case(
        "list zero limit", "GET", "/v1/runs", 422, ["query", "limit"], "greater than or equal to 1", params={"limit": 0}
    ),
    Case(
        "list limit too big",
        "GET",
        "/v1/runs",
        422,
        ["query", "limit"],
        "less than or equal to 500",
        params={"limit": 501},
    ),
    Case("list limit not int", "GET", "/v1/runs", 422, ["query", "limit"], "valid integer", params={"limit": "ten"}),
    Case("unknown run", "GET", "/v1/runs/run_0000000000000000", 404, None, "run 'run_0000000000000000' not found"),
    Case("unknown run NUL", "GET", "/v1/runs/run%00x", 422, ["path"], "NUL character"),
    Case("retry unknown run", "POST", "/v1/runs/nope/retry", 404, None, "run 'nope' not found"),
    Case("cancel unknown run", "POST", "/v1/runs/nope/cancel", 404, None, "run 'nope' not found"),
    Case(
        "unknown execution",
        "POST",
        "/v1/runs",
        422,
        ["body", "execution"],
        "'realtime' or 'batch'",
        json=body_with(set_(["execution"], "offline")),
    ),
    Case(
        "batch execution of an adaptive run",
        "POST",
        "/v1/runs",
        422,
        ["body", "execution"],
        "adaptive runs are real-time only",
        json=run_body(
            2, mode=["pairwise"], rubrics=["rsum-pairwise"], pairing="adaptive", execution="batch", aspects=["overall"]
        ),
    ),
    Case(
        "batch execution with adaptive samples",
        "POST",
        "/v1/runs",
        422,
        ["body", "execution"],
        "options.samples='adaptive'",
        json=body_with(lambda b: b.update(execution="batch", options={"samples": "adaptive", "temperature": 0.7})),
    ),
    Case(
        "batch execution of a gate run",
        "POST",
        "/v1/runs",
        422,
        ["body", "execution"],
        "the gate is real-time only",
        json=body_with(lambda b: b.update(execution="batch", meta={"gate": {"baseline": "a"}})),
    ),
    Case(
        "batch execution with reask",
        "POST",
        "/v1/runs",
        422,
        ["body", "execution"],
        "options.reask",
        json=body_with(lambda b: b.update(execution="batch", options={"reask": 1})),
    ),
    Case(
        "batch_retry without batch execution",
        "POST",
        "/v1/runs",
        422,
        ["body", "batch_retry"],
        "only with execution='batch'",
        json=body_with(set_(["batch_retry"], "realtime")),
    ),
    Case(
        "unknown batch_retry",
        "POST",
        "/v1/runs",
        422,
        ["body", "batch_retry"],
        "'batch' or 'realtime'",
        json=body_with(lambda b: b.update(execution="batch", batch_retry="never")),
    ),
    Case(
        "estimate: batch execution of an adaptive run",
        "POST",
        "/v1/runs/estimate",
        422,
        ["body", "execution"],
        "adaptive runs are real-time only",
        json=run_body(
            2, mode=["pairwise"], rubrics=["rsum-pairwise"], pairing="adaptive", execution="batch", aspects=["overall"]
        ),
    ),
    Case("judgments unknown run", "GET", "/v1/runs/nope/judgments", 404, None, "run 'nope' not found"),
    Case(
        "judgments bad limit",
        "GET",
        f"/v1/runs/{RUN}/judgments",
        422,
        ["query", "limit"],
        "less than or equal to 1000",
        params={"limit": 5000},
    ),
    Case(
        "judgments bad mode",
        "GET",
        f"/v1/runs/{RUN}/judgments",
        422,
        ["query", "mode"],
        "'single' or 'pairwise'",
        params={"mode": "x"},
    ),
    Case(
        "judgments bad score",
        "GET",
        f"/v1/runs/{RUN}/judgments",
        422,
        ["query", "score_min"],
        "valid number",
        params={"score_min": "high"},
    ),
    Case(
        "judgments NaN score",
        "GET",
        f"/v1/runs/{RUN}/judgments",
        422,
        ["query", "score_max"],
        "finite number",
        params={"score_max": "nan"},
    ),
    Case(
        "judgments NUL filter",
        "GET",
        f"/v1/runs/{RUN}/judgments",
        422,
        ["query", "status"],
        "NUL character",
        params={"status": "do\x00ne"},
    ),
    Case("csv unknown run", "GET", "/v1/runs/nope/judgments.csv", 404, None, "run 'nope' not found"),
    Case("item scores unknown run", "GET", "/v1/runs/nope/item-scores", 404, None, "run 'nope' not found"),
    Case(
        "item scores page over the limit",
        "GET",
        f"/v1/runs/{RUN}/item-scores",
        422,
        ["query", "limit"],
        "less than or equal to 5000",
        params={"limit": 5001},
    ),
    Case("order outcomes unknown run", "GET", "/v1/runs/nope/order-outcomes", 404, None, "run 'nope' not found"),
    Case(
        "score deltas without a baseline", "GET", f"/v1/runs/{RUN}/score-deltas", 422, ["query", "baseline"], "required"
    ),
    Case(
        "score deltas unknown baseline",
        "GET",
        f"/v1/runs/{RUN}/score-deltas",
        404,
        None,
        "run 'nope' not found",
        params={"baseline": "nope"},
    ),
    Case(
        "score deltas against itself",
        "GET",
        f"/v1/runs/{RUN}/score-deltas",
        422,
        ["query", "baseline"],
        "another run",
        params={"baseline": RUN},
    ),
    Case(
        "score deltas n_boot over the limit",
        "GET",
        f"/v1/runs/{RUN}/score-deltas",
        422,
        ["query", "n_boot"],
        "less than or equal to 5000",
        params={"baseline": "nope", "n_boot": 5001},
    ),
    Case(
        "score deltas ci out of range",
        "GET",
        f"/v1/runs/{RUN}/score-deltas",
        422,
        ["query", "ci"],
        "greater than 0.5",
        params={"baseline": "nope", "ci": 0.2},
    ),
    Case(
        "worse items unknown run",
        "GET",
        "/v1/runs/nope/worse-items",
        404,
        None,
        "run 'nope' not found",
        params={"baseline": "other"},
    ),
    Case(
        "worse items page over the limit",
        "GET",
        f"/v1/runs/{RUN}/worse-items",
        422,
        ["query", "limit"],
        "less than or equal to 5000",
        params={"baseline": "nope", "limit": 5001},
    ),
    Case(
        "order outcomes bad flipped",
        "GET",
        f"/v1/runs/{RUN}/order-outcomes",
        422,
        ["query", "flipped"],
        "valid boolean",
        params={"flipped": "sometimes"},
    ),
    Case(
        "items negative offset",
        "GET",
        f"/v1/runs/{RUN}/items",
        422,
        ["query", "offset"],
        "greater than or equal",
        params={"offset": -5},
    ),
    Case("items unknown run", "GET", "/v1/runs/nope/items", 404, None, "run 'nope' not found"),
    Case(
        "report negative n_boot",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "n_boot"],
        "greater than or equal",
        params={"n_boot": -1},
    ),
    Case(
        "report huge n_boot",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "n_boot"],
        "less than or equal to 20000",
        params={"n_boot": 10**6},
    ),
    Case(
        "report negative seed",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "seed"],
        "greater than or equal",
        params={"seed": -3},
    ),
    Case("report unknown run", "GET", "/v1/runs/nope/report", 404, None, "run 'nope' not found"),
    Case(
        "report panel aggregate",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "panel_aggregate"],
        "'mean' or 'median'",
        params={"panel_aggregate": "max"},
    ),
    Case(
        "report panel quorum",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "panel_quorum"],
        "greater than or equal to 1",
        params={"panel_quorum": 0},
    ),
    Case("agreement without ratings", "GET", f"/v1/runs/{RUN}/agreement", 409, None, "no human ratings yet"),
    Case(
        "agreement long prefix",
        "GET",
        f"/v1/runs/{RUN}/agreement",
        422,
        ["query", "human_prefix"],
        "at most 100 characters",
        params={"human_prefix": "x" * 101},
    ),
    Case(
        "report NUL prefix",
        "GET",
        f"/v1/runs/{RUN}/report",
        422,
        ["query", "human_prefix"],
        "NUL character",
        params={"human_prefix": "exp\x00"},
    ),
    Case("agreement unknown run", "GET", "/v1/runs/nope/agreement", 404, None, "run 'nope' not found"),
    Case("get ratings unknown run", "GET", "/v1/runs/nope/human-ratings", 404, None, "run 'nope' not found"),
]

RATING_PATH = f"/v1/runs/{RUN}/human-ratings"
RATING_CASES = [
    Case(
        "ratings unknown run", "POST", "/v1/runs/nope/human-ratings", 404, None, "run 'nope' not found", json=rating()
    ),
    Case("ratings empty", "POST", RATING_PATH, 422, ["body", "ratings"], "at least 1 item", json={"ratings": []}),
    Case("ratings missing", "POST", RATING_PATH, 422, ["body", "ratings"], "Field required", json={}),
    Case(
        "rating unknown item",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 1, "item_id"],
        "item 'item-77' is not in run",
        json={"ratings": [RATING, {**RATING, "item_id": "item-77"}]},
    ),
    Case(
        "rating outside scale",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "value: 150.0 is outside the scale",
        json=rating(value=150),
    ),
    Case(
        "rating bad scale",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "scale_min must be below scale_max",
        json=rating(scale_min=5, scale_max=5, value=5),
    ),
    Case(
        "preference without system_b",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "system_b: a preference names both systems",
        json=rating(kind="preference", value=1),
    ),
    Case(
        "preference bad value",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "a preference is 1",
        json=rating(kind="preference", system_b="b", value=0.5),
    ),
    Case(
        "rating bad kind",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "kind"],
        "'score' or 'preference'",
        json=rating(kind="stars"),
    ),
    Case(
        "rating extra field",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "colour"],
        "Extra inputs",
        json=rating(colour="red"),
    ),
    Case(
        "rating empty rater",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "rater"],
        "at least 1 character",
        json=rating(rater=""),
    ),
    Case(
        "rating bad system",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "system"],
        "should match pattern",
        json=rating(system=""),
    ),
    Case(
        "rating NUL rater",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "rater"],
        "NUL character",
        json=rating(rater="r\x00"),
    ),
    Case(
        "rating NaN in meta",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "meta", "w"],
        "finite number",
        content=json.dumps(rating(meta={"w": float("inf")})).encode(),
        headers={"content-type": "application/json"},
    ),
    Case(
        "rating value not a number",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "value"],
        "valid number",
        json=rating(value="high"),
    ),
    Case(
        "score rating without a scale",  # issue 14, finding 3: never guessed (it was 1-100)
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "scale_min and scale_max: a score rating needs its scale",
        json={"ratings": [{k: v for k, v in RATING.items() if not k.startswith("scale")}]},
    ),
    Case(
        "score rating with half a scale",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0],
        "scale_max: a score rating needs its scale",
        json={"ratings": [{k: v for k, v in RATING.items() if k != "scale_max"}]},
    ),
    Case(
        "rating of a system that is not a candidate",  # issue 14, finding 4
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 1, "system"],
        "system 'c' is not a candidate of item 'item-0' (its candidates: a, b)",
        json={"ratings": [RATING, {**RATING, "system": "c"}]},
    ),
    Case(
        "preference against a system that is not a candidate",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "system_b"],
        "system 'zz' is not a candidate of item 'item-0'",
        json=rating(kind="preference", system_b="zz", value=1),
    ),
    Case(
        "rating value out of range",  # issue 14, finding 6
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "value"],
        "less than or equal to",
        json=rating(value=1e300, scale_max=1e308),
    ),
    Case(
        "rating scale out of range",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "scale_max"],
        "less than or equal to",
        json=rating(scale_max=1e308),
    ),
    Case(
        "rating NaN value",
        "POST",
        RATING_PATH,
        422,
        ["body", "ratings", 0, "value"],
        "finite number",
        content=json.dumps(rating(value=float("nan"))).encode(),
        headers={"content-type": "application/json"},
    ),
]

RUBRIC_CASES = [
    Case(
        "rubric id with spaces",
        "GET",
        "/v1/rubrics/Not A Rubric/versions",
        422,
        ["path", "rubric_id"],
        "should match pattern",
    ),
    Case("rubric id too long", "GET", f"/v1/rubrics/{'r' * 65}/versions", 422, ["path", "rubric_id"], "pattern"),
    Case("unknown rubric", "GET", "/v1/rubrics/no-such-rubric/versions", 404, None, "not found"),
    Case(
        "rubric version too long",
        "GET",
        f"/v1/rubrics/rsum-single/versions/{'0' * 33}",
        422,
        ["path", "version"],
        "should match pattern",
    ),
    Case(
        "rubric version with a slash-like character",
        "GET",
        "/v1/rubrics/rsum-single/versions/v1%3Bdrop",
        422,
        ["path", "version"],
        "pattern",
    ),
    Case("unknown rubric version", "GET", "/v1/rubrics/rsum-single/versions/abc", 404, None, "has no version 'abc'"),
]

RETENTION_CASES = [
    Case("delete unknown run", "DELETE", "/v1/runs/nope", 404, None, "not found"),
    Case("export unknown run", "GET", "/v1/runs/nope/export", 404, None, "not found"),
    Case("prune without an age", "POST", "/v1/runs/prune", 422, ["query", "older_than"], "Field required"),
    Case(
        "prune with a bad age",
        "POST",
        "/v1/runs/prune",
        422,
        ["query", "older_than"],
        "is not an age",
        params={"older_than": "last year"},
    ),
    Case("import not JSON", "POST", "/v1/runs/import", 422, ["body", "line 1"], "not valid JSON", content=b"{nope"),
    Case("import empty", "POST", "/v1/runs/import", 422, ["body", "line 1"], "empty", content=b""),
    Case(
        "import without a header",
        "POST",
        "/v1/runs/import",
        422,
        ["body", "line 1: record"],
        "header",
        content=b'{"record": "item", "item_key": "i", "payload": {}}',
    ),
    Case(
        "import a run without an id",
        "POST",
        "/v1/runs/import",
        422,
        ["body", "line 1: run.id"],
        "is required",
        content=b'{"record": "dialogue-judge-run", "version": 1, "run": {"name": "x"}}',
    ),
    Case(
        "import an item whose payload is not an object",
        "POST",
        "/v1/runs/import",
        422,
        ["body", "line 2: item.payload"],
        "must be a JSON object",
        content=(
            b'{"record": "dialogue-judge-run", "version": 1, "run": {"id": "run_x", "config": {}, "n_items": 1,'
            b' "n_judgments": 0}}\n{"record": "item", "item_key": "i", "payload": "text"}'
        ),
    ),
]

FACTS_AND_VERDICTS_CASES = [
    Case("facts unknown run", "GET", "/v1/runs/nope/facts", 404, None, "run 'nope' not found"),
    Case(
        "facts limit too big",
        "GET",
        f"/v1/runs/{RUN}/facts",
        422,
        ["query", "limit"],
        "less than or equal to 1000",
        params={"limit": 5000},
    ),
    Case(
        "facts negative offset",
        "GET",
        f"/v1/runs/{RUN}/facts",
        422,
        ["query", "offset"],
        "greater than or equal to 0",
        params={"offset": -1},
    ),
    Case(
        "verdicts unknown run",
        "POST",
        "/v1/runs/nope/verdicts",
        404,
        None,
        "run 'nope' not found",
        content=b"item_id,system,aspect,judge,score\n",
        headers={"content-type": "text/csv"},
    ),
    Case(
        "verdicts half a scale",
        "POST",
        f"/v1/runs/{RUN}/verdicts",
        422,
        ["query", "scale_min"],
        "scale_min below scale_max",
        params={"scale_min": 1},
        content=b"item_id,system,aspect,judge,score\n",
        headers={"content-type": "text/csv"},
    ),
    Case(
        "verdicts body not UTF-8 (format detected from the body)",
        "POST",
        f"/v1/runs/{RUN}/verdicts",
        422,
        ["body", "file"],
        "not UTF-8 text",
        content=b"\xff\xfe\x00",
        headers={"content-type": "application/octet-stream"},
    ),
    Case(
        "verdicts turn out of range",
        "POST",
        f"/v1/runs/{RUN}/verdicts",
        422,
        ["query", "turn"],
        "greater than or equal to 1",
        params={"turn": 0},
        content=b"{}",
        headers={"content-type": "application/jsonl"},
    ),
]

MONITOR = "/v1/monitors/nope"
MONITOR_BODY: dict[str, Any] = {
    "name": "prod-bot",
    "rubrics": ["rsum-single"],
    "judges": ["openai-compatible:judge@http://127.0.0.1:9/v1"],
    "aspects": ["consistency"],
    "sample_rate": 0.05,
}
MONITOR_CASES = [
    Case(
        "monitor sample rate above 1",
        "POST",
        "/v1/monitors",
        422,
        ["body", "sample_rate"],
        "less than or equal to 1",
        json={**MONITOR_BODY, "sample_rate": 1.5},
    ),
    Case(
        "monitor daily budget on a model the price table does not list",
        "POST",
        "/v1/monitors",
        422,
        ["body", "daily_budget_usd"],
        "judge 'anthropic:claude-sonnet-5' has no price",
        json={**MONITOR_BODY, "judges": ["anthropic:claude-sonnet-5"], "daily_budget_usd": 3},
    ),
    Case(
        "monitor without rubrics",
        "POST",
        "/v1/monitors",
        422,
        ["body", "rubrics"],
        "Field required",
        json={k: v for k, v in MONITOR_BODY.items() if k != "rubrics"},
    ),
    Case(
        "monitors limit too big", "GET", "/v1/monitors", 422, ["query", "limit"], "less than", params={"limit": 10**6}
    ),
    Case("unknown monitor", "GET", MONITOR, 404, None, "monitor 'nope' not found"),
    Case("patch unknown monitor", "PATCH", MONITOR, 404, None, "monitor 'nope' not found", json={"sample_rate": 0.1}),
    Case(
        "patch monitor with a negative rate",
        "PATCH",
        MONITOR,
        422,
        ["body", "sample_rate"],
        "greater than or equal to 0",
        json={"sample_rate": -0.1},
    ),
    Case("delete unknown monitor", "DELETE", MONITOR, 404, None, "monitor 'nope' not found"),
    Case(
        "no responses posted",
        "POST",
        f"{MONITOR}/responses",
        422,
        ["body"],
        "no responses: send a JSON list or JSON Lines of responses",
        json=[],
    ),
    Case(
        "series with an unknown bucket",
        "GET",
        f"{MONITOR}/series",
        422,
        ["query", "bucket"],
        "Input should be",
        params={"bucket": "1w"},
    ),
    Case(
        "bucket responses without a start",
        "GET",
        f"{MONITOR}/responses",
        422,
        ["query", "start"],
        "Field required",
    ),
    Case("alerts of an unknown monitor", "GET", f"{MONITOR}/alerts", 404, None, "monitor 'nope' not found"),
    Case(
        "deliveries of an unknown monitor",
        "GET",
        f"{MONITOR}/deliveries",
        404,
        None,
        "monitor 'nope' not found",
    ),
    Case("deliveries of an unknown run", "GET", "/v1/runs/nope/deliveries", 404, None, "not found"),
    Case(
        "deliveries limit too big",
        "GET",
        f"/v1/runs/{RUN}/deliveries",
        422,
        ["query", "limit"],
        "less than or equal to 1000",
        params={"limit": 5000},
    ),
]

CALIBRATION_CASES = [
    Case("calibrated unknown run", "GET", "/v1/runs/nope/calibrated", 404, None, "run 'nope' not found"),
    Case(
        "calibrated level too low",
        "GET",
        f"/v1/runs/{RUN}/calibrated",
        422,
        ["query", "ci"],
        "greater than 0.5",
        params={"ci": 0.4},
    ),
    Case(
        "calibrated level not a number",
        "GET",
        f"/v1/runs/{RUN}/calibrated",
        422,
        ["query", "ci"],
        "valid number",
        params={"ci": "high"},
    ),
    Case(
        "label queue unknown run", "POST", "/v1/runs/nope/label-queue", 404, None, "run 'nope' not found", json={"n": 1}
    ),
    Case(
        "label queue n zero",
        "POST",
        f"/v1/runs/{RUN}/label-queue",
        422,
        ["body", "n"],
        "greater than or equal to 1",
        json={"n": 0},
    ),
    Case(
        "label queue unknown strategy",
        "POST",
        f"/v1/runs/{RUN}/label-queue",
        422,
        ["body", "strategy"],
        "'uniform'",
        json={"n": 1, "strategy": "smart"},
    ),
    Case(
        "label queue extra field",
        "POST",
        f"/v1/runs/{RUN}/label-queue",
        422,
        ["body", "weights"],
        "Extra inputs",
        json={"n": 1, "weights": [1]},
    ),
    Case(
        "label queue nothing judged",
        "POST",
        f"/v1/runs/{RUN}/label-queue",
        409,
        None,
        "no done single-mode judgment",
        json={"n": 1},
    ),
    Case("label queue none yet", "GET", f"/v1/runs/{RUN}/label-queue", 404, None, "has no label queue"),
]


OTLP_CASES = [
    # the receiver answers in OTLP's google.rpc.Status shape, whose JSON form also carries FastAPI's ``detail``
    Case("otlp not OTLP", "POST", "/v1/otlp/v1/traces", 400, ["body"], "resourceSpans", json={"messages": ["hi"]}),
    Case(
        "otlp unsupported content type",
        "POST",
        "/v1/otlp/v1/traces",
        415,
        ["body"],
        "application/x-protobuf",
        content=b"{}",
        headers={"Content-Type": "text/plain"},
    ),
    Case(
        "otlp truncated JSON",
        "POST",
        "/v1/otlp/v1/traces",
        400,
        ["body"],
        "",
        content=b'{"resourceSpans": [',
        headers={"Content-Type": "application/json"},
    ),
]

ALL_CASES = (
    RUN_CASES
    + OTLP_CASES
    + CALIBRATION_CASES
    + ESTIMATE_CASES
    + JSONL_CASES
    + READ_CASES
    + RATING_CASES
    + RUBRIC_CASES
    + RETENTION_CASES
    + FACTS_AND_VERDICTS_CASES
    + MONITOR_CASES
)


NO_INPUT = ("/v1/rubrics", "/v1/limits")  # GET routes that take no input


def test_every_endpoint_has_a_bad_input_case() -> None:
    from judge_api.app import create_app

    covered = {(c.method, c.path.replace(RUN, "{run_id}")) for c in ALL_CASES}
    covered |= {
        (c.method, "/v1/runs/{run_id}" + c.path.split("/v1/runs/nope", 1)[1])
        for c in ALL_CASES
        if c.path.startswith("/v1/runs/nope")
    }
    covered.add(("GET", "/v1/runs/{run_id}"))  # the unknown-run cases above
    covered |= {(c.method, c.path.replace(MONITOR, "/v1/monitors/{monitor_id}")) for c in MONITOR_CASES}
    for case in RUBRIC_CASES:
        parts = case.path.split("/")
        covered.add(
            (case.method, "/".join([*parts[:3], "{rubric_id}", *(["versions", "{version}"][: len(parts) - 4])]))
        )
    routes = served_routes(create_app())
    assert ("POST", "/v1/runs") in routes  # the enumeration reaches into the routers (else this test checks nothing)
    missing = []
    for method, path in routes:
        if path.startswith("/v1") and path not in NO_INPUT and (method, path) not in covered:
            missing.append((method, path))
    assert not missing, f"endpoints without a bad-input case: {missing}"


def check(api: Api, run_id: str, case: Case) -> str | None:
    """None if the case behaves, else what went wrong."""
    before = api.row_counts()
    params = {k: v.replace(RUN, run_id) if isinstance(v, str) else v for k, v in case.params.items()}
    kwargs: dict[str, Any] = {"params": params, "headers": case.headers}
    if case.json is not None:
        kwargs["json"] = json.loads(json.dumps(case.json).replace(RUN, run_id))
    if case.content is not None:
        kwargs["content"] = case.content
    response = api.client.request(case.method, case.path.replace(RUN, run_id), **kwargs)
    after = api.row_counts()
    problems = []
    if response.status_code != case.status:
        problems.append(f"status {response.status_code} != {case.status}: {response.text[:300]}")
    else:
        detail = response.json()["detail"]
        if case.loc is None:
            if not isinstance(detail, str) or case.reason not in detail:
                problems.append(f"detail {detail!r} lacks {case.reason!r}")
        else:
            matching = [e for e in detail if list(e["loc"])[: len(case.loc)] == case.loc]
            if not matching:
                problems.append(f"no error at {case.loc}: {detail}")
            elif not any(case.reason in e["msg"] for e in matching):
                problems.append(f"no message with {case.reason!r} at {case.loc}: {matching}")
            elif any(not e["msg"] for e in detail):
                problems.append(f"an error without a reason: {detail}")
    if after != before:
        problems.append(f"rows changed: {before} -> {after}")
    return "; ".join(problems) or None


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_bad_input_is_rejected_clearly_and_stores_nothing(
    api_factory: ApiFactory, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    api = api_factory(database_url=url, DJ_MAX_JUDGMENTS="100000")
    run_id = api.submit()["id"]
    failures = {}
    for case in ALL_CASES:
        problem = check(api, run_id, copy.deepcopy(case))
        if problem:
            failures[case.name] = problem
    assert not failures, json.dumps(failures, indent=1)


def test_too_many_judgments_names_items_and_stores_nothing(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_JUDGMENTS="5")
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=run_body(n_items=3))
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", "items"] and "more than 5 judgments" in error["msg"]
    assert api.row_counts() == before


def test_a_failing_insert_rolls_back_the_whole_run(api_factory: ApiFactory) -> None:
    """If storing fails half-way (here: the judgments insert, as the database runs it), the run and its items are not
    kept either."""
    from sqlalchemy import event

    from judge_api.db import get_engine

    api = api_factory()
    api.submit()  # the project row exists already (it is created on its own, idempotently, on first use)
    before = api.row_counts()

    def exploding_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO JUDGMENTS"):
            raise RuntimeError("disk full")

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", exploding_insert)
    try:
        response = api.client.post("/v1/runs", json=run_body())
    finally:
        event.remove(engine, "before_cursor_execute", exploding_insert)
    assert response.status_code == 500
    assert api.row_counts() == before


def test_valid_requests_still_work(api: Api) -> None:
    """The guards do not reject ordinary input: unicode, emoji, a backslash-u sequence typed as text."""
    body = run_body()
    body["items"][0]["dialogue"][0]["text"] = "Ünïcödé 🐕 and a literal \\u0000 typed by a user"
    body["items"][0]["meta"] = {"score": 1.5, "tags": ["x", "y"], "nested": {"ok": True}}
    body["name"] = "a normal name"
    created = api.submit(body=body)
    items = api.client.get(f"/v1/runs/{created['id']}/items").json()["items"]
    assert items[0]["dialogue"][0]["text"] == body["items"][0]["dialogue"][0]["text"]
    ratings = api.client.post(f"/v1/runs/{created['id']}/human-ratings", json=rating())
    assert ratings.status_code == 201 and ratings.json()["created"] == 1


def test_retry_takes_unparseable_and_refuses_unknown_fields(api: Api) -> None:
    """Issue 27.3: POST /v1/runs/{id}/retry {"unparseable": true}; an unknown field is a 422 naming it."""
    run_id = api.submit()["id"]
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200  # no body: as before
    ok = api.client.post(f"/v1/runs/{run_id}/retry", json={"unparseable": True})
    assert ok.status_code == 200 and ok.json()["requeued"] == 0
    bad = api.client.post(f"/v1/runs/{run_id}/retry", json={"unparsable": True})
    assert bad.status_code == 422 and "unparsable" in bad.text
