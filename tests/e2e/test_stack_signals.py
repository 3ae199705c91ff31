"""Issue 27 item 1: `dialogue-judge up` and `demo` stop every process they started on SIGTERM (what systemd, a
container runtime or a script sends) as on SIGINT, in order (dashboard, API, worker, local judge, Redis), within
15 s, and exit 0. Before, SIGTERM ended `up` and left Redis, uvicorn, the Celery worker and Streamlit running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dialogue_judge.stack import STOP_GRACE_S, Stack, free_port, port_open
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dialogue_judge.cli"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(DJ_HOME=str(home), PYTHONPATH=str(ROOT))
    return env


def _read_until(process: subprocess.Popen[str], needle: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        line = process.stdout.readline() if process.stdout else ""
        if not line and process.poll() is not None:
            break
        seen += line
    assert needle in seen, seen
    return seen


def _listening_ports(processes: list[psutil.Process]) -> set[int]:
    ports: set[int] = set()
    for proc in processes:
        try:
            ports |= {c.laddr.port for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
    return ports


def _signal_and_check(process: subprocess.Popen[str], signum: int, also: tuple[str, ...] = ()) -> None:
    children = psutil.Process(process.pid).children(recursive=True)
    names = " ".join(" ".join(c.cmdline()) for c in children)
    for wanted in ("redis-server", "uvicorn", "celery", *also):
        assert wanted in names, (wanted, names)
    ports = _listening_ports(children)
    assert ports, "the children listen on nothing?"
    started = time.monotonic()
    process.send_signal(signum)
    code = process.wait(20)
    elapsed = time.monotonic() - started
    assert code == 0, process.stdout.read() if process.stdout else ""
    assert elapsed < 15, elapsed
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, [c.cmdline() for c in left]
    assert not [p for p in ports if port_open("127.0.0.1", p)], ports


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_up_stops_every_child_on_the_signal(tmp_path: Path, signum: int) -> None:
    api_port, dashboard_port = free_port(), free_port()
    up = subprocess.Popen(
        [*CLI, "up", "--no-local-judge", "--api-port", str(api_port), "--dashboard-port", str(dashboard_port)],
        env=_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _read_until(up, "stops everything", 120)
        deadline = time.monotonic() + 60  # the dashboard binds its port a moment after it is spawned
        while not port_open("127.0.0.1", dashboard_port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert port_open("127.0.0.1", dashboard_port)
        _signal_and_check(up, signum)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)


def test_up_stops_the_local_judge_it_started(tmp_path: Path) -> None:
    """`up --local-judge`: the llama.cpp server serving SmolLM2 is one of the children SIGTERM stops."""
    pytest.importorskip("llama_cpp", reason="the local judge needs dialogue-judge[local]")
    api_port, judge_port = free_port(), free_port()
    up = subprocess.Popen(
        [*CLI, "up", "--local-judge", "--local-judge-port", str(judge_port), "--api-port", str(api_port),
         "--no-dashboard", "--workers", "2"],
        env=_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        _read_until(up, "stops everything", 240)
        assert port_open("127.0.0.1", judge_port)
        _signal_and_check(up, signal.SIGTERM, also=("llama_cpp.server",))
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_demo_keep_running_stops_every_child_on_the_signal(
    tmp_path: Path, judge_simulator: SimulatorProcess, signum: int
) -> None:
    judge_simulator.reset(restore_script=True)
    demo = subprocess.Popen(
        [
            *CLI,
            "demo",
            "--keep-running",
            "--judge",
            f"openai-compatible:sim-judge@{judge_simulator.base_url}",
            "--api-port",
            str(free_port()),
        ],
        env=_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _read_until(demo, "SIGTERM stops", 240)
        _signal_and_check(demo, signum)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)


# each fake child notes when SIGTERM reached it and when it exited; the worker takes a moment to finish, as a warm
# shutdown writing its in-flight verdicts does
_FAKE = """
import signal, sys, time
name, log, linger = sys.argv[1], sys.argv[2], float(sys.argv[3])
def note(what):
    with open(log, "a") as f:
        f.write(f"{time.monotonic()} {name} {what}\\n")
def term(*_):
    note("term")
    time.sleep(linger)
    note("exit")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
note("up")
while True:
    time.sleep(0.1)
"""


def test_stop_goes_in_order_and_waits_for_each_child(tmp_path: Path) -> None:
    log = tmp_path / "events"
    stack = Stack(home=tmp_path / "home")
    names = ["redis", "local-judge", "api", "worker", "dashboard"]  # the order `start` spawns them in
    for name in names:
        linger = "1.0" if name == "worker" else "0.1"
        stack._spawn(name, [sys.executable, "-c", _FAKE, name, str(log), linger])
    deadline = time.monotonic() + 30
    while (not log.exists() or log.read_text().count(" up") < len(names)) and time.monotonic() < deadline:
        time.sleep(0.1)
    stack.stop()
    events = [line.split() for line in log.read_text().splitlines()]
    terms = [(float(t), name) for t, name, what in events if what == "term"]
    exits = {name: float(t) for t, name, what in events if what == "exit"}
    assert [name for _, name in terms] == ["dashboard", "api", "worker", "local-judge", "redis"]
    term_at = {name: t for t, name in terms}
    assert term_at["local-judge"] >= exits["worker"] and term_at["redis"] >= exits["worker"]  # Redis outlives it
    assert stack.children == []


def test_a_child_that_ignores_sigterm_is_killed_after_its_grace(tmp_path: Path) -> None:
    stack = Stack(home=tmp_path / "home")
    stubborn = stack._spawn(
        "dashboard",
        [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"],
    )
    time.sleep(0.5)
    started = time.monotonic()
    stack.stop()
    assert stubborn.process.returncode == -signal.SIGKILL
    assert STOP_GRACE_S["dashboard"] <= time.monotonic() - started < STOP_GRACE_S["dashboard"] + 3
    assert sum(STOP_GRACE_S.values()) <= 13  # room under the 15 s a supervisor gives
