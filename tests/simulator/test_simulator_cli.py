"""The simulator as a user runs it: ``dialogue-judge simulator`` / ``python -m judge_simulator`` with the example
script of the README (scripted and recorded verdicts), and a clear exit 2 when it cannot listen."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "simulator-verdicts.yaml"
COMMANDS = {
    "dialogue-judge simulator": [sys.executable, "-m", "dialogue_judge.cli", "simulator"],
    "python -m judge_simulator": [sys.executable, "-m", "judge_simulator"],
}


def _announced_url(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The ``SIMULATOR_URL=...`` line's URL (read in a thread, so a silent child cannot hang the test)."""
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("SIMULATOR_URL="):
                found.append(line.removeprefix("SIMULATOR_URL=").strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no SIMULATOR_URL line (exit {proc.poll()})"
    return found[0]


@pytest.fixture(scope="module")
def example_server() -> Iterator[str]:
    """``dialogue-judge simulator --port 0 --script examples/simulator-verdicts.yaml``; yields its ``/v1`` URL."""
    command = [*COMMANDS["dialogue-judge simulator"], "--port", "0", "--script", str(EXAMPLE)]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True
    )
    try:
        yield _announced_url(proc) + "/v1"
    finally:
        proc.terminate()
        # a graceful stop within the timeout; uvicorn re-raises the SIGTERM it handled once it has shut down
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
        assert proc.stdout is not None
        proc.stdout.close()


def _ask(base_url: str, prompt: str, extra_body: dict[str, Any] | None = None) -> str:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="sim-judge", messages=[{"role": "user", "content": prompt}], extra_body=extra_body
    )
    return reply.choices[0].message.content or ""


SCORE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "score",
        "schema": {
            "type": "object",
            "required": ["explanation", "score"],
            "properties": {"explanation": {"type": "string"}, "score": {"type": "integer"}},
        },
    },
}
RECORDED_PROMPT = (
    "Conversation so far: ... I've heard good things about the NordicTrack? ...\n\n"
    "Response to judge:\nThe tropics sound great. I'm from Alaska.\n\nRate it as [[score]]."
)


@pytest.mark.parametrize(
    ("prompt", "expected_end"),
    [
        ("Response to judge:\nThat's interesting. Tell me more about it!\n\nRate it as [[score]].", "[[12]]"),
        ("Response to judge:\nI'm from Alaska. <<q=77>>\n\nRate it as [[score]].", "[[77]]"),
    ],
    ids=["scripted-generic", "unmatched-planted-marker"],
)
def test_the_example_script_answers_scripted_verdicts(example_server: str, prompt: str, expected_end: str) -> None:
    assert _ask(example_server, prompt).endswith(expected_end)


def test_the_example_script_replays_a_recorded_reply_word_for_word(example_server: str) -> None:
    recorded = "On topic and true to the persona (Alaska, running outside). Rating: [[91]]"
    assert _ask(example_server, RECORDED_PROMPT) == recorded
    # a call asking for structured output gets the recorded score in the JSON object
    assert json.loads(_ask(example_server, RECORDED_PROMPT, {"response_format": SCORE_SCHEMA}))["score"] == 91


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_port_in_use_exits_2_with_a_message(command: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*COMMANDS[command], "--port", str(port)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "SIMULATOR_URL" not in result.stdout


def test_help_lists_the_simulator_options_under_the_subcommand_name() -> None:
    result = subprocess.run(
        [*COMMANDS["dialogue-judge simulator"], "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: dialogue-judge simulator")
    assert "--script FILE" in result.stdout and "--seed SEED" in result.stdout


def _example_calls() -> list[tuple[str, dict[str, Any], str, str, str | None, dict[str, Any]]]:
    """Every shipped rubric on the bundled example items, as a run judges them: each system (memory texts for the
    fact-level rubrics) and aspect, pairwise against the ``generic`` baseline in both orders as README's command
    does, in text mode and, for the rubrics that have one, with structured output."""
    from judge_api.rubrics import get_registry

    registry = get_registry()
    items = [
        json.loads(line)
        for name in ("msc-demo.jsonl", "msc-memory-audit.jsonl")
        for line in (REPO_ROOT / "examples" / name).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    calls: list[tuple[str, dict[str, Any], str, str, str | None, dict[str, Any]]] = []
    for rubric_id in sorted(p.name for p in (REPO_ROOT / "rubrics").iterdir() if (p / "rubric.yaml").is_file()):
        rubric = registry.get(rubric_id)
        modes = [{}, {"structured_output": True}] if rubric.structured_output else [{}]
        for item in items:
            candidates = item["candidates"]
            for system in sorted(candidates):
                if rubric.kind == "pairwise" and (system == "generic" or "generic" not in candidates):
                    continue
                pairs = (
                    [(candidates[system], candidates["generic"]), (candidates["generic"], candidates[system])]
                    if rubric.kind == "pairwise"
                    else [(candidates[system], None)]
                )
                for aspect in rubric.aspects:
                    for params in modes:
                        calls += [(rubric_id, item, aspect.name, first, second, params) for first, second in pairs]
    return calls


def test_the_example_script_answers_every_shipped_rubric_in_its_format(example_server: str) -> None:
    """Issue 26.2: README's simulator script gave 24/24 unparseable rsum-pairwise verdicts. Every shipped rubric,
    sent through the service's own prompt rendering, judge client and parsers, now gets a parseable verdict."""
    from concurrent.futures import ThreadPoolExecutor

    from judge_api.cachekeys import request_options
    from judge_api.config import Settings
    from judge_api.judges import parse_judge
    from judge_api.rubrics import get_registry
    from workers.clients import JudgeRequest, OpenAIJudgeClient
    from workers.prompting import parse_context, render
    from workers.verdicts import parse_scored

    registry = get_registry()
    client = OpenAIJudgeClient(parse_judge(f"openai-compatible:sim-judge@{example_server}"), Settings())
    calls = _example_calls()

    def judge_one(call: tuple[str, dict[str, Any], str, str, str | None, dict[str, Any]]) -> str | None:
        rubric_id, item, aspect, first, second, params = call
        rubric = registry.get(rubric_id)
        request = JudgeRequest(
            messages=render(rubric, item, aspect, first, second).messages, **request_options(rubric, params, 0)
        )
        parsed = parse_scored(client.complete(request), rubric, request, parse_context(rubric, item, first))
        return None if parsed.ok else f"{rubric_id} {item['id']} {aspect} {params}: {parsed.error}"

    with ThreadPoolExecutor(16) as pool:
        failures = [f for f in pool.map(judge_one, calls) if f is not None]
    judged = {call[0] for call in calls}
    assert judged == {p.name for p in (REPO_ROOT / "rubrics").iterdir() if (p / "rubric.yaml").is_file()}
    assert len([c for c in calls if c[0] == "rsum-pairwise"]) == 24  # the 24 of 24
    assert failures == []
