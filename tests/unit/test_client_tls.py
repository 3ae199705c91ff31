"""The API client's certificate store is built once per process (issue 39: ~40 ms of every dashboard read)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import pytest

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


def test_a_certificate_file_set_later_is_read_and_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """SSL_CERT_FILE set after the first client: the next clients share that file's context, and a bundle rewritten
    in place is read again (review r60a); once the variable is as before, the first context again."""
    default = tls_context()
    bundle = tmp_path / "ca.pem"
    authorities = Path(certifi.where()).read_text()
    bundle.write_text(authorities)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    custom = tls_context()
    assert custom is not default and tls_context() is custom
    assert custom.cert_store_stats()["x509_ca"] == len(custom.get_ca_certs()) > 0
    bundle.write_text(authorities.split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n")
    rotated = tls_context()
    assert rotated is not custom and rotated.cert_store_stats()["x509_ca"] == 1
    monkeypatch.undo()
    assert tls_context() is not rotated
