"""``SimulatorProcess``: run the simulator as a real subprocess for tests and benchmarks.

A subprocess (rather than an in-process server thread) keeps the simulator's event loop and
GIL away from the code under test, so SDK clients, timeouts and concurrency behave as against a
remote provider::

    with SimulatorProcess({"faults": [{"kind": "rate_limit", "first_n": 1}]}) as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0)
        anthropic_client = anthropic.Anthropic(base_url=sim.root_url, api_key="sk-ant-test")
        ...
        assert sim.stats()["total_calls"] == 1
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from .script import Script

_REPO_ROOT = Path(__file__).resolve().parents[1]  # the folder holding judge_simulator
_URL_PREFIX = "SIMULATOR_URL="


class SimulatorError(RuntimeError):
    """The simulator failed to start, or a control call was rejected."""


class SimulatorProcess:
    """Start ``python -m judge_simulator`` on a free loopback port and control it over HTTP.

    ``script`` may be a :class:`Script`, a dict (validated here, before spawning), a path to a
    JSON/YAML script file, or None for the default script. ``root_url`` is
    ``http://127.0.0.1:PORT`` (give it to ``anthropic.Anthropic(base_url=...)``), ``base_url`` is
    ``root_url + "/v1"`` (for ``openai.OpenAI(base_url=...)``).
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if isinstance(script, Mapping):
            script = Script.model_validate(dict(script))
        self._script = script
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.extra_args = extra_args
        self._proc: subprocess.Popen[str] | None = None
        self._root_url: str | None = None
        self._client: httpx.Client | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._stderr_path: Path | None = None
        self._url_ready = threading.Event()
        self._returncode: int | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> SimulatorProcess:
        """Spawn the server and wait until ``GET /v1/models`` answers."""
        if self._proc is not None:
            return self
        self._tmpdir = tempfile.TemporaryDirectory(prefix="judge-sim-")
        tmp = Path(self._tmpdir.name)
        cmd = [
            sys.executable,
            "-m",
            "judge_simulator",
            "--host",
            self.host,
            "--port",
            "0",
            *self.extra_args,
        ]
        if isinstance(self._script, Script):
            script_path = tmp / "script.json"
            script_path.write_text(self._script.model_dump_json(), encoding="utf-8")
            cmd += ["--script", str(script_path)]
        elif self._script is not None:
            cmd += ["--script", str(self._script)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        self._stderr_path = tmp / "stderr.log"
        with open(self._stderr_path, "w", encoding="utf-8") as stderr:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=env
            )
        threading.Thread(target=self._drain_stdout, name="judge-sim-stdout", daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _drain_stdout(self) -> None:
        """Read the announced URL, then keep draining stdout so the child never blocks on it."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(_URL_PREFIX) and self._root_url is None:
                self._root_url = line[len(_URL_PREFIX) :].strip()
                self._url_ready.set()
        self._url_ready.set()  # EOF: the child exited; unblock the waiter

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        self._url_ready.wait(self.startup_timeout)
        if self._root_url is None:
            raise SimulatorError(f"simulator did not announce its URL: {self._stderr_tail()}")
        self._client = httpx.Client(base_url=self._root_url, timeout=10.0, trust_env=False)
        while True:
            try:
                if self._client.get("/v1/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self._proc is not None and self._proc.poll() is not None:
                raise SimulatorError(f"simulator exited with {self._proc.returncode}: {self._stderr_tail()}")
            if time.monotonic() > deadline:
                raise SimulatorError(f"simulator not ready after {self.startup_timeout}s: {self._stderr_tail()}")
            time.sleep(0.05)

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr_path is None or not self._stderr_path.exists():
            return ""
        return self._stderr_path.read_text(encoding="utf-8", errors="replace")[-limit:]

    def stop(self) -> None:
        """Terminate the server (SIGTERM), kill it if it has not exited after ``stop_timeout``."""
        if self._client is not None:
            self._client.close()
            self._client = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(self.stop_timeout)
        if proc is not None:
            self._returncode = proc.returncode
            if proc.stdout is not None:
                proc.stdout.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited (None while running or before start)."""
        return self._returncode if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- URLs -------------------------------------------------------------------------------
    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` - the Anthropic SDK's ``base_url``."""
        if self._root_url is None:
            raise SimulatorError("simulator not started")
        return self._root_url

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` - the OpenAI SDK's ``base_url``."""
        return self.root_url + "/v1"

    # ---- control ------------------------------------------------------------------------------
    def _control(self, method: str, path: str, **kwargs: Any) -> Any:
        if self._client is None:
            raise SimulatorError("simulator not started")
        response = self._client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise SimulatorError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def stats(self) -> dict[str, Any]:
        """``GET /_sim/stats``: total_calls, by_model, by_endpoint, by_status, by_fault, by_rule,
        in_flight, max_in_flight, bill, batches (each provider batch's id, kind, requests, created_at and ended_at)."""
        result: dict[str, Any] = self._control("GET", "/_sim/stats")
        return result

    def requests(self, limit: int = 100) -> list[dict[str, Any]]:
        """``GET /_sim/requests``: the last ``limit`` calls with their request bodies."""
        result: list[dict[str, Any]] = self._control("GET", "/_sim/requests", params={"limit": limit})["requests"]
        return result

    def reset(self, *, restore_script: bool = False) -> None:
        """Clear stats and fault/rate state; ``restore_script`` also brings back the startup script."""
        self._control("POST", "/_sim/reset", params={"script": "1" if restore_script else "0"})

    def set_script(self, script: Script | Mapping[str, Any]) -> dict[str, Any]:
        """Replace the behaviour script (omitted fields take defaults); returns the normalized script."""
        data = script.model_dump(mode="json") if isinstance(script, Script) else dict(script)
        result: dict[str, Any] = self._control(
            "PUT", "/_sim/script", content=json.dumps(data), headers={"content-type": "application/json"}
        )
        return result

    def get_script(self) -> dict[str, Any]:
        """``GET /_sim/script``."""
        result: dict[str, Any] = self._control("GET", "/_sim/script")
        return result
