"""The simulator speaks both batch protocols (OpenAI Files + Batch API, Anthropic Message Batches) as the official
SDKs call them: statuses, result lines, scripted per-request errors and expirations, cancellation, the completion
delay, provider-style prompt caching inside a batch and the bill at the batch price."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import anthropic
import openai
import pytest

from judge_simulator import SimulatorProcess

HISTORY = "".join(f"Speaker {k % 2}: turn {k:04d} about the dog Rex and the trip to the coast.\n" for k in range(120))
PRICES = {
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0},
}
M = 1_000_000


def _openai(sim: SimulatorProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0, timeout=10.0)


def _anthropic(sim: SimulatorProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.root_url, api_key="sk-ant-test", max_retries=0, timeout=10.0)


def _jsonl(lines: list[dict[str, Any]]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(line) + "\n" for line in lines).encode())


def _chat_line(custom_id: str, text: str) -> dict[str, Any]:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], "max_completion_tokens": 50}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def _wait(fetch: Any, ended: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        state = fetch()
        if ended(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_openai_batch_lifecycle_output_and_error_files(sim: SimulatorProcess) -> None:
    faults = [{"kind": "error", "status": 503, "match": "second"}, {"kind": "expire", "match": "third"}]
    sim.set_script({"batch": {"completion_seconds": 0.4, "faults": faults}})
    client = _openai(sim)
    lines = [_chat_line("r1", "first: rate <<q=70>>"), _chat_line("r2", "second"), _chat_line("r3", "third")]
    uploaded = client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"k": "v"}
    )
    assert (
        batch.status == "in_progress"
        and batch.request_counts is not None
        and batch.request_counts.total == 3
        and batch.metadata == {"k": "v"}
    )
    assert client.batches.retrieve(batch.id).status == "in_progress"  # the completion delay
    done = _wait(lambda: client.batches.retrieve(batch.id), lambda b: b.status not in ("in_progress",))
    assert done.status == "expired"  # a request ran out of the window: the batch expired, answers kept
    assert done.request_counts.completed == 1 and done.request_counts.failed == 2
    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in output] == ["r1"]
    assert output[0]["response"]["status_code"] == 200 and output[0]["error"] is None
    assert output[0]["response"]["body"]["choices"][0]["message"]["content"]
    errors = {
        e["custom_id"]: e for e in (json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines())
    }
    assert errors["r2"]["response"]["status_code"] == 503 and errors["r2"]["response"]["body"]["error"]["message"]
    assert errors["r3"]["response"] is None and errors["r3"]["error"]["code"] == "batch_expired"
    assert [b.id for b in client.batches.list()] == [batch.id]
    endpoints = sim.stats()["by_endpoint"]
    assert endpoints["batch:/v1/chat/completions"] == 3 and "/v1/chat/completions" not in endpoints


def test_openai_batch_cancel_and_bad_input(sim: SimulatorProcess) -> None:
    sim.set_script({"batch": {"completion_seconds": 5.0}})
    client = _openai(sim)
    uploaded = client.files.create(
        file=("in.jsonl", _jsonl([_chat_line("a", "x"), _chat_line("b", "y")])), purpose="batch"
    )
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = _wait(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "cancelled")
    assert done.status == "cancelled" and done.output_file_id is None
    codes = {json.loads(x)["error"]["code"] for x in client.files.content(done.error_file_id).text.splitlines()}
    assert codes == {"batch_cancelled"}
    with pytest.raises(openai.BadRequestError, match="repeated custom_id"):
        again = client.files.create(
            file=("in.jsonl", _jsonl([_chat_line("a", "x"), _chat_line("a", "y")])), purpose="batch"
        )
        client.batches.create(input_file_id=again.id, endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("in.jsonl", _jsonl([])), purpose="fine-tune")


def test_anthropic_message_batch_results_and_cancel(sim: SimulatorProcess) -> None:
    faults = [{"kind": "error", "status": 529, "match": "second"}, {"kind": "expire", "match": "third"}]
    sim.set_script({"batch": {"completion_seconds": 0.3, "faults": faults}})
    client = _anthropic(sim)
    requests: Any = [
        {
            "custom_id": f"r{i}",
            "params": {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": text}]},
        }
        for i, text in enumerate(["first <<q=70>>", "second", "third"], 1)
    ]
    batch = client.messages.batches.create(requests=requests)
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    done = _wait(lambda: client.messages.batches.retrieve(batch.id), lambda b: b.processing_status == "ended")
    assert (done.request_counts.succeeded, done.request_counts.errored, done.request_counts.expired) == (1, 1, 1)
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["r1"].type == "succeeded" and results["r1"].message.content[0].text  # type: ignore[union-attr]
    assert results["r2"].type == "errored" and results["r2"].error.error.type == "overloaded_error"
    assert results["r3"].type == "expired"
    sim.set_script({"batch": {"completion_seconds": 5.0}})
    slow = client.messages.batches.create(requests=requests[:2])
    assert client.messages.batches.cancel(slow.id).processing_status == "canceling"
    ended = _wait(lambda: client.messages.batches.retrieve(slow.id), lambda b: b.processing_status == "ended")
    assert ended.request_counts.canceled == 2
    assert {r.result.type for r in client.messages.batches.results(slow.id)} == {"canceled"}


def test_a_batch_over_the_scripted_limits_is_refused_as_the_provider_refuses_it(sim: SimulatorProcess) -> None:
    """``batch.max_requests`` / ``max_bytes`` stand for the providers' limits (OpenAI: 400 at create; Anthropic:
    400 for the count, 413 for the body), so a client's split can be checked against them at a small size."""
    small = [_chat_line(f"r{i}", f"short {i}") for i in range(3)]
    big = [_chat_line(f"b{i}", "x" * 400) for i in range(2)]
    fits = len(_jsonl(small[:2]).getvalue())
    sim.set_script({"batch": {"max_requests": 2, "max_bytes": max(fits, 600)}})
    client = _openai(sim)

    def create(lines: list[dict[str, Any]]) -> Any:
        uploaded = client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
        return client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

    assert create(small[:2]).request_counts.total == 2
    with pytest.raises(openai.BadRequestError, match="at most 2 requests"):
        create(small)
    with pytest.raises(openai.BadRequestError, match="bytes, a batch at most 600"):
        create(big)

    claude = _anthropic(sim)

    def entries(texts: list[str]) -> Any:
        params = {"model": "claude-sonnet-4-5", "max_tokens": 50}
        return [
            {"custom_id": f"r{i}", "params": {**params, "messages": [{"role": "user", "content": text}]}}
            for i, text in enumerate(texts)
        ]

    assert claude.messages.batches.create(requests=entries(["a", "b"])).request_counts.processing == 2
    with pytest.raises(anthropic.BadRequestError, match="at most 2 per batch"):
        claude.messages.batches.create(requests=entries(["a", "b", "c"]))
    with pytest.raises(anthropic.APIStatusError, match="takes at most 600") as refused:
        claude.messages.batches.create(requests=entries(["y" * 400, "z" * 400]))
    assert refused.value.status_code == 413


def test_a_batch_caches_shared_prefixes_and_bills_at_the_batch_price(sim: SimulatorProcess) -> None:
    sim.set_script({"prompt_cache": {"enabled": True, "prices": PRICES}})
    client = _openai(sim)
    lines = [_chat_line(f"r{i}", HISTORY + f"candidate {i}") for i in range(3)]
    for line in lines:
        line["body"]["prompt_cache_key"] = "group-1"
    uploaded = client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = _wait(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "completed")
    usages = [
        json.loads(x)["response"]["body"]["usage"] for x in client.files.content(done.output_file_id).text.splitlines()
    ]
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    assert cached[0] == 0 and cached[1] > 0 and cached[2] == cached[1]  # the first writes, the rest read
    realtime = sum(
        ((u["prompt_tokens"] - c) * 2.5 + c * 1.25 + u["completion_tokens"] * 10.0) / M
        for u, c in zip(usages, cached, strict=True)
    )
    assert sim.stats()["bill"]["usd"] == pytest.approx(realtime * 0.5)
