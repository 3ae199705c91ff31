"""POST /v1/runs/estimate (issue 24 item 4): the same body as POST /v1/runs, nothing stored, nothing called; the
judgment count is what the run plans, tokens counted with OpenAI's tokenizer, costs from the price table."""

from __future__ import annotations

from typing import Any

import pytest

from judge_api.judges import parse_judge
from judge_api.pricing import load_prices
from judge_api.prompting import render
from judge_api.rubrics import get_registry
from judge_api.tokens import count_messages

from .conftest import JUDGE, Api, item, run_body

HISTORY = [
    {"speaker": "user" if k % 2 == 0 else "bot", "text": f"Turn {k:03d}: we talked about Rex the beagle and the coast."}
    for k in range(160)
]


def long_body(judge: str, n_items: int = 3, systems: tuple[str, ...] = ("a", "b", "c", "d")) -> dict[str, Any]:
    items = []
    for i in range(n_items):
        it = item(i, systems)
        it["dialogue"] = [*HISTORY, {"speaker": "user", "text": f"Question {i}: what is my dog's name?"}]
        items.append(it)
    return {"items": items, "rubrics": ["memochat-consistency"], "judges": [judge]}


@pytest.mark.parametrize(
    "body",
    [
        run_body(3),
        run_body(2, mode=["pairwise"], rubrics=["rsum-pairwise"], aspects=["overall"], orders="both"),
        run_body(2, aspects=["consistency", "coherence"], judges=[JUDGE, "openai:gpt-4o"]),
    ],
)
def test_judgment_count_is_what_the_run_plans_and_nothing_is_stored(api: Api, body: dict[str, Any]) -> None:
    before = api.row_counts()
    response = api.client.post("/v1/runs/estimate", json=body)
    assert response.status_code == 200, response.text
    estimate = response.json()
    assert api.row_counts() == before  # nothing stored
    created = api.submit(body=body)
    assert estimate["judgments"] == created["n_judgments"]
    assert estimate["provider_calls"] + estimate["cached_judgments"] <= estimate["judgments"]


def test_tokens_and_costs_of_an_openai_judge(api: Api) -> None:
    body = long_body("openai:gpt-4o")
    estimate = api.client.post("/v1/runs/estimate", json=body).json()
    assert estimate["judgments"] == 12 and estimate["provider_calls"] == 12 and estimate["cached_judgments"] == 0
    rubric = get_registry().get("memochat-consistency")
    spec = parse_judge("openai:gpt-4o")
    expected_in = sum(
        count_messages(spec, render(rubric, it, "consistency", text).messages)
        for it in body["items"]
        for text in it["candidates"].values()
    )
    assert estimate["input_tokens"] == expected_in
    (judge,) = estimate["per_judge"]
    assert judge["tokenizer"] == "o200k_base" and judge["priced"]
    # per item, 3 of 4 candidates read the shared history from the prompt cache (128-token steps)
    assert estimate["cached_input_tokens"] > 0 and estimate["cached_input_tokens"] % 128 == 0
    assert estimate["cached_input_tokens"] > 9 * 0.8 * (expected_in / 12)
    price = load_prices().for_spec(spec)
    out = estimate["output_tokens"]
    cached = estimate["cached_input_tokens"]
    realtime = ((expected_in - cached) * price.input + cached * price.cached_input + out * price.output) / 1e6
    assert estimate["cost_usd"]["realtime"] == pytest.approx(realtime)
    assert estimate["cost_usd"]["batch"] == pytest.approx(realtime * 0.5)
    assert estimate["cost_usd"]["list"] == pytest.approx((expected_in * price.input + out * price.output) / 1e6)
    assert estimate["seconds"] is None and any("rate limit" in n for n in estimate["notes"])


def test_seconds_at_the_configured_rate_limit(api_factory: Any) -> None:
    api = api_factory(DJ_RATE_LIMITS="openai:gpt-4o=60/0")
    estimate = api.client.post("/v1/runs/estimate", json=long_body("openai:gpt-4o", n_items=2)).json()
    assert estimate["seconds"] == pytest.approx(8 * 60 / 60)


def test_anthropic_judge_is_approximated_and_says_so(api: Api) -> None:
    estimate = api.client.post("/v1/runs/estimate", json=long_body("anthropic:claude-sonnet-4-5")).json()
    (judge,) = estimate["per_judge"]
    assert judge["tokenizer"].startswith("approximate")
    assert judge["cache_write_tokens"] > 0 and judge["cached_input_tokens"] == 3 * judge["cache_write_tokens"]
    assert any("approximated" in n for n in estimate["notes"])


def test_bad_body_is_a_422_naming_the_field(api: Api) -> None:
    response = api.client.post("/v1/runs/estimate", json=run_body(1, rubrics=["no-such-rubric"]))
    assert response.status_code == 422
    assert "rubrics" in response.text


def test_cli_submit_estimate_submits_nothing(api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from dialogue_judge import cli
    from dialogue_judge.client import ApiClient

    def client(url: str | None = None, key: str | None = None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = api.client  # the TestClient is an httpx.Client on the app
        return wrapped

    monkeypatch.setattr(cli, "api_client", client)
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(it) for it in long_body("openai:gpt-4o")["items"]))
    before = api.row_counts()
    result = CliRunner().invoke(
        cli.app,
        ["submit", str(items), "--judge", "openai:gpt-4o", "--rubric", "memochat-consistency", "--estimate"],
    )
    assert result.exit_code == 0, result.output
    assert "judgments         12" in result.stdout and "cost USD" in result.stdout and "batch" in result.stdout
    assert api.row_counts() == before
