"""`dialogue-judge import-ratings` of a spreadsheet's CSV into the real API, then agreement (issue 14, findings 3-5).

* 3: a score's scale is never guessed: a file without scale columns is refused (it became 1-100 silently) unless
  ``--scale-min/--scale-max`` give it; with 1-3 ratings the quadratic kappa and Krippendorff's alpha then equal an
  independent computation on the 1-3 scale (and differ from what the silent 1-100 gave).
* 4: a rating of a system that is not among the item's candidates is a 422 naming the row; nothing is stored.
* 5: Excel's CSV (UTF-8 byte-order mark, extra columns such as a comment and a timestamp) is read; the ignored
  columns are named.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, importing
from dialogue_judge.client import ApiClient
from judge_api.db import session_scope
from judge_api.repository import claims
from judge_simulator.process import SimulatorProcess
from workers.runtime import build_engine

from .conftest import Api, ApiFactory

QUALITY = {"s1": [92, 81, 70, 55, 40, 15], "s2": [12, 35, 48, 66, 77, 95]}
# two raters on 1-3, roughly following the quality (1: poor, 3: good), not always agreeing
HUMAN = {
    "ann": {"s1": [3, 3, 2, 2, 1, 1], "s2": [1, 1, 2, 2, 3, 3]},
    "bob": {"s1": [3, 2, 2, 1, 1, 1], "s2": [1, 2, 2, 3, 2, 3]},
}


@pytest.fixture
def judged_run(api_factory: ApiFactory, sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> tuple[Api, str]:
    """A run of 6 items x 2 systems judged by the simulator (scores = the <<q=..>> markers), and the CLI pointed
    at the in-process API."""
    api = api_factory(auth=False, DJ_JUDGE_URL_ALLOWLIST=sim.base_url)
    sim.reset(restore_script=True)
    body = {
        "items": [
            {
                "id": f"it{i}",
                "dialogue": [{"speaker": "user", "text": "Remember my sister Ann?"}],
                "candidates": {s: f"reply {s} {i} <<q={q[i]}>>" for s, q in QUALITY.items()},
            }
            for i in range(6)
        ],
        "rubrics": ["rsum-single"],
        "judges": [f"openai-compatible:sim@{sim.base_url}"],
        "aspects": ["consistency"],
    }
    run_id = api.submit(None, body)["id"]
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, run_id)
    assert {engine.judge(i) for i in ids} == {"done"}

    def client(api_url: str | None, api_key: str | None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)  # the TestClient (an httpx2.Client) serves the app
        return wrapped

    monkeypatch.setattr(importing, "api_client", client)
    return api, run_id


def excel_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """As Excel saves "CSV UTF-8": a byte-order mark, and the sheet's extra columns."""
    columns = ["timestamp", "item_id", "system", "aspect", "rater", "value", "comment"]
    with path.open("w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({"timestamp": "2026-11-20 10:00", "comment": "ok, fine", **row})
    return path


def human_rows() -> list[dict[str, Any]]:
    return [
        {"item_id": f"it{i}", "system": s, "aspect": "consistency", "rater": rater, "value": values[i]}
        for rater, by_system in HUMAN.items()
        for s, values in by_system.items()
        for i in range(6)
    ]


def stored(api: Api, run_id: str) -> int:
    return int(api.client.get(f"/v1/runs/{run_id}/human-ratings").json()["total"])


def import_ratings(run_id: str, path: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["import-ratings", run_id, str(path), *extra])


def bins(unit: np.ndarray, k: int = 5) -> np.ndarray:
    return np.minimum(np.floor(unit * k), k - 1).astype(int)


def qwk(a: np.ndarray, b: np.ndarray, k: int = 5) -> float:
    """Quadratic-weighted Cohen's kappa, written out from its definition."""
    observed = np.zeros((k, k))
    for x, y in zip(a, b, strict=True):
        observed[x, y] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    weights = np.array([[(i - j) ** 2 for j in range(k)] for i in range(k)], dtype=float)
    return float(1 - (weights * observed).sum() / (weights * expected).sum())


def interval_alpha(units: list[list[float]]) -> float:
    """Krippendorff's interval alpha from its pairable-values definition."""
    units = [u for u in units if len(u) >= 2]
    values = np.array([v for u in units for v in u])
    n = len(values)
    d_o = sum(
        sum((a - b) ** 2 for i, a in enumerate(u) for j, b in enumerate(u) if i != j) / (len(u) - 1) for u in units
    )
    d_e = sum((a - b) ** 2 for i, a in enumerate(values) for j, b in enumerate(values) if i != j) / (n - 1)
    return float(1 - d_o / d_e)


def test_excel_csv_without_a_scale_is_refused_then_imported_with_one(judged_run: tuple[Api, str], tmp_path: Path):
    api, run_id = judged_run
    sheet = excel_csv(tmp_path / "ratings.csv", human_rows())

    refused = import_ratings(run_id, sheet)
    assert refused.exit_code == 2, refused.output
    assert "row 2: no scale: 24 score rating(s) lack scale_min/scale_max (its values range 1..3)" in refused.output
    assert "--scale-min" in refused.output and stored(api, run_id) == 0

    done = import_ratings(run_id, sheet, "--scale-min", "1", "--scale-max", "3")
    assert done.exit_code == 0, done.output
    assert "ignored columns: timestamp, comment" in done.output
    assert "scale 1..3 (--scale-min/--scale-max) for 24 ratings" in done.output
    assert "24 ratings added, 0 updated" in done.output
    ratings = api.client.get(f"/v1/runs/{run_id}/human-ratings").json()["items"]
    assert {(r["scale_min"], r["scale_max"]) for r in ratings} == {(1.0, 3.0)}

    body = api.client.get(f"/v1/runs/{run_id}/agreement").json()["agreement"]
    [scores] = body["scores"]
    [alpha] = body["alpha"]
    judge = np.array([(q - 1) / 99 for s in QUALITY for q in QUALITY[s]])
    mean_human = np.array([np.mean([(HUMAN[r][s][i] - 1) / 2 for r in HUMAN]) for s in QUALITY for i in range(6)])
    assert scores["qwk"] == pytest.approx(qwk(bins(judge), bins(mean_human)), abs=1e-9)
    humans = [[(HUMAN[r][s][i] - 1) / 2 for r in HUMAN] for s in QUALITY for i in range(6)]
    everyone = [[*unit, j] for unit, j in zip(humans, judge, strict=True)]
    assert alpha["alpha_interval_humans"] == pytest.approx(interval_alpha(humans), abs=1e-9)
    assert alpha["alpha_interval_all"] == pytest.approx(interval_alpha(everyone), abs=1e-9)
    # what the silent 1-100 scale gave: every human value in the lowest bin, the agreement lost
    squashed = np.array([np.mean([(HUMAN[r][s][i] - 1) / 99 for r in HUMAN]) for s in QUALITY for i in range(6)])
    assert qwk(bins(judge), bins(squashed)) == pytest.approx(0.0) and scores["qwk"] > 0.5


def test_a_rating_of_a_system_that_is_not_a_candidate_is_refused_naming_the_row(
    judged_run: tuple[Api, str], tmp_path: Path
) -> None:
    api, run_id = judged_run
    rows = [*human_rows()[:5], {**human_rows()[5], "system": "s3"}, *human_rows()[6:8]]
    refused = import_ratings(run_id, excel_csv(tmp_path / "ratings.csv", rows), "--scale-min", "1", "--scale-max", "3")
    assert refused.exit_code == 2, refused.output
    # the sixth rating is the file's row 7 (the header is row 1)
    assert "row 7: system: system 's3' is not a candidate of item 'it5' (its candidates: s1, s2)" in refused.output
    assert stored(api, run_id) == 0
