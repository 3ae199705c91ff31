"""The dashboard in a real browser: headless Debian Chromium driven by Playwright, against the dashboard started
with ``streamlit run dashboard/app.py`` on the real stack (API + Celery worker + Redis + SQLite + the loopback
judge simulator) with finished runs.  Every page loads and shows its chart; one annotation round-trips to the
database.  Screenshots go to ``test-artifacts/dashboard/<page>.png``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from dialogue_judge.stack import dashboard_command, free_port
from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
QUALITY = {"rsum": [85, 78, 90, 70, 88, 82], "memgpt": [60, 72, 55, 65, 58, 75], "vanilla": [40, 35, 52, 45, 30, 48]}
RATER = "browser_rater"
# page url path -> (title, selector that must appear: its chart, or its form)
PAGES = {
    "": ("Runs", ".vega-embed"),
    "leaderboard": ("Leaderboard", ".vega-embed"),
    "wins": ("Win / tie / loss", ".vega-embed"),
    "agreement": ("Human agreement", ".vega-embed"),
    "bias": ("Bias", ".vega-embed"),
    "explorer": ("Item explorer", ".vega-embed"),
    "disagreements": ("Disagreements", ".vega-embed"),
    "compare": ("Compare runs", ".vega-embed"),
    "monitors": ("Monitors", ".vega-embed"),  # the series with its interval bands
    "contradictions": ("Contradictions", "[data-testid=stAlertContentInfo]"),  # no fact-check here: the empty state
    "memory-audit": ("Memory audit", "[data-testid=stAlertContentInfo]"),
}


def make_items(shift: dict[str, int] | None = None) -> list[dict[str, Any]]:
    shift = shift or {}
    return [
        {
            "id": f"msc-{i}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago.", "session": 1},
                {"speaker": "bot", "text": "How lovely! What breed is he?", "session": 1},
                {"speaker": "user", "text": "A beagle. Do you remember my dog's name?", "session": 2},
            ],
            "persona": {"user": ["I have a beagle called Rex."], "bot": ["I like animals."]},
            "memory": "The user has a beagle called Rex.",
            "candidates": {
                s: f"{s} says: of course, Rex the beagle! <<q={q[i] + shift.get(s, 0)}>>" for s, q in QUALITY.items()
            },
        }
        for i in range(6)
    ]


def human_ratings() -> list[dict[str, Any]]:
    scores = [
        {
            "item_id": f"msc-{i}",
            "system": s,
            "aspect": "consistency",
            "rater": "expert_1",
            "value": min(100, q[i] + (30 if i == 2 else 4)),
            "scale_min": 1,
            "scale_max": 100,
        }
        for s, q in QUALITY.items()
        for i in range(6)
    ]
    votes = [
        {
            "item_id": f"msc-{i}",
            "system": "rsum",
            "system_b": "vanilla",
            "aspect": "overall",
            "rater": "expert_1",
            "kind": "preference",
            "value": -1 if i == 0 else 1,
        }
        for i in range(6)
    ]
    return scores + votes


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Any]:
    """``start(api_url)`` launches ``streamlit run dashboard/app.py`` on a free port and returns its URL."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(api_url: str) -> str:
        port = free_port()
        env = dict(os.environ, DJ_API_URL=api_url, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        log = (tmp_path / "streamlit.log").open("wb")
        process = subprocess.Popen(
            dashboard_command(port),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"streamlit exited: {(tmp_path / 'streamlit.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=1).text == "ok":
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail("streamlit did not start")

    yield start
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


def settle(page: Any, title: str, selector: str) -> None:
    """Wait for the page's title and its chart (or form), then for Streamlit to finish running."""
    page.get_by_role("heading", name=title, level=1).wait_for(timeout=60_000)
    page.locator(selector).first.wait_for(state="visible", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=60_000)
    page.wait_for_timeout(1500)  # charts finish their layout / animation


def check_and_shoot(page: Any, name: str) -> None:
    exceptions = page.locator("[data-testid=stException]").all_inner_texts()
    errors = page.locator("[data-testid=stAlertContentError]").all_inner_texts()
    assert not exceptions and not errors, (name, exceptions, errors)
    height = page.evaluate("() => (document.querySelector('[data-testid=stMain]') || document.body).scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(max(int(height) + 40, 900), 8000)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    page.set_viewport_size({"width": 1400, "height": 900})


def test_every_page_in_chromium_and_an_annotation_round_trip(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess, dashboard: Any
) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim@{judge_simulator.base_url}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        url = dashboard(service.api_url)  # starts while the runs are judged
        client = service.client()
        baseline = client.create_run(
            {
                "name": "baseline",
                "items": make_items({"memgpt": 10}),
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "mode": ["single"],
            }
        )
        run = client.create_run(
            {
                "name": "msc-demo",
                "items": make_items(),
                "rubrics": ["rsum-single", "rsum-pairwise"],
                "judges": [judge],
                "mode": ["single", "pairwise"],
            }
        )
        monitor = client.create_monitor(
            {"name": "prod-bot", "rubrics": ["rsum-single"], "judges": [judge], "aspects": ["consistency"],
             "sample_rate": 1.0}
        )  # fmt: skip
        client.post(
            f"/v1/monitors/{monitor['id']}/responses",
            [{"id": f"live-{i}", "dialogue": make_items()[0]["dialogue"], "response": f"Rex! <<q={50 + i * 5}>>",
              "system": "bot", "version": f"v{1 + i % 2}", "timestamp": f"2026-11-20T{9 + i % 3:02d}:00:00Z"}
             for i in range(9)],
        )  # fmt: skip
        service.wait_run(baseline["id"], timeout_s=180)
        summary = service.wait_run(run["id"], timeout_s=180)
        deadline = time.monotonic() + 120
        while client.monitor_info(monitor["id"])["status"]["pending_judgments"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert summary["counts"]["done"] == 6 * 3 * 3 + 6 * 3 * 2
        client.post(f"/v1/runs/{run['id']}/human-ratings", {"ratings": human_ratings()})

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            dashboard_host = urlsplit(url).netloc
            outside: list[str] = []  # every page, not only Monitors: a self-hosted service fetches nothing elsewhere
            page.on(
                "request",
                lambda r: (
                    outside.append(r.url)
                    if urlsplit(r.url).scheme in ("http", "https", "ws", "wss")
                    and urlsplit(r.url).netloc != dashboard_host
                    else None
                ),
            )
            for path, (title, selector) in PAGES.items():
                page.goto(f"{url}/{path}?run={run['id']}")
                settle(page, title, selector)
                check_and_shoot(page, path or "runs")

            page.goto(f"{url}/annotate?run={run['id']}")
            page.get_by_role("heading", name="Annotate", level=1).wait_for(timeout=60_000)
            rater = page.get_by_label("Rater id")
            rater.fill(RATER)
            rater.press("Enter")
            settle(page, "Annotate", "[data-testid=stSlider]")
            page.get_by_role("button", name="Save ratings").click()
            page.get_by_text(f"as {RATER}").wait_for(timeout=60_000)
            settle(page, "Annotate", "[data-testid=stMetric]")
            check_and_shoot(page, "annotate")
            browser.close()
        assert outside == [], outside

        stored = client.get(f"/v1/runs/{run['id']}/human-ratings")["items"]
        mine = [r for r in stored if r["rater"] == RATER]
        assert {r["system"] for r in mine} == set(QUALITY)
        assert {(r["item_id"], r["aspect"], r["kind"]) for r in mine} == {("msc-0", "engagingness", "score")}
        assert all(1 <= r["value"] <= 100 for r in mine)
