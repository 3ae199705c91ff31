"""Where one dashboard page's time goes in Chromium: the page's DOM polled every 50 ms from the click (issue 39).

Prints a line each time what is on the page changes: Streamlit's heading, its running indicator, the charts
(``.vega-embed``) and how many are drawn (a canvas or an SVG inside), the tables. The first line is the front end
loaded, the heading's line the sidebar done, the indicator's end the script done, the last line the charts drawn.
A first tab opens the Memory audit page (a page with one alert) so the browser has the front end's files cached, as
``bench_dashboard_scale.py``'s warm-up does; the page is then opened in a new tab.

Usage (a running API and dashboard: ``bench_dashboard_scale.py`` starts them per measurement, this one does not)::

    DATABASE_URL=sqlite:////tmp/dash1m.db DJ_AUTH=false python -m uvicorn judge_api.app:app --port 8791 &
    DJ_API_URL=http://127.0.0.1:8791 python -m streamlit run dashboard/app.py --server.port 8792 \\
        --server.headless true &
    python bench/bench_dashboard_phases.py --url http://127.0.0.1:8792 --run RUN_ID --page agreement
"""

from __future__ import annotations

import argparse
import time

CHROMIUM = "/usr/bin/chromium"
STATE_JS = """() => ({
  heading: !!document.querySelector('h1'),
  running: !!document.querySelector('[data-testid=stStatusWidget]'),
  charts: document.querySelectorAll('.vega-embed').length,
  drawn: document.querySelectorAll('.vega-embed canvas, .vega-embed svg').length,
  tables: document.querySelectorAll('[data-testid=stDataFrame]').length,
})"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the dashboard's URL")
    parser.add_argument("--run", required=True, help="the run's id")
    parser.add_argument("--page", required=True, help="the page's URL path, e.g. agreement")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        warm = browser.new_page()
        warm.goto(f"{args.url}/memory-audit?run={args.run}")
        warm.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        start = time.perf_counter()
        page.goto(f"{args.url}/{args.page}?run={args.run}")
        last: dict[str, int | bool] | None = None
        while time.perf_counter() - start < args.timeout:
            state = page.evaluate(STATE_JS)
            if state != last:
                print(f"{time.perf_counter() - start:6.2f} s  {state}", flush=True)
                last = state
            drawn = state["charts"] and state["drawn"] >= state["charts"]
            if state["heading"] and not state["running"] and (drawn or state["tables"]):
                break
            time.sleep(0.05)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
