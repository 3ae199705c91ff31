"""A small HTTP client for the API, used by the CLI, the dashboard and the CI gate.

Submissions are safe to retry: each one carries an ``Idempotency-Key`` (a fresh UUID per submission, the same on
every retry of it), so when a connection breaks or the API answers 5xx the client sends it again, with back-off,
and the API returns the run the first attempt created if it got that far. One submission never makes two runs.
"""

from __future__ import annotations

import email.utils
import os
import random
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

import httpx

if TYPE_CHECKING:
    from dialogue_judge.monitor_log import MonitorLogger

IDEMPOTENCY_HEADER = "Idempotency-Key"
# the connection failed or broke, or the answer did not come in time; a bad URL or a malformed request is not retried
RETRIED_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
OnRetry = Callable[[int, float, str], None]  # (attempt that failed, seconds until the next one, what went wrong)


_tls: tuple[tuple[object, ...], ssl.SSLContext] | None = None
_tls_lock = threading.Lock()


def _tls_source() -> tuple[object, ...] | None:
    """What httpx's default context is read from, with the identity of what is there now (a file's inode, size and
    modification time; a directory's listing time); None when it cannot be read (then nothing is kept)."""
    import certifi

    named = os.environ.get("SSL_CERT_FILE") or None
    folder = None if named else os.environ.get("SSL_CERT_DIR") or None
    path = named or folder or certifi.where()
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (path, folder is not None, found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


def tls_context() -> ssl.SSLContext:
    """What httpx's default (``verify=True``) builds for a client (certifi's authorities, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``'s), built once per process and source: reading a bundle takes ~40 ms, and the dashboard makes a
    client for each of its reads. A bundle rewritten in place (a rotated authority) is another source: the next
    client reads it (review r60a)."""
    global _tls
    source = _tls_source()
    if source is None:
        return httpx.create_ssl_context()  # fails as httpx's default does, and is not kept
    with _tls_lock:  # clients made at once by several sessions' scripts build it once (review r60a)
        if _tls is None or _tls[0] != source:
            _tls = (source, httpx.create_ssl_context())
        return _tls[1]


def forget_tls_context() -> None:
    """Build the context again at the next client (tests)."""
    global _tls
    with _tls_lock:
        _tls = None


class ApiError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def describe_error(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if isinstance(detail, list):
        parts = []
        for error in detail:
            loc = ".".join(str(p) for p in error.get("loc", []) if p != "body")
            parts.append(f"{loc}: {error.get('msg')}" if loc else str(error.get("msg")))
        return f"HTTP {response.status_code}: " + "; ".join(parts)
    return f"HTTP {response.status_code}: {detail}"


def retry_after_s(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (delta-seconds or an HTTP date), if it has a usable one."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ApiClient:
    """``retry_for``: how long a submission keeps retrying after a connection error or a 5xx (seconds, 0 = never),
    with exponential back-off from ``backoff_base`` to ``backoff_max`` (jittered) or the server's Retry-After;
    ``on_retry`` hears of each retry (the CLI prints it); ``transport`` replaces the network (tests)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        retry_for: float = 30.0,
        backoff_base: float = 0.25,
        backoff_max: float = 4.0,
        on_retry: OnRetry | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport, verify=tls_context()
        )
        self.retry_for = retry_for
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.on_retry = on_retry

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, retry: bool = False, **kwargs: Any) -> Any:
        """One API call. With ``retry`` (only for requests that are safe to repeat, such as a submission with an
        Idempotency-Key) a connection error or a 5xx answer is retried until ``retry_for`` seconds have passed."""
        deadline = time.monotonic() + (self.retry_for if retry else 0.0)
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                response = self._http.request(method, path, **kwargs)
            except RETRIED_ERRORS as exc:
                problem = f"cannot reach the API at {self.base_url}: {str(exc) or type(exc).__name__}"
                status_code = 0
            except httpx.HTTPError as exc:
                raise ApiError(0, f"cannot reach the API at {self.base_url}: {exc}") from None
            else:
                if response.status_code < 500 or not retry:
                    break
                problem, status_code, wait = describe_error(response), response.status_code, retry_after_s(response)
            delay = self._backoff(attempt) if wait is None else max(wait, 0.05)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tried = f" (tried {attempt} times over {self.retry_for:.0f} s)" if attempt > 1 else ""
                raise ApiError(status_code, problem + tried)
            delay = min(delay, remaining)
            if self.on_retry is not None:
                self.on_retry(attempt, delay, problem)
            time.sleep(delay)
        if response.status_code >= 400:
            raise ApiError(response.status_code, describe_error(response))
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def download(
        self,
        path: str,
        out: BinaryIO,
        params: dict[str, Any] | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
        on_start: Callable[[httpx.Headers], None] | None = None,
    ) -> httpx.Headers:
        """GET ``path`` and write the body to ``out`` as it arrives (flat memory whatever its size); ``on_start``
        sees the headers before the body, ``on_chunk`` each block (progress). Returns the response's headers; an
        error answer is an :class:`ApiError`."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._http.stream("GET", path, params=query) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(response.status_code, describe_error(response))
                if on_start is not None:
                    on_start(response.headers)
                for block in response.iter_bytes():
                    out.write(block)
                    if on_chunk is not None:
                        on_chunk(block)
                return response.headers
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach the API at {self.base_url}: {str(exc) or type(exc).__name__}") from None

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    # convenience
    def estimate_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """What ``create_run(body)`` would cost and take (POST /v1/runs/estimate): nothing stored, nothing called."""
        return dict(self.post("/v1/runs/estimate", body))

    def create_run(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit a run (POST /v1/runs). Retried on connection errors and 5xx with one Idempotency-Key (a new UUID
        unless given), so it creates at most one run however often it is sent."""
        headers = {IDEMPOTENCY_HEADER: idempotency_key or str(uuid.uuid4())}
        return dict(self.request("POST", "/v1/runs", json=body, headers=headers, retry=True))

    def create_run_jsonl(
        self, content: bytes, params: list[tuple[str, str]], idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Submit items as JSON Lines (POST /v1/runs/jsonl, the run's settings in ``params``), retried like
        :meth:`create_run`."""
        headers = {IDEMPOTENCY_HEADER: idempotency_key or str(uuid.uuid4()), "content-type": "application/x-ndjson"}
        return dict(self.request("POST", "/v1/runs/jsonl", content=content, params=params, headers=headers, retry=True))

    def import_verdicts(self, run_id: str, content: bytes, params: dict[str, Any]) -> dict[str, Any]:
        """Send a verdict file as it is (POST /v1/runs/{id}/verdicts); retried like a submission, since importing
        the same file again stores nothing."""
        query = {k: v for k, v in params.items() if v is not None}
        content_type = "text/csv" if query.get("format") == "csv" else "application/octet-stream"
        headers = {"content-type": content_type}
        path = f"/v1/runs/{run_id}/verdicts"
        return dict(self.request("POST", path, content=content, params=query, headers=headers, retry=True))

    # monitors (docs/monitoring.md)
    def create_monitor(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.post("/v1/monitors", body))

    def monitors(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/monitors", limit=500)["items"])

    def monitor_info(self, monitor_id: str) -> dict[str, Any]:
        return dict(self.get(f"/v1/monitors/{monitor_id}"))

    def monitor_series(self, monitor_id: str, **params: Any) -> Any:
        """GET /v1/monitors/{id}/series (``by`` may be a list; ``format="csv"`` returns the CSV text)."""
        return self.get(f"/v1/monitors/{monitor_id}/series", **params)

    def monitor(self, monitor_id: str, **options: Any) -> MonitorLogger:
        """A logger of production responses to the monitor: ``.log(...)`` buffers and returns at once, a background
        thread sends (dialogue_judge.monitor_log); ``.flush()`` / ``.close()`` when done."""
        from dialogue_judge.monitor_log import MonitorLogger

        return MonitorLogger(self.base_url, monitor_id, dict(self._http.headers), **options)

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/v1/runs/{run_id}"))

    def report(self, run_id: str, n_boot: int | None = None, **params: Any) -> dict[str, Any]:
        """The run's report; ``n_boot`` None: the API's default replicates (the figures every surface shows)."""
        return dict(self.get(f"/v1/runs/{run_id}/report", n_boot=n_boot, **params))

    def all_judgments(self, run_id: str, page: int = 1000, **filters: Any) -> list[dict[str, Any]]:
        """Every matching judgment (full rows), page by page with the API's cursor (each page one index seek, where
        offsets would rescan the rows before them)."""
        rows: list[dict[str, Any]] = []
        cursor: int | None = None
        while True:
            data = self.get(f"/v1/runs/{run_id}/judgments", limit=page, cursor=cursor, **filters)
            rows.extend(data["items"])
            cursor = data.get("next_cursor")
            if cursor is None or not data["items"]:
                return rows
