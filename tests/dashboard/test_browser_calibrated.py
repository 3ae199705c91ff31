"""The Calibrated page in real Chromium (issue 37), on the real stack as in ``test_browser.py``: the three intervals
per system in one chart, the label-next list, and a label saved on Annotate (opened from the list's link,
``?item=``) changes the page's figures. Screenshot: ``test-artifacts/dashboard/calibrated.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, check_and_shoot, dashboard, settle  # noqa: F401

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

N_ITEMS, N_RATED = 12, 10
PEOPLE = {
    "v1": [40, 35, 52, 45, 30, 48, 41, 38, 50, 44, 36, 47],
    "v2": [70, 78, 66, 72, 80, 75, 69, 74, 77, 71, 68, 79],
}
OVERRATED = {"v1": 40, "v2": 0}  # the judge puts v1 above v2; the people do not
LEGEND = """() => [...document.querySelectorAll('.vega-embed svg text')].map(t => t.textContent)"""


def items() -> list[dict[str, Any]]:
    return [
        {
            "id": f"it{i}",
            "dialogue": [{"speaker": "user", "text": f"Do you remember my dog Rex? ({i})"}],
            "candidates": {s: f"{s}: Rex, of course. <<q={min(100, q[i] + OVERRATED[s])}>>" for s, q in PEOPLE.items()},
        }
        for i in range(N_ITEMS)
    ]


def test_three_intervals_label_next_and_a_label_from_annotate(
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
    judge = f"openai-compatible:sim@{judge_simulator.base_url}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        url = dashboard(service.api_url)
        client = service.client()
        run = client.create_run(
            {"name": "calibrated", "items": items(), "rubrics": ["rsum-single"], "judges": [judge],
             "aspects": ["engagingness"], "mode": ["single"]}
        )  # fmt: skip
        service.wait_run(run["id"], timeout_s=180)
        ratings = [
            {"item_id": f"it{i}", "system": s, "aspect": "engagingness", "rater": "expert_1", "value": q[i],
             "scale_min": 1, "scale_max": 100}
            for s, q in PEOPLE.items() for i in range(N_RATED)
        ]  # fmt: skip
        client.post(f"/v1/runs/{run['id']}/human-ratings", {"ratings": ratings})
        queue = client.post(f"/v1/runs/{run['id']}/label-queue", {"n": N_ITEMS, "strategy": "uniform", "seed": 2})
        unlabeled = [i["item_id"] for i in queue["items"] if not i["labeled"]]
        assert len(unlabeled) == N_ITEMS - N_RATED

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/calibrated?run={run['id']}")
            settle(page, "Calibrated", ".vega-embed")
            legend = page.evaluate(LEGEND)
            for name in ("judge only (mapped to the human scale)", "human only", "calibrated (PPI++)"):
                assert name in legend, " | ".join(legend)
            assert page.get_by_text(f"{N_RATED} of {N_ITEMS} drawn items labeled").count() == 1
            assert page.get_by_text(f"{2 * N_RATED} labels from the label queue").count() == 1
            assert page.get_by_text("The judge puts").count() == 1
            check_and_shoot(page, "calibrated")

            page.goto(f"{url}/annotate?run={run['id']}&item={unlabeled[0]}")  # the label-next link
            page.get_by_role("heading", name="Annotate", level=1).wait_for(timeout=60_000)
            rater = page.get_by_label("Rater id")
            rater.fill("expert_1")
            rater.press("Enter")
            settle(page, "Annotate", "[data-testid=stSlider]")
            page.get_by_role("button", name="Save ratings").click()
            page.get_by_text(f"for item {unlabeled[0]} as expert_1").wait_for(timeout=60_000)

            page.goto(f"{url}/calibrated?run={run['id']}")
            settle(page, "Calibrated", ".vega-embed")
            page.get_by_text(f"{N_RATED + 1} of {N_ITEMS} drawn items labeled").wait_for(timeout=30_000)
            assert page.get_by_text(f"{2 * N_RATED + 2} labels from the label queue").count() == 1
            browser.close()

        stored = client.get(f"/v1/runs/{run['id']}/human-ratings")["items"]
        assert {r["item_id"] for r in stored} == {f"it{i}" for i in range(N_RATED)} | {unlabeled[0]}
