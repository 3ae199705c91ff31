"""Issue 40 in a real browser (headless Debian Chromium + Playwright, the real stack as in ``test_browser.py``):

* a monitor whose buckets hold n = 1, 2 and 30 verdicts per version draws its series on the rubric's scale (1-100,
  not the 160 a t interval of two verdicts reaches), a band for every bucket the API gives an interval for (an
  isolated bucket included: the old area needed a neighbour), a mark and a note where n is too small for one, and the
  version the open alert is about in red and bold;
* the run pickers (sidebar, both on Compare runs) name a failed run's outcome;
* a link to a monitor that does not exist shows a "not found" notice;
* no page asks any host but the dashboard's own (every request the browser made, and every resource the page
  links, the favicon included).

The Monitors page with its open alert is kept as ``test-artifacts/dashboard/monitors-alert.png`` (the docs' copy:
``docs/images/monitors-alert.png``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, dashboard, make_items, settle  # noqa: F401 - the fixture

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

WOBBLE = [-9, 4, -3, 8, 0, -6, 7, -1, 3, -4]
# hours before the reference hour -> verdicts per version (the two-verdict bucket: 20 and 95, whose t interval runs
# far past 1-100); v1.5's newest hour stands alone after an hour of one verdict
BUCKETS: dict[int, dict[str, list[int]]] = {
    4: {"v1.4": [84], "v1.5": [64]},
    3: {"v1.4": [20, 95], "v1.5": [10, 90]},
    1: {"v1.4": [84 + WOBBLE[i % 10] for i in range(30)], "v1.5": [64]},
    0: {"v1.4": [84 + WOBBLE[i % 10] for i in range(30)], "v1.5": [64 + WOBBLE[(i + 3) % 10] for i in range(30)]},
}
WITH_INTERVAL = sum(len(scores) >= 2 for hour in BUCKETS.values() for scores in hour.values())


def monitor_responses(reference: datetime) -> list[dict[str, Any]]:
    hour = reference.replace(minute=0, second=0, microsecond=0)
    out = []
    for back, versions in BUCKETS.items():
        for version, scores in versions.items():
            for k, score in enumerate(scores):
                out.append(
                    {"id": f"r-{back}-{version}-{k}", "dialogue": make_items()[0]["dialogue"],
                     "response": f"Rex is {k}! <<q={score}>>", "system": "bot", "version": version,
                     "timestamp": (hour - timedelta(hours=back) + timedelta(seconds=k)).isoformat()}
                )  # fmt: skip
    return out


def monitor_body(judge: str) -> dict[str, Any]:
    return {
        "name": "prod-bot",
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "aspects": ["consistency"],
        "sample_rate": 1.0,
        "alerts": [
            {
                "name": "v-regression",
                "compare": {"by": "version", "baseline": "v1.4", "candidate": "v1.5"},
                "aspect": "consistency",
                "confidence": 0.95,
            }
        ],
    }


def wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


CHART_FACTS = """() => {
  const svg = document.querySelector('.vega-embed svg');
  const rect = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; };
  const yAxis = [...svg.querySelectorAll('g[aria-label]')].find(g => g.getAttribute('aria-label').startsWith('Y-axis'));
  return {
    yAxis: yAxis ? yAxis.getAttribute('aria-label') : null,
    plot: rect(svg.querySelector('path.background')),
    bands: [...svg.querySelectorAll('.role-mark.mark-rule line')].map(rect),
    lines: [...svg.querySelectorAll('.role-mark.mark-line path')].map(
      p => [p.getAttribute('stroke'), p.getAttribute('stroke-width')]),
  };
}"""

LINKED = """() => [...document.querySelectorAll('link[href], script[src], img[src], iframe[src]')]
  .map(e => e.href || e.src)"""


def test_monitor_bands_pickers_a_bad_link_and_no_outside_request(
    sqlite_url: str,
    redis_url: str,
    tmp_path: Path,
    judge_simulator: SimulatorProcess,
    dashboard: Any,  # noqa: F811
) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"faults": [{"kind": "malformed", "probability": 1.0, "model": "^broken$"}]})
    judge = f"openai-compatible:sim@{judge_simulator.base_url}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        url = dashboard(service.api_url)
        client = service.client()
        body = {"items": make_items(), "rubrics": ["rsum-single"], "aspects": ["consistency"], "mode": ["single"]}
        healthy = client.create_run({**body, "name": "healthy", "judges": [judge]})
        broken = client.create_run(
            {**body, "name": "broken", "judges": [f"openai-compatible:broken@{judge_simulator.base_url}"]}
        )
        monitor = client.create_monitor(monitor_body(judge))
        responses = monitor_responses(datetime.now(UTC) - timedelta(minutes=10))
        client.post(f"/v1/monitors/{monitor['id']}/responses", responses)
        service.wait_run(healthy["id"], timeout_s=180)
        assert service.wait_run(broken["id"], timeout_s=180)["outcome"] == "failed"
        wait(lambda: client.run(monitor["run_id"])["counts"]["done"] == len(responses), 180, "the monitor's verdicts")
        alerts_url = f"{service.api_url}/v1/monitors/{monitor['id']}/alerts"
        wait(lambda: any(a["status"] == "open" for a in httpx.get(alerts_url).json()["items"]), 60, "the alert")

        dashboard_host = urlsplit(url).netloc
        outside: list[str] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on(
                "request",
                lambda r: (
                    outside.append(r.url)
                    if urlsplit(r.url).scheme in ("http", "https", "ws", "wss")
                    and urlsplit(r.url).netloc != dashboard_host
                    else None
                ),
            )

            page.goto(f"{url}/monitors?monitor={monitor['id']}&run={healthy['id']}")
            settle(page, "Monitors", ".vega-embed")
            page.get_by_text("Open since").first.wait_for(timeout=60_000)  # the open alert's banner
            facts = page.evaluate(CHART_FACTS)
            assert facts["yAxis"] and "values from 1 to 100" in facts["yAxis"], facts["yAxis"]
            assert len(facts["bands"]) == WITH_INTERVAL, facts  # every bucket with an interval, isolated ones too
            top, bottom = facts["plot"]
            assert all(top - 1 <= low <= high <= bottom + 1 for low, high in facts["bands"]), facts
            assert ["#d62728", "4"] in facts["lines"], facts["lines"]  # v1.5, the alert's version, red and bold
            assert page.get_by_text("n too small for an interval").count() >= 1  # said where it is
            page.set_viewport_size({"width": 1400, "height": 1500})
            page.wait_for_timeout(800)
            page.screenshot(path=str(ARTIFACTS / "monitors-alert.png"))
            page.set_viewport_size({"width": 1400, "height": 900})
            linked = [u for u in page.evaluate(LINKED) if urlsplit(u).scheme in ("http", "https")]
            assert all(urlsplit(u).netloc == dashboard_host for u in linked), linked  # the favicon included

            page.goto(f"{url}/monitors?monitor=mon_bogus")
            page.get_by_role("heading", name="Monitors", level=1).wait_for(timeout=60_000)
            notice = page.locator("[data-testid=stAlertContentError]").filter(has_text="mon_bogus")
            notice.wait_for(timeout=60_000)
            assert "not found" in notice.inner_text()

            page.goto(f"{url}/compare?run={broken['id']}")
            settle(page, "Compare runs", "[data-testid=stMain] [data-testid=stSelectbox]")
            sidebar = page.locator("[data-testid=stSidebar] [data-testid=stSelectbox] input").last.input_value()
            assert broken["id"] in sidebar and "failed" in sidebar, sidebar
            pickers = page.locator("[data-testid=stMain] [data-testid=stSelectbox]")
            candidate = pickers.nth(0).locator("input").input_value()
            assert broken["id"] in candidate and "failed" in candidate, candidate
            pickers.nth(1).locator("input").click()  # the baseline's options: the failed run named as failed there too
            option = page.get_by_role("option").filter(has_text=broken["id"])
            option.wait_for(timeout=30_000)
            assert "failed" in option.inner_text()
            page.keyboard.press("Escape")
            linked = [u for u in page.evaluate(LINKED) if urlsplit(u).scheme in ("http", "https")]
            assert all(urlsplit(u).netloc == dashboard_host for u in linked), linked
            browser.close()
        assert outside == [], outside
