"""The dashboard never hands a key to a URL a visitor typed (issue 42, finding 8): the API's URL is configuration
only (DJ_API_URL), and with auth on and no DJ_API_KEY a visitor signs in with their own key, which goes to that URL
only. Real HTTP to loopback listeners, the app under Streamlit's AppTest."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"
DASHBOARD_KEY = "dj_dashboard_secret_key_0123456789"
VISITOR_KEY = "dj_visitor_own_key_9876543210"
EMPTY_PAGE = {"total": 0, "offset": 0, "limit": 100, "items": []}


@dataclass
class Listener:
    """A loopback HTTP server that records each request's Authorization header; ``required`` (if set) is the only
    Authorization it answers 200 to (401 otherwise)."""

    required: str | None = None
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization")
                listener.seen.append((self.path, auth))
                ok = listener.required is None or auth == listener.required
                body = json.dumps(EMPTY_PAGE if ok else {"detail": "missing or invalid API key"}).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def listeners() -> Iterator[tuple[Listener, Listener]]:
    """(the configured API, the URL a visitor would type)."""
    configured, typed = Listener(), Listener()
    configured.start()
    typed.start()
    yield configured, typed
    configured.stop()
    typed.stop()


def test_the_configured_key_never_goes_to_a_typed_url(
    listeners: tuple[Listener, Listener], monkeypatch: pytest.MonkeyPatch
) -> None:
    configured, typed = listeners
    monkeypatch.setenv("DJ_API_URL", configured.url)
    monkeypatch.setenv("DJ_API_KEY", DASHBOARD_KEY)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert ("/v1/runs?offset=0&limit=100", f"Bearer {DASHBOARD_KEY}") in configured.seen
    # a visitor tries every way to point the dashboard elsewhere: the sidebar field (gone), the session state
    for widget in at.text_input:
        if widget.key == "api_url" or "URL" in str(widget.label):
            widget.input(typed.url)
    at.run()
    at.session_state["api_url"] = typed.url
    at.run()
    for page in ("views/leaderboard.py", "views/runs.py"):
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert typed.seen == [], f"the dashboard sent requests to the typed URL: {typed.seen}"
    assert DASHBOARD_KEY not in str(at.text_input and [w.value for w in at.text_input])  # never shown either


def test_with_auth_on_and_no_configured_key_a_visitor_signs_in(
    listeners: tuple[Listener, Listener], monkeypatch: pytest.MonkeyPatch
) -> None:
    configured, typed = listeners
    configured.required = f"Bearer {VISITOR_KEY}"
    monkeypatch.setenv("DJ_API_URL", configured.url)
    monkeypatch.delenv("DJ_API_KEY", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Sign in"]  # no page is shown before signing in
    (field,) = [w for w in at.text_input if w.label == "API key"]
    field.input(VISITOR_KEY)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Sign in" not in [t.value for t in at.title]
    assert at.title[0].value == "Runs"
    assert (
        "/v1/runs?offset=0&limit=100",
        f"Bearer {VISITOR_KEY}",
    ) in configured.seen  # the visitor's key, to the configured URL only
    assert typed.seen == []
