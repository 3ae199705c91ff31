"""The real ``anthropic.Anthropic`` client (2.x SDK, over HTTP) against a simulator subprocess."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest

from judge_simulator import SimulatorProcess

SYSTEM = "You are an impartial judge. Rate the response on 1-100, strictly in this format: [[rating]]."
FASTCHAT_SYSTEM = 'Output "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, "[[C]]" for a tie.'
FASTCHAT_USER = (
    "[The Start of Assistant A's Answer]\n{r1}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{r2}\n[The End of Assistant B's Answer]"
)
SCORE_SCHEMA = {
    "type": "object",
    "required": ["explanation", "score"],
    "properties": {"explanation": {"type": "string"}, "score": {"type": "integer"}},
}


@pytest.fixture
def client(sim: SimulatorProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.root_url, api_key="sk-ant-test", max_retries=0, timeout=10.0)


def _ask(client: anthropic.Anthropic, user: str, system: str = SYSTEM, **kwargs: Any) -> Any:
    kwargs.setdefault("max_tokens", 512)
    return client.messages.create(
        model="claude-sonnet-4-5", system=system, messages=[{"role": "user", "content": user}], **kwargs
    )


@pytest.mark.parametrize("planted", [3, 83])
def test_planted_single_score(client: anthropic.Anthropic, planted: int) -> None:
    user = f"Response: I'd suggest the coast. <<q={planted}>>"
    message = _ask(client, user)
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.stop_reason == "end_turn" and message.model == "claude-sonnet-4-5"
    [block] = message.content
    assert block.type == "text" and block.text.endswith(f"Rating: [[{planted}]]")
    assert message.usage.input_tokens == len(SYSTEM + "\n\n" + user) // 4 + 1
    assert message.usage.output_tokens == len(block.text) // 4 + 1


@pytest.mark.parametrize(("q1", "q2", "verdict"), [(70, 20, "[[A]]"), (20, 70, "[[B]]"), (40, 40, "[[C]]")])
def test_pairwise_fastchat(client: anthropic.Anthropic, q1: int, q2: int, verdict: str) -> None:
    message = _ask(client, FASTCHAT_USER.format(r1=f"a <<q={q1}>>", r2=f"b <<q={q2}>>"), system=FASTCHAT_SYSTEM)
    assert message.content[0].text.endswith(f"Final verdict: {verdict}")


def test_rate_limit_error_shape_and_retry_after(sim: SimulatorProcess, client: anthropic.Anthropic) -> None:
    sim.set_script({"faults": [{"kind": "rate_limit", "first_n": 1, "retry_after": 12}]})
    with pytest.raises(anthropic.RateLimitError) as caught:
        _ask(client, "Response: x")
    err = caught.value
    assert err.status_code == 429 and err.type == "rate_limit_error"
    assert err.response.headers["retry-after"] == "12" and "retry-after-ms" not in err.response.headers
    assert isinstance(err.body, dict) and err.body["type"] == "error"
    assert err.body["error"]["type"] == "rate_limit_error" and err.request_id == "req_sim_00000001"


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (500, anthropic.InternalServerError, "api_error"),
        (502, anthropic.InternalServerError, "api_error"),
        (503, anthropic.ServiceUnavailableError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_server_errors(
    sim: SimulatorProcess,
    client: anthropic.Anthropic,
    status: int,
    error_class: type[Exception],
    error_type: str,
) -> None:
    sim.set_script({"faults": [{"kind": "server_error", "status": status, "every_k": 1}]})
    with pytest.raises(error_class) as caught:
        _ask(client, "Response: x")
    assert isinstance(caught.value, anthropic.InternalServerError)
    assert caught.value.status_code == status and caught.value.type == error_type


def test_hang_raises_api_timeout_error(sim: SimulatorProcess, client: anthropic.Anthropic) -> None:
    sim.set_script({"faults": [{"kind": "hang", "first_n": 1, "hang_seconds": 20}]})
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        _ask(client, "Response: x", timeout=0.5)
    assert time.monotonic() - started < 5


def test_malformed_and_truncated(sim: SimulatorProcess, client: anthropic.Anthropic) -> None:
    sim.set_script(
        {"faults": [{"kind": "malformed", "calls": [1], "text": "Hmm."}, {"kind": "truncated", "calls": [2]}]}
    )
    malformed = _ask(client, "Response: x <<q=90>>")
    assert malformed.content[0].text == "Hmm." and malformed.stop_reason == "end_turn"
    truncated = _ask(client, "Response: x <<q=90>>")
    assert truncated.stop_reason == "max_tokens" and "[[" not in truncated.content[0].text
    cut = _ask(client, "Response: x <<q=90>>", max_tokens=3)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3


def test_stop_sequences(client: anthropic.Anthropic) -> None:
    message = _ask(client, "Response: x <<q=90>>", stop_sequences=["[["])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "[["
    assert message.content[0].text.endswith("Rating: ")


def test_tool_use_block(client: anthropic.Anthropic) -> None:
    message = _ask(
        client,
        "Response: fine <<q=58>>",
        tools=[{"name": "verdict", "description": "Record the verdict.", "input_schema": SCORE_SCHEMA}],
        tool_choice={"type": "tool", "name": "verdict"},
    )
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.type == "tool_use" and block.name == "verdict" and block.id.startswith("toolu_")
    assert block.input["score"] == 58 and isinstance(block.input["explanation"], str)


def test_output_config_json_schema(client: anthropic.Anthropic) -> None:
    message = _ask(
        client,
        "Response: fine <<q=31>>",
        output_config={"format": {"type": "json_schema", "schema": SCORE_SCHEMA}},
    )
    assert json.loads(message.content[0].text)["score"] == 31


def test_invalid_json_body_raises_json_decode_error(sim: SimulatorProcess, client: anthropic.Anthropic) -> None:
    sim.set_script({"faults": [{"kind": "invalid_json", "first_n": 1}]})
    with pytest.raises(json.JSONDecodeError) as caught:
        _ask(client, "Response: x")
    assert not isinstance(caught.value, anthropic.AnthropicError)


def test_temperature_via_extra_body_reaches_the_server(sim: SimulatorProcess, client: anthropic.Anthropic) -> None:
    _ask(client, "Response: x", extra_body={"temperature": 0.0})
    [record] = sim.requests()
    assert record["endpoint"] == "/v1/messages" and record["body"]["temperature"] == 0.0
    assert record["body"]["max_tokens"] == 512 and record["status"] == 200 and record["rule"] == "single-score"


def test_missing_max_tokens_is_an_anthropic_400(sim: SimulatorProcess) -> None:
    response = httpx.post(
        sim.root_url + "/v1/messages",
        json={"model": "claude", "messages": [{"role": "user", "content": "hi"}]},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


def test_models_list_in_anthropic_shape(client: anthropic.Anthropic) -> None:
    ids = [m.id for m in client.models.list()]
    assert "claude-sonnet-4-5" in ids
