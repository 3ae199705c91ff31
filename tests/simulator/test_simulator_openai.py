"""The real ``openai.OpenAI`` client (3.x SDK, over HTTP) against a simulator subprocess."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pydantic
import pytest

from judge_simulator import SimulatorProcess

SINGLE = (
    "You are an impartial judge.\nConversation Context:user: hi Personality:user: likes tea "
    "Assistant Response: {response}\nBegin your evaluation by providing a short explanation, then you must "
    "rate the Assistant Response on an integer score of 1 (very bad) to 100 (very good) by strictly "
    "following this format:\n[[score]]."
)
GRADED_PAIR = (
    "There are four options for you to choose from:\n1.Response 1 is better\n"
    "2.Response 1 is slightly better\n3.Response 2 is slightly better\n4.Response 2 is better\n"
    "response 1: {r1} response 2: {r2}"
)
FASTCHAT_SYSTEM = (
    'Output your final verdict by strictly following this format: "[[A]]" if assistant A is better, '
    '"[[B]]" if assistant B is better, and "[[C]]" for a tie.'
)
FASTCHAT_USER = (
    "[User Question]\nwhere?\n\n"
    "[The Start of Assistant A's Answer]\n{r1}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{r2}\n[The End of Assistant B's Answer]"
)
SCORE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["explanation", "score"],
    "properties": {
        "explanation": {"type": "string"},
        "score": {"type": "integer", "minimum": 1, "maximum": 100},
    },
}


@pytest.fixture
def client(sim: SimulatorProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0, timeout=10.0)


def _content(completion: Any, index: int = 0) -> str:
    content = completion.choices[index].message.content
    assert isinstance(content, str), completion
    return content


def _ask(client: openai.OpenAI, content: str, model: str = "gpt-4o", **kwargs: Any) -> Any:
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], **kwargs)


@pytest.mark.parametrize("planted", [1, 42, 83, 100])
def test_planted_single_score(client: openai.OpenAI, planted: int) -> None:
    prompt = SINGLE.format(response=f"Try the Cascades! <<q={planted}>>")
    completion = _ask(client, prompt, temperature=0, seed=0, max_tokens=512)
    choice = completion.choices[0]
    assert choice.message.content.endswith(f"Rating: [[{planted}]]")
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert (
        completion.object == "chat.completion"
        and completion.model == "gpt-4o"
        and completion.id.startswith("chatcmpl-")
    )
    assert completion.usage.prompt_tokens == len(prompt) // 4 + 1
    assert completion.usage.completion_tokens == len(choice.message.content) // 4 + 1
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_system_and_user_messages_are_both_read(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "Rate on 1-100 as [[rating]]."},
            {"role": "user", "content": [{"type": "text", "text": "Response: hello <<q=64>>"}]},
        ],
    )
    assert _content(completion).endswith("[[64]]")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len("Rate on 1-100 as [[rating]].\n\nResponse: hello <<q=64>>") // 4 + 1


@pytest.mark.parametrize(
    ("q1", "q2", "graded", "fastchat"),
    [
        (90, 20, "Response 1 is better", "[[A]]"),
        (20, 90, "Response 2 is better", "[[B]]"),
        (56, 50, "Response 1 is slightly better", "[[A]]"),
        (50, 56, "Response 2 is slightly better", "[[B]]"),
    ],
)
def test_pairwise_verdict_follows_markers_in_both_formats_and_orders(
    client: openai.OpenAI, q1: int, q2: int, graded: str, fastchat: str
) -> None:
    mirror = {"1": "2", "2": "1", "A": "B", "B": "A"}
    for first, second, flip in ((q1, q2, False), (q2, q1, True)):
        r1, r2 = f"Tea, surely. <<q={first}>>", f"Coffee! <<q={second}>>"
        text = _ask(client, GRADED_PAIR.format(r1=r1, r2=r2)).choices[0].message.content
        want = graded if not flip else graded.replace(graded[9], mirror[graded[9]])
        assert text.endswith(want), text
        reply = client.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "system", "content": FASTCHAT_SYSTEM},
                {"role": "user", "content": FASTCHAT_USER.format(r1=r1, r2=r2)},
            ],
        )
        want_fc = fastchat if not flip else f"[[{mirror[fastchat[2]]}]]"
        assert _content(reply).endswith(f"Final verdict: {want_fc}")


def test_fastchat_tie(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": FASTCHAT_SYSTEM},
            {"role": "user", "content": FASTCHAT_USER.format(r1="x <<q=60>>", r2="y <<q=60>>")},
        ],
    )
    assert _content(reply).endswith("[[C]]")


def test_position_bias_one_always_prefers_the_first_response(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    sim.set_script({"position_bias": 1.0})
    for q1, q2 in [(10, 90), (90, 10)]:
        text = _ask(client, GRADED_PAIR.format(r1=f"a <<q={q1}>>", r2=f"b <<q={q2}>>")).choices[0].message.content
        assert text.endswith("Response 1 is better")


def test_rate_limit_fault_exposes_retry_after(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    sim.set_script({"faults": [{"kind": "rate_limit", "first_n": 1, "retry_after": 7.5}]})
    with pytest.raises(openai.RateLimitError) as caught:
        _ask(client, SINGLE.format(response="x"))
    err = caught.value
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == "8"  # whole seconds, rounded up
    assert err.response.headers["retry-after-ms"] == "7500"
    assert err.code == "rate_limit_exceeded" and err.type == "requests"
    assert isinstance(err.body, dict) and "try again" in err.body["message"]
    assert _ask(client, SINGLE.format(response="x <<q=5>>")).choices[0].message.content.endswith("[[5]]")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_raise_internal_server_error(sim: SimulatorProcess, client: openai.OpenAI, status: int) -> None:
    sim.set_script({"faults": [{"kind": "server_error", "status": status, "first_n": 1}]})
    with pytest.raises(openai.InternalServerError) as caught:
        _ask(client, SINGLE.format(response="x"))
    assert caught.value.status_code == status
    assert caught.value.type == "server_error"
    assert sim.stats()["by_status"] == {str(status): 1}


def test_hang_raises_api_timeout_error(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    sim.set_script({"faults": [{"kind": "hang", "first_n": 1, "hang_seconds": 20}]})
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _ask(client, SINGLE.format(response="x"), timeout=0.5)
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while sim.stats()["in_flight"] and time.monotonic() < deadline:  # the server notices the hang-up
        time.sleep(0.05)
    assert sim.stats()["by_status"] == {"499": 1} and sim.stats()["in_flight"] == 0


def test_malformed_output(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    sim.set_script({"faults": [{"kind": "malformed", "first_n": 1}]})
    choice = _ask(client, SINGLE.format(response="x <<q=70>>")).choices[0]
    assert choice.message.content == "I cannot decide." and choice.finish_reason == "stop"


def test_truncated_output_is_a_prefix_with_finish_reason_length(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    prompt = SINGLE.format(response="x <<q=70>>")
    full = _ask(client, prompt).choices[0].message.content
    sim.set_script({"faults": [{"kind": "truncated", "first_n": 1, "keep_fraction": 0.5}]})
    choice = _ask(client, prompt).choices[0]
    assert choice.finish_reason == "length"
    assert full.startswith(choice.message.content) and len(choice.message.content) == len(full) // 2
    assert "[[" not in choice.message.content


def test_max_tokens_cuts_the_reply(client: openai.OpenAI) -> None:
    completion = _ask(client, SINGLE.format(response="x <<q=70>>"), max_completion_tokens=5)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 5 and len(completion.choices[0].message.content) == 19


def test_stop_sequence(client: openai.OpenAI) -> None:
    choice = _ask(client, SINGLE.format(response="x <<q=70>>"), stop=["Rating:"]).choices[0]
    assert choice.finish_reason == "stop" and "Rating" not in choice.message.content


def test_invalid_json_body_raises_json_decode_error(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    sim.set_script({"faults": [{"kind": "invalid_json", "first_n": 1}]})
    with pytest.raises(json.JSONDecodeError) as caught:
        _ask(client, SINGLE.format(response="x"))
    assert not isinstance(caught.value, openai.OpenAIError)  # the SDK does not wrap it
    assert sim.stats()["by_status"] == {"200": 1}


def test_json_schema_response_format(client: openai.OpenAI) -> None:
    completion = _ask(
        client,
        SINGLE.format(response="x <<q=83>>"),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "score", "schema": SCORE_SCHEMA, "strict": True},
        },
    )
    data = json.loads(completion.choices[0].message.content)
    assert set(data) == {"explanation", "score"} and data["score"] == 83 and isinstance(data["explanation"], str)


def test_json_object_response_format(client: openai.OpenAI) -> None:
    completion = _ask(
        client, GRADED_PAIR.format(r1="a <<q=10>>", r2="b <<q=90>>"), response_format={"type": "json_object"}
    )
    data = json.loads(completion.choices[0].message.content)
    assert data["verdict"] == "Response 2 is better" and data["score"] == -2


class Verdict(pydantic.BaseModel):
    explanation: str
    score: int


def test_sdk_parse_helper_with_pydantic_model(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model="gpt-4o",
        messages=[{"role": "user", "content": SINGLE.format(response="y <<q=77>>")}],
        response_format=Verdict,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Verdict) and parsed.score == 77


def test_function_tool_call(client: openai.OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "other", "parameters": {"type": "object", "properties": {}}},
        },
        {"type": "function", "function": {"name": "record_verdict", "parameters": SCORE_SCHEMA}},
    ]
    completion = _ask(client, SINGLE.format(response="x <<q=66>>"), tools=tools)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "record_verdict"
    assert json.loads(call.function.arguments)["score"] == 66
    forced = _ask(
        client,
        SINGLE.format(response="x <<q=66>>"),
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "other"}},
    )
    assert forced.choices[0].message.tool_calls[0].function.name == "other"
    plain = _ask(client, SINGLE.format(response="x <<q=66>>"), tools=tools, tool_choice="none")
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content.endswith("[[66]]")


def test_n_choices_and_sample_jitter(sim: SimulatorProcess, client: openai.OpenAI) -> None:
    prompt = SINGLE.format(response="x <<q=50>>")
    cold = _ask(client, prompt, n=3, temperature=0)
    assert [c.index for c in cold.choices] == [0, 1, 2]
    assert {c.message.content for c in cold.choices} == {cold.choices[0].message.content}
    sim.set_script({"sample_jitter": 4})
    warm = [c.message.content for c in _ask(client, prompt, n=8, temperature=1.0, seed=3).choices]
    scores = [int(text.rsplit("[[", 1)[1].rstrip("]")) for text in warm]
    assert all(46 <= s <= 54 for s in scores) and len(set(scores)) > 1
    assert warm == [c.message.content for c in _ask(client, prompt, n=8, temperature=1.0, seed=3).choices]


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "gpt-4o" in ids and "claude-sonnet-4-5" in ids


def test_bad_request_in_openai_error_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[])
    assert caught.value.type == "invalid_request_error" and caught.value.param == "messages"


def test_keep_alive_replies_are_not_held_back_by_nagle(sim: SimulatorProcess) -> None:
    """Regression: the listening socket lacked TCP_NODELAY, so every reply on a kept-alive connection waited for
    the client's delayed ACK (~40 ms) - a latency no script asked for."""
    sim.set_script({"latency": 0.0})
    with httpx.Client(base_url=sim.base_url) as client:
        client.get("/models")
        started = time.perf_counter()
        for _ in range(10):
            client.get("/models")
        per_request = (time.perf_counter() - started) / 10
    assert per_request < 0.02
