"""The in-process JudgeEngine against the loopback simulator through the official OpenAI and Anthropic SDKs: scores,
Retry-After, back-off, timeouts, bounded attempts, malformed output, re-ask, structured output, tokens/latency/cost,
and provider keys never stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from judge_api.db import get_engine
from judge_api.judges import parse_judge
from judge_api.secrets import reset_secrets_cache
from workers.clients import _status_error
from workers.pricing import load_prices

from .harness import Harness, Timer, dialogue_item

PROVIDERS = ["openai-compatible", "anthropic"]


def two_systems(item_id: str = "i1", good: int = 83, bad: int = 17) -> list[dict]:
    return [dialogue_item(item_id, {"good": f"Your beagle is Rex. <<q={good}>>", "bad": f"A cat? <<q={bad}>>"})]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_scores_are_parsed_with_usage_recorded(harness: Harness, provider: str) -> None:
    run_id = harness.run(
        items=two_systems(),
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency", "coherence"],
    )
    rows = harness.rows(run_id)
    assert len(rows) == 4
    assert {(r.system_a, r.score) for r in rows} == {("good", 83.0), ("bad", 17.0)}
    for row in rows:
        assert row.status == "done" and row.attempts == 1 and row.provider_calls == 1 and not row.cached
        assert row.input_tokens > 0 and row.output_tokens > 0 and row.latency_ms and row.latency_ms > 0
        assert row.raw_output and "[[" in row.raw_output and row.prompt_hash
        assert row.error is None and row.explanation
    assert harness.calls() == 4
    # temperature 0 by default; the seed goes where the wire format has one
    bodies = [r["body"] for r in harness.sim.requests(4)]
    assert all(b["temperature"] == 0 for b in bodies)
    if provider == "anthropic":
        assert all("seed" not in b for b in bodies)
    else:
        assert all(b["seed"] == 0 for b in bodies)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_waits_for_retry_after(harness: Harness, provider: str) -> None:
    harness.build()  # DJ_BACKOFF_MAX is 0.2 s in tests: the wait below can only come from Retry-After
    harness.sim.set_script({"faults": [{"kind": "rate_limit", "first_n": 1, "retry_after": 1}]})
    run_id = harness.create(
        items=[dialogue_item("i", {"s": "Rex. <<q=60>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
    )
    with Timer() as timer:
        assert harness.judge_all(run_id) == ["done"]
    (row,) = harness.rows(run_id)
    assert timer.elapsed >= 1.0
    assert row.attempts == 2 and row.provider_calls == 2 and row.score == 60.0
    assert harness.sim.stats()["by_status"] == {"429": 1, "200": 1}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["server_error", "hang", "invalid_json"])
def test_transient_failure_then_success(harness: Harness, provider: str, fault: str) -> None:
    harness.build(DJ_JUDGE_TIMEOUT="1")
    harness.sim.set_script({"faults": [{"kind": fault, "first_n": 1, "status": 503, "hang_seconds": 5}]})
    run_id = harness.create(
        items=[dialogue_item("i", {"s": "Rex. <<q=44>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
    )
    with Timer() as timer:
        assert harness.judge_all(run_id) == ["done"]
    (row,) = harness.rows(run_id)
    assert row.attempts == 2 and row.score == 44.0 and row.error is None
    if fault == "hang":
        assert 1.0 <= timer.elapsed < 4.0  # the 1 s timeout cut the 5 s hang short


@pytest.mark.parametrize("provider", PROVIDERS)
def test_bounded_attempts_then_failed_with_the_error_kept(harness: Harness, provider: str) -> None:
    harness.build(DJ_MAX_ATTEMPTS="3")
    harness.sim.set_script({"faults": [{"kind": "server_error", "first_n": 100, "status": 500}]})
    run_id = harness.create(
        items=[dialogue_item("i", {"s": "Rex. <<q=44>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
    )
    assert harness.judge_all(run_id) == ["failed"]
    (row,) = harness.rows(run_id)
    assert row.status == "failed" and row.attempts == 3 and row.provider_calls == 3
    assert row.error and "server_error HTTP 500" in row.error and "after 3 attempts" in row.error
    assert row.score is None and row.raw_output is None
    assert harness.calls() == 3
    # never duplicated: judging it again does nothing
    assert harness.engine.judge(row.id) == "skipped" and harness.calls() == 3


def test_client_errors_fail_at_once(harness: Harness) -> None:
    """A 4xx other than 408/409/429 is not retried."""
    harness.build(DJ_MAX_ATTEMPTS="5")
    harness.sim.set_script({"faults": [{"kind": "server_error", "first_n": 100, "status": 400}]})
    run_id = harness.run(
        items=[dialogue_item("i", {"s": "Rex."})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    (row,) = harness.rows(run_id)
    assert row.status == "failed" and row.attempts == 1 and "request_rejected HTTP 400" in (row.error or "")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["malformed", "truncated"])
def test_bad_output_is_unparseable_with_the_raw_text_kept(harness: Harness, provider: str, fault: str) -> None:
    harness.sim.set_script(
        {"faults": [{"kind": fault, "first_n": 100, "text": "I cannot decide.", "keep_fraction": 0.9}]}
    )
    run_id = harness.run(
        items=[dialogue_item("i", {"s": "Rex. <<q=44>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
    )
    (row,) = harness.rows(run_id)
    assert row.status == "unparseable" and row.score is None and row.attempts == 1
    assert row.raw_output
    if fault == "malformed":
        assert row.raw_output == "I cannot decide." and "no [[score]]" in (row.error or "")
    else:
        assert "truncated" in (row.error or "")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_reask_recovers_an_unparseable_reply(harness: Harness, provider: str) -> None:
    harness.sim.set_script({"faults": [{"kind": "malformed", "first_n": 1, "text": "Hmm, hard to say."}]})
    run_id = harness.run(
        items=[dialogue_item("i", {"s": "Rex. <<q=71>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
        options={"reask": 1},
    )
    (row,) = harness.rows(run_id)
    assert row.status == "done" and row.score == 71.0 and row.provider_calls == 2
    assert row.raw_output and row.raw_output.startswith("Hmm, hard to say.") and "--- re-ask 1 ---" in row.raw_output
    reask = harness.sim.requests(1)[0]["body"]["messages"]
    assert reask[-2] == {"role": "assistant", "content": "Hmm, hard to say."}
    assert "could not be read" in reask[-1]["content"]


def test_reask_is_bounded(harness: Harness) -> None:
    harness.sim.set_script({"faults": [{"kind": "malformed", "first_n": 100}]})
    run_id = harness.run(
        items=[dialogue_item("i", {"s": "Rex."})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
        options={"reask": 2},
    )
    (row,) = harness.rows(run_id)
    assert row.status == "unparseable" and row.provider_calls == 3 and harness.calls() == 3
    assert row.raw_output and row.raw_output.count("--- re-ask") == 2


def test_reask_with_the_rubrics_extraction_prompt(harness: Harness) -> None:
    """rsum-pairwise re-asks with the official second-pass prompt, the first reply filled in."""
    harness.sim.set_script({"faults": [{"kind": "malformed", "first_n": 1, "text": "The first is a bit nicer"}]})
    run_id = harness.run(
        items=[dialogue_item("i", {"a": "Rex! <<q=80>>", "b": "Cat. <<q=20>>"})],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        orders="random",
        options={"reask": 1},
    )
    (row,) = harness.rows(run_id)
    assert row.status == "done" and row.provider_calls == 2
    messages = harness.sim.requests(1)[0]["body"]["messages"]
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert messages[1]["content"].startswith("There is a paragraph: The first is a bit nicer. You should give the")


def test_reask_call_failure_keeps_the_first_reply(harness: Harness) -> None:
    harness.build(DJ_MAX_ATTEMPTS="1")
    harness.sim.set_script(
        {"faults": [{"kind": "malformed", "first_n": 1, "text": "No idea."}, {"kind": "server_error", "calls": [2]}]}
    )
    run_id = harness.run(
        items=[dialogue_item("i", {"s": "Rex."})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
        options={"reask": 1},
    )
    (row,) = harness.rows(run_id)
    assert row.status == "unparseable" and row.raw_output == "No idea."
    assert "re-ask 1 failed" in (row.error or "")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_structured_output(harness: Harness, provider: str) -> None:
    run_id = harness.run(
        items=two_systems(),
        rubrics=["dj-consistency"],
        judges=[harness.judge(provider)],
        aspects=["consistency"],
        options={"structured_output": True},
    )
    rows = harness.rows(run_id)
    assert {(r.system_a, r.status, r.score) for r in rows} == {("good", "done", 83.0), ("bad", "done", 17.0)}
    schema = harness.engine.registry.get("dj-consistency").structured_output
    assert schema is not None
    body = harness.sim.requests(1)[0]["body"]
    if provider == "anthropic":
        assert body["tools"][0]["input_schema"] == schema.json_schema
        assert body["tool_choice"] == {"type": "tool", "name": schema.name}
    else:
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["schema"] == schema.json_schema
        assert body["response_format"]["json_schema"]["strict"] is True


def test_structured_output_on_a_rubric_without_a_schema_is_refused(harness: Harness) -> None:
    from judge_api.planning import PlanError

    with pytest.raises(PlanError) as error:
        harness.create(
            items=two_systems(),
            rubrics=["rsum-single"],
            judges=[harness.judge("openai-compatible")],
            options={"structured_output": True},
        )
    assert error.value.field == "options.structured_output" and "dj-consistency" in error.value.message


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"), ("openai-compatible", "sim-judge")],
)
def test_cost_and_run_totals(harness: Harness, provider: str, model: str) -> None:
    judge = harness.judge(provider, model)
    run_id = harness.run(items=two_systems(), rubrics=["rsum-single"], judges=[judge], aspects=["consistency"])
    rows = harness.rows(run_id)
    spec = parse_judge(judge)
    price = load_prices().for_spec(spec)
    for row in rows:
        expected = (row.input_tokens * price.input + row.output_tokens * price.output) / 1_000_000
        assert row.cost_usd == pytest.approx(expected)
        assert (row.cost_usd > 0) == (provider != "openai-compatible")
    summary = harness.summary(run_id)
    assert summary.cost_usd == pytest.approx(sum(r.cost_usd for r in rows), abs=1e-6)
    assert summary.input_tokens == sum(r.input_tokens for r in rows)
    assert summary.output_tokens == sum(r.output_tokens for r in rows)
    assert summary.provider_calls == 2 and summary.counts.done == 2 and summary.status == "done"


def test_price_table_is_editable(harness: Harness, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("openai-compatible:\n  sim-judge: [1000.0, 2000.0]\n")
    harness.build(DJ_PRICES_FILE=str(prices))
    first = harness.run(
        items=[dialogue_item("i", {"s": "Rex."})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    (row,) = harness.rows(first)
    assert row.cost_usd == pytest.approx((row.input_tokens * 1000 + row.output_tokens * 2000) / 1e6)
    # an edit takes effect for the next judgment, without restarting anything
    prices.write_text("openai-compatible:\n  sim-judge: [10.0, 20.0]\n  other: [1.0, 1.0]\n")
    second = harness.run(
        items=[dialogue_item("j", {"s": "Rexy."})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    (row,) = harness.rows(second)
    assert row.cost_usd == pytest.approx((row.input_tokens * 10 + row.output_tokens * 20) / 1e6)


def test_provider_keys_are_never_stored(harness: Harness) -> None:
    openai_key = "sk-PLANTED-openai-3f9a1c7e5d"
    anthropic_key = "PLANTED-anthropic-8b2d4f6a"  # not sk- shaped: found by value, not by shape
    harness.monkeypatch.setenv("OPENAI_API_KEY", openai_key)
    harness.monkeypatch.setenv("ANTHROPIC_API_KEY", anthropic_key)
    reset_secrets_cache()
    harness.build(DJ_MAX_ATTEMPTS="2")
    leak = f"My key is {openai_key} and {anthropic_key}."
    harness.sim.set_script(
        {
            "faults": [
                {"kind": "malformed", "match": "LEAK", "first_n": 100, "text": leak},
                {"kind": "server_error", "match": "FAIL", "first_n": 100},
            ]
        }
    )
    run_id = harness.run(
        items=[
            dialogue_item("leak", {"s": "LEAK Rex."}),
            dialogue_item("fail", {"s": "FAIL Rex."}),
            dialogue_item("ok", {"s": "Rex. <<q=50>>"}),
        ],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai", "gpt-4o"), harness.judge("anthropic")],
        aspects=["consistency"],
    )
    statuses = sorted(r.status for r in harness.rows(run_id))
    assert statuses == ["done", "done", "failed", "failed", "unparseable", "unparseable"]
    with get_engine().connect() as connection:
        dump = "\n".join(
            repr(tuple(row))
            for table in ("judgments", "judge_cache", "runs", "items")
            for row in connection.execute(text(f"SELECT * FROM {table}"))
        )
    assert "My key is *** and ***." in dump  # the leaking reply was kept, scrubbed
    assert openai_key not in dump and anthropic_key not in dump
    assert "PLANTED" not in dump


def test_error_messages_are_scrubbed_of_key_shapes() -> None:
    class FakeStatusError(Exception):
        status_code = 401
        response = None
        message = "Incorrect API key provided: sk-proj-abc123*********************xyz9. Bearer abcdefghijklmnop123"

    error = _status_error(FakeStatusError(), "openai")
    assert not error.retryable and "sk-proj" not in str(error) and "abcdefghijklmnop123" not in str(error)
