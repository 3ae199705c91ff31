"""Provider keys come only from the environment or secret files, and never reach judgments, API responses, reports
or logs - also when the provider's error message echoes the key back."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import OwnRedis
from judge_api.secrets import (
    SecretError,
    install_log_scrubber,
    provider_secret,
    reset_secrets_cache,
    scrub,
)

PLANTED = "sk-PLANTED-0123456789abcdefXYZ"
PLANTED_FILE_KEY = "sk-PLANTED-FROM-FILE-9876543210"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    reset_secrets_cache()
    yield
    reset_secrets_cache()


def test_provider_secret_from_env_file_and_secrets_dir(tmp_path: Path) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(PLANTED_FILE_KEY + "\n")
    assert provider_secret("OPENAI_API_KEY", {"OPENAI_API_KEY": PLANTED}) == PLANTED
    # the variable wins over the file
    both = {"OPENAI_API_KEY": PLANTED, "OPENAI_API_KEY_FILE": str(key_file)}
    assert provider_secret("OPENAI_API_KEY", both) == PLANTED
    assert provider_secret("OPENAI_API_KEY", {"OPENAI_API_KEY_FILE": str(key_file)}) == PLANTED_FILE_KEY
    secrets_dir = tmp_path / "run-secrets"
    secrets_dir.mkdir()
    (secrets_dir / "anthropic_api_key").write_text("sk-ant-from-dir-123456")
    env = {"DJ_SECRETS_DIR": str(secrets_dir)}
    assert provider_secret("ANTHROPIC_API_KEY", env) == "sk-ant-from-dir-123456"
    assert provider_secret("OPENAI_API_KEY", env) is None


def test_missing_secret_file_names_the_variable_not_the_content(tmp_path: Path) -> None:
    with pytest.raises(SecretError, match=r"OPENAI_API_KEY_FILE points at .*does not exist"):
        provider_secret("OPENAI_API_KEY", {"OPENAI_API_KEY_FILE": str(tmp_path / "nope")})


def test_scrub_replaces_env_and_file_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file = tmp_path / "compat.key"
    key_file.write_text(PLANTED_FILE_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY_FILE", str(key_file))
    monkeypatch.setenv("DJ_API_KEY", "djk_abcdef123456_secretpart")
    reset_secrets_cache()
    message = f"Incorrect API key provided: {PLANTED}; other {PLANTED_FILE_KEY}; ours djk_abcdef123456_secretpart"
    cleaned = scrub(message)
    assert cleaned is not None
    assert PLANTED not in cleaned and PLANTED_FILE_KEY not in cleaned and "secretpart" not in cleaned
    assert cleaned.count("***") == 3
    assert scrub("nothing secret here") == "nothing secret here"


def test_log_records_are_scrubbed(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    reset_secrets_cache()
    install_log_scrubber()
    logger = logging.getLogger("dj.test.secrets")
    with caplog.at_level(logging.INFO, logger="dj.test.secrets"):
        logger.info("calling with key %s", PLANTED)
        try:
            raise RuntimeError(f"provider said: bad key {PLANTED}")
        except RuntimeError:
            logger.exception("judge failed")
    text_out = caplog.text
    assert "calling with key ***" in text_out and "bad key ***" in text_out
    assert PLANTED not in text_out


def test_status_errors_that_echo_the_key_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    import openai

    from workers.clients import _status_error

    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    reset_secrets_cache()
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    response = httpx.Response(401, request=request, json={"error": {"message": f"Incorrect API key {PLANTED}"}})
    error = _status_error(
        openai.AuthenticationError(
            f"Incorrect API key {PLANTED}",
            response=response,  # type: ignore[arg-type]  # the SDK is typed against httpx2
            body=None,
        ),
        "openai",
    )
    assert PLANTED not in str(error) and "***" in str(error) and not error.retryable


# -- live: API + worker processes, a provider that echoes the key ---------------------------------------------


class EchoProvider(ThreadingHTTPServer):
    """An OpenAI-style endpoint that fails every call and puts the caller's bearer token in the error message."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen_tokens: list[str] = []
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _EchoHandler(BaseHTTPRequestHandler):
    server: EchoProvider

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        self.server.seen_tokens.append(token)
        status = 500 if "500" in body.get("model", "") else 401
        payload = json.dumps(
            {
                "error": {
                    "message": f"Incorrect API key provided: {token}. Check {token}.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _dump_database(database_url: str) -> str:
    engine = create_engine(database_url)
    parts: list[str] = []
    with engine.connect() as connection:
        for table in ("runs", "items", "judgments", "judge_cache", "human_ratings", "api_keys", "projects"):
            parts.extend(str(tuple(row)) for row in connection.execute(text(f"SELECT * FROM {table}")))
    engine.dispose()
    return "\n".join(parts)


@pytest.mark.e2e
def test_planted_provider_keys_never_leak(sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim) -> None:
    from dialogue_judge.testing import LiveService

    echo = EchoProvider()
    key_file = tmp_path / "compatible.key"
    key_file.write_text(PLANTED_FILE_KEY + "\n")
    judges = [
        "openai:gpt-4o",  # OPENAI_BASE_URL -> echo: 401 with the key in the message, not retried
        f"openai-compatible:echo500@{echo.base_url}",  # 500 with the key, retried, logged, then failed
        f"openai-compatible:sim-judge@{sim.base_url}",  # a working judge, so the report has numbers
    ]
    env = {
        "OPENAI_API_KEY": PLANTED,
        "OPENAI_BASE_URL": echo.base_url,
        "OPENAI_COMPATIBLE_API_KEY_FILE": str(key_file),
        "DJ_MAX_ATTEMPTS": "3",
    }
    service = LiveService(own_redis.url, sqlite_url, tmp_path / "svc", env_overrides=env)
    try:
        service.start_api()
        service.start_worker()
        client = service.client()
        items = [
            {
                "id": f"i{i}",
                "dialogue": [{"speaker": "user", "text": f"Hello {i}"}],
                "candidates": {"a": f"Hi <<q={60 + i}>>", "b": f"Yo <<q={30 + i}>>"},
            }
            for i in range(2)
        ]
        created = client.create_run(
            {"items": items, "rubrics": ["rsum-single"], "judges": judges, "aspects": ["consistency"]}
        )
        summary = service.wait_run(created["id"], timeout_s=90)
        judgments = client.all_judgments(created["id"])
        responses = [
            json.dumps(summary),
            json.dumps(judgments),
            json.dumps(client.report(created["id"], n_boot=50)),
            json.dumps(client.get(f"/v1/runs/{created['id']}/items")),
            str(client.get(f"/v1/runs/{created['id']}/judgments.csv")),
            json.dumps(client.get("/v1/runs")),
        ]
    finally:
        service.stop()
        echo.shutdown()
    # the keys did reach the provider (so the test is meaningful) ...
    assert PLANTED in echo.seen_tokens and PLANTED_FILE_KEY in echo.seen_tokens
    by_judge: dict[str, list[dict]] = {}
    for judgment in judgments:
        by_judge.setdefault(judgment["judge"].split("@")[0], []).append(judgment)
    assert {j["status"] for j in by_judge["openai:gpt-4o"]} == {"failed"}
    assert all("request_rejected HTTP 401" in j["error"] and "***" in j["error"] for j in by_judge["openai:gpt-4o"])
    echo500 = by_judge["openai-compatible:echo500"]
    assert all(j["status"] == "failed" and "after 3 attempts" in j["error"] and "***" in j["error"] for j in echo500)
    assert {j["status"] for j in by_judge["openai-compatible:sim-judge"]} == {"done"}
    # ... and went nowhere else: not the database, not an API response, not a log line
    assert PLANTED not in _dump_database(sqlite_url) and PLANTED_FILE_KEY not in _dump_database(sqlite_url)
    for response in responses:
        assert PLANTED not in response and PLANTED_FILE_KEY not in response
    logs = {p.name: p.read_text(errors="replace") for p in (tmp_path / "svc").glob("*.log")}
    assert {"api.log", "worker1.log"} <= set(logs)
    assert "retry" in logs["worker1.log"]  # the retried 500s were logged (scrubbed)
    for name, content in logs.items():
        assert PLANTED not in content, name
        assert PLANTED_FILE_KEY not in content, name
        assert "PLANTED" not in content, name
