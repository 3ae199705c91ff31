"""Issue 27.5: every dashboard page opens from its own URL with the run of ``?run=`` selected, in Chromium. Before,
``/runs`` (the Runs page's own url_path) showed Streamlit's "Page not found" and fell back to the main page: the
default page is served at ``/`` whatever its url_path."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS, dashboard  # noqa: F401 - the fixture

from dialogue_judge.testing import LiveService

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
# every page's URL -> its title; "" is the root, the default page's URL: Streamlit serves the default page at "/"
# and answers its url_path ("home") with "Page not found", so "/runs" is the Runs page's hidden twin
URLS = {
    "": "Runs",
    "runs": "Runs",
    "leaderboard": "Leaderboard",
    "wins": "Win / tie / loss",
    "agreement": "Human agreement",
    "calibrated": "Calibrated",
    "bias": "Bias",
    "explorer": "Item explorer",
    "disagreements": "Disagreements",
    "contradictions": "Contradictions",
    "memory-audit": "Memory audit",
    "annotate": "Annotate",
    "compare": "Compare runs",
    "monitors": "Monitors",
}


# the sidebar's text and its widgets' values (the run picker's is an input)
SIDEBAR_JS = (
    "() => { const el = document.querySelector('[data-testid=stSidebar]'); if (!el) return ''; "
    "return el.innerText + ' ' + Array.from(el.querySelectorAll('input')).map(i => i.value).join(' '); }"
)


def declared_urls() -> set[str]:
    """The URL every st.Page of dashboard/app.py is served at: its url_path, "" for the default page."""
    urls = set()
    for node in ast.walk(ast.parse((REPO / "dashboard" / "app.py").read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Page":
            keywords = {k.arg: k.value for k in node.keywords}
            url_path, default = keywords.get("url_path"), keywords.get("default")
            assert isinstance(url_path, ast.Constant), f"st.Page at line {node.lineno} declares no url_path"
            is_default = isinstance(default, ast.Constant) and default.value is True
            urls.add("" if is_default else str(url_path.value))
    return urls


def test_every_declared_page_url_is_opened_by_the_browser_test() -> None:
    """A new page (or a renamed URL) must join URLS, so the Chromium test below opens it."""
    declared = declared_urls()
    assert len(declared) >= 12 and "" in declared
    assert declared == set(URLS), (declared - set(URLS), set(URLS) - declared)


def two_runs(client: Any) -> tuple[str, str]:
    """Two runs (no worker: their judgments stay pending), so the link must pick the older one, not the newest."""
    ids = []
    for name in ("older", "newer"):
        ids.append(
            client.create_run(
                {
                    "name": name,
                    "items": [{"id": "i0", "dialogue": [{"speaker": "user", "text": "hi"}], "candidates": {"a": "x"}}],
                    "rubrics": ["rsum-single"],
                    "judges": ["openai-compatible:nobody@http://127.0.0.1:9/v1"],
                    "aspects": ["coherence"],
                    "metrics": [],
                }
            )["id"]
        )
    return ids[0], ids[1]


@contextlib.contextmanager
def two_runs_in_chromium(
    sqlite_url: str, redis_url: str, tmp_path: Path, start_dashboard: Any
) -> Iterator[tuple[Any, str, str]]:
    """A live API with two runs, the dashboard on it and a Chromium page: (page, dashboard url, the older run)."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    service = LiveService(redis_url, sqlite_url, tmp_path / "svc")
    service.start_api()
    try:
        older, _newer = two_runs(service.client())
        url = start_dashboard(service.api_url)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield browser.new_page(viewport={"width": 1400, "height": 900}), url, older
            finally:
                browser.close()
    finally:
        service.stop()


def test_every_page_opens_from_its_url_with_the_run_selected(
    sqlite_url: str,
    redis_url: str,
    tmp_path: Path,
    dashboard: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with two_runs_in_chromium(sqlite_url, redis_url, tmp_path, dashboard) as (page, url, older):
        for path, title in URLS.items():
            page.goto(f"{url}/{path}?run={older}")
            page.get_by_role("heading", name=title, level=1).wait_for(timeout=60_000)
            page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=60_000)
            page.wait_for_timeout(500)
            body = page.inner_text("body")
            assert "Page not found" not in body, (path, body[:500])
            expected = f"older · {older}"
            with contextlib.suppress(PlaywrightTimeout):  # the run picker fills in after the page's first draw
                page.wait_for_function(f"() => ({SIDEBAR_JS})().includes({expected!r})", timeout=30_000)
            sidebar = page.evaluate(SIDEBAR_JS)
            assert expected in sidebar, (path, sidebar[:500])  # the linked run, not the newest
            assert f"run={older}" in page.url, (path, page.url)  # the link stays shareable
            assert page.url.rstrip("/").split("?")[0].endswith(f"/{path}".rstrip("/")), (path, page.url)


def test_a_disagreements_tab_opens_from_its_link_and_only_it_runs(
    sqlite_url: str,
    redis_url: str,
    tmp_path: Path,
    dashboard: Any,  # noqa: F811
) -> None:
    """The Disagreements page runs only its open tab (issue 39: the other two read the API for nothing); the open tab
    is in the URL (``dis_tab``), so a link opens it, and a click on another tab moves the link."""
    with two_runs_in_chromium(sqlite_url, redis_url, tmp_path, dashboard) as (page, url, older):
        page.goto(f"{url}/disagreements?run={older}&dis_tab=Unparseable+%2F+failed")
        page.get_by_role("heading", name="Disagreements", level=1).wait_for(timeout=60_000)
        page.get_by_text("Unparseable: 0").wait_for(timeout=60_000)
        selected = page.get_by_role("tab", selected=True)
        assert selected.inner_text().strip() == "Unparseable / failed"
        assert "No human ratings yet" not in page.inner_text("[data-testid=stMain]")  # the first tab did not run
        page.get_by_role("tab", name="Judge vs human").click()
        page.get_by_text("No human ratings yet").wait_for(timeout=60_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=60_000)
        assert "Unparseable: 0" not in page.inner_text("[data-testid=stMain]")
        assert f"run={older}" in page.url and "dis_tab=Judge" in page.url, page.url  # the click wrote the link
