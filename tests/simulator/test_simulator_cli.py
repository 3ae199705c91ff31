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
