"""The API client's certificate store is built once per process (issue 39: ~40 ms of every dashboard read)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import pytest

from dialogue_judge import client as client_module
from dialogue_judge.client import ApiClient, tls_context


def _context_of(api: ApiClient) -> ssl.SSLContext:
    pool: Any = getattr(api._http._transport, "_pool")  # noqa: B009 (httpx's connection pool, no public reader)
    context: ssl.SSLContext = pool._ssl_context
    return context


def test_clients_share_one_context_that_verifies() -> None:
    first, second = ApiClient("https://api.example"), ApiClient("http://127.0.0.1:1")
    try:
        assert _context_of(first) is _context_of(second) is tls_context()
        context = tls_context()
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.cert_store_stats()["x509_ca"] > 0  # a store with authorities, not an empty one
    finally:
        first.close()
        second.close()


def test_a_certificate_file_set_later_gives_its_own_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    default = tls_context()
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    custom = tls_context()
    assert custom is not default and custom is tls_context()
    monkeypatch.undo()
    assert tls_context() is default
    assert client_module._tls_context.cache_info().currsize >= 2
