"""Review r60a (hostile): commit 8c196d2's API client TLS context and the dashboard's process options.

Tests named ``test_BUG_*`` fail on 8c196d2 and reproduce a finding; ``test_HOLDS_*`` pin a promise the review could
not break."""

from __future__ import annotations

import itertools
import re
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest

from dialogue_judge import client as client_module
from dialogue_judge.client import ApiClient, tls_context
from dialogue_judge.stack import DASHBOARD_OPTIONS, REPO_ROOT, dashboard_command, free_port

PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", re.S)


def _context_of(api: ApiClient) -> ssl.SSLContext:
    pool: Any = getattr(api._http._transport, "_pool")  # noqa: B009 (httpx's connection pool, no public reader)
    context: ssl.SSLContext = pool._ssl_context
    return context


def _authorities(context: ssl.SSLContext) -> set[str]:
    """The subjects of the certificate authorities a context trusts."""
    return {repr(cert["subject"]) for cert in context.get_ca_certs()}


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has built no context yet (and no certificate variable set)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    client_module.forget_tls_context()
    yield
    client_module.forget_tls_context()


# -- promise 2: verification semantics are exactly httpx's default -----------------------------------------------


def test_FIXED_a_certificate_bundle_rewritten_in_place_is_honoured(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """FINDING (promise 2: "verification semantics are exactly httpx's default; SSL_CERT_FILE honoured"), medium.

    Reproduction: SSL_CERT_FILE names a bundle holding authority X; an ApiClient is made (the context is built and
    cached under the *path*). The operator rewrites the bundle in place (a CA rotation, or X distrusted and removed:
    update-ca-certificates / a mounted secret do exactly this) so it now holds authority Y only. Every ApiClient made
    afterwards by this process (the dashboard makes one per read) still trusts X and not Y; httpx's default
    (``verify=True``) reads the file for each client and would trust Y and not X. So a removed CA stays trusted and
    the new one is refused until the dashboard/CLI process restarts.

    Root cause: ``_tls_context`` is cached by the variables' *values* (the paths), not by what the files hold.
    Fix: key the cache on the bundle's identity too (e.g. ``os.stat`` mtime_ns/size/inode of SSL_CERT_FILE, or of
    certifi's bundle), or build per client when SSL_CERT_FILE/SSL_CERT_DIR is set and cache only certifi's."""
    authorities = PEM.findall(Path(certifi.where()).read_text())
    bundle = tmp_path / "ca.pem"
    bundle.write_text(authorities[0])
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    before = ApiClient("https://api.example")
    bundle.write_text(authorities[1])  # rotated in place: same path, another authority
    after = ApiClient("https://api.example")
    try:
        expected = _authorities(httpx.create_ssl_context())  # what httpx's default builds for a client made now
        assert len(expected) == 1 and expected != _authorities(_context_of(before))
        assert _authorities(_context_of(after)) == expected, "the rewritten bundle is ignored: the old CA is trusted"
    finally:
        before.close()
        after.close()


def test_FIXED_concurrent_first_clients_share_one_context(fresh_cache: None) -> None:
    """FINDING (promise 2: "one ssl.SSLContext per process ... safe across threads"), low.

    Reproduction: eight threads make their first ApiClient at once (the dashboard's first page draw: several
    sessions' scripts, each a thread, open at once after a restart). ``functools.cache`` does not hold callers
    while it builds, so each thread reads the CA bundle itself (~40 ms of CPU each, what the change set out to
    save) and the clients hold 8 different contexts, not one. Verification stays right (each is httpx's default),
    so only the cost and the "one per process" promise break.

    Fix: build under a lock (double-checked), e.g. a ``threading.Lock`` around the cached builder."""
    start = threading.Barrier(8)
    built: list[ssl.SSLContext] = []

    def first_client() -> None:
        start.wait()
        api = ApiClient("https://api.example")
        built.append(_context_of(api))
        api.close()

    threads = [threading.Thread(target=first_client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(context) for context in built}) == 1, "more than one context built for one process"


def test_HOLDS_the_context_verifies_like_httpx_default(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shared context requires a certificate and checks the host name, trusts certifi's authorities (as httpx's
    default does), and SSL_CERT_DIR set after the first client gives clients made afterwards that directory's store."""
    api = ApiClient("https://api.example")
    try:
        context = _context_of(api)
        default = httpx.create_ssl_context()
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.minimum_version == default.minimum_version and context.options == default.options
        assert _authorities(context) == _authorities(default)
    finally:
        api.close()
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # an empty folder of authorities
    later = ApiClient("https://api.example")
    try:
        assert _context_of(later) is not context and _context_of(later) is tls_context()
        assert _context_of(later).cert_store_stats()["x509_ca"] == 0  # a capath store: loaded on demand, not certifi
    finally:
        later.close()


def test_HOLDS_a_test_transport_still_answers(fresh_cache: None) -> None:
    """``transport=`` is still the client's transport (the context is not used for it)."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"status": "ok"})

    api = ApiClient("https://api.example", transport=httpx.MockTransport(answer))
    try:
        assert api._http.get("/healthz").json() == {"status": "ok"}
        assert seen == ["https://api.example/healthz"]
    finally:
        api.close()


# -- promise 5: the dashboard's process options ------------------------------------------------------------------


def test_HOLDS_the_dashboard_command_keeps_ups_address_port_and_headless() -> None:
    """``dashboard_command`` runs this checkout's dashboard/app.py on the given port and address, headless, without
    usage statistics, and every option is one Streamlit knows with a value it accepts."""
    from streamlit import config

    port = free_port()
    command = dashboard_command(port)
    assert command[1:4] == ["-m", "streamlit", "run"] and Path(command[4]) == REPO_ROOT / "dashboard" / "app.py"
    assert Path(command[4]).is_file()
    given = dict(itertools.pairwise(command[5:]))
    assert given["--server.port"] == str(port) and given["--server.address"] == "127.0.0.1"
    assert given["--server.headless"] == "true" and given["--browser.gatherUsageStats"] == "false"
    assert dashboard_command(port, "0.0.0.0")[command.index("--server.address") + 1] == "0.0.0.0"
    options = config.get_config_options()
    for option in DASHBOARD_OPTIONS[::2]:
        assert option.removeprefix("--") in options, option
    assert "none" in (options["server.fileWatcherType"].description or "")


def test_HOLDS_a_missing_certificate_file_fails_like_httpx(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SSL_CERT_FILE naming no file: making a client fails as httpx's default does, every time (a failure is not
    cached), and works once the file is there."""
    missing = tmp_path / "missing.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(FileNotFoundError):
        httpx.Client()
    for _ in range(2):
        with pytest.raises(FileNotFoundError):
            ApiClient("https://api.example")
    missing.write_bytes(Path(certifi.where()).read_bytes())
    api = ApiClient("https://api.example")
    try:
        assert _authorities(_context_of(api)) == _authorities(httpx.create_ssl_context())
    finally:
        api.close()
