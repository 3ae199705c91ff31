"""Issue 39: ``GET /v1/runs/{id}/item-scores`` and ``GET /v1/runs/{id}/order-outcomes`` give the dashboard's item-level
frames from a GROUP BY, equal to what the dashboard computed from the whole run's CSV (``/judgments.csv``) before;
pages and filters; bad input is a 422 naming the field; another project's run is a 404."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from dashboard import analysis
from dashboard.api import parse_judgments_csv
from tests.api.conftest import Api, run_body
from tests.api.test_judgment_exports import _judge_half


def _submit(api: Api, n_items: int = 12, key: str | None = None) -> str:
    body = run_body(n_items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    body["aspects"] = ["consistency", "overall"]
    body["options"] = {"samples": 2, "temperature": 0.7}  # two samples per key: the means are over samples
    body["items"] = [{**it, "candidates": {"a": "A: Rex.", "b": "B: Max", "c": "C: ?"}} for it in body["items"]]
    run_id = str(api.submit(key, body)["id"])
    _judge_half(run_id)
    return run_id


def _rate(api: Api, run_id: str) -> None:
    ratings = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "rater": r, "kind": "score",
         "value": float((i * 7 + len(r)) % 10 + 1), "scale_min": 1.0, "scale_max": 10.0}
        for i in (0, 1, 2, 5) for s in ("a", "b") for r in ("ann", "bo")
    ] + [
        {"item_id": f"item-{i}", "system": "a", "system_b": "b", "aspect": "overall", "rater": "ann",
         "kind": "preference", "value": float(i % 3 - 1)}
        for i in (1, 3, 4)
    ]  # fmt: skip
    response = api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings})
    assert response.status_code == 201, response.text


@pytest.fixture
def run(api: Api) -> str:
    run_id = _submit(api)
    _rate(api, run_id)
    return run_id


def _frame(api: Api, run_id: str) -> pd.DataFrame:
    response = api.client.get(f"/v1/runs/{run_id}/judgments.csv")
    assert response.status_code == 200
    return parse_judgments_csv(response.text)


def _all(api: Api, path: str, limit: int = 7, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row of ``path`` read in pages of ``limit``, and the first page."""
    rows: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    offset = 0
    while True:
        response = api.client.get(path, params={"offset": offset, "limit": limit, **params})
        assert response.status_code == 200, response.text
        page = response.json()
        first = first or page
        rows += page["items"]
        offset += limit
        if offset >= page["total"]:
            return rows, first


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    def norm(value: Any) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    return [{k: norm(v) for k, v in row.items()} for row in df.to_dict("records")]


def test_item_scores_equal_the_frames_item_means(api: Api, run: str) -> None:
    old = analysis.judge_item_scores(_frame(api, run))
    assert (old["n_samples"] == 2).any()  # samples were averaged
    rows, first = _all(api, f"/v1/runs/{run}/item-scores")
    assert first["total"] == len(old) > 7
    new = pd.DataFrame(rows, columns=analysis.JUDGE_ITEM_COLUMNS)
    assert _records(new) == _records(old)


def test_rated_item_scores_keep_the_rated_items_and_the_same_scatter(api: Api, run: str) -> None:
    frame = _frame(api, run)
    ratings = pd.DataFrame(api.client.get(f"/v1/runs/{run}/human-ratings").json()["items"])
    humans = analysis.human_item_scores(ratings)
    old = analysis.scatter_frame(analysis.judge_item_scores(frame), humans)
    rows, _ = _all(api, f"/v1/runs/{run}/item-scores", rated="true")
    assert {r["item_id"] for r in rows} <= {"item-0", "item-1", "item-2", "item-5"}
    new = analysis.scatter_frame(pd.DataFrame(rows, columns=analysis.JUDGE_ITEM_COLUMNS), humans)
    assert not old.empty
    assert _records(new) == _records(old)


def test_item_scores_filters(api: Api, run: str) -> None:
    old = analysis.judge_item_scores(_frame(api, run))
    aspect = str(old["aspect"].iloc[-1])
    rows, _ = _all(api, f"/v1/runs/{run}/item-scores", system="b", aspect=aspect)
    want = old[(old["system"] == "b") & (old["aspect"] == aspect)]
    assert len(want) and _records(pd.DataFrame(rows, columns=analysis.JUDGE_ITEM_COLUMNS)) == _records(want)
    one, _ = _all(api, f"/v1/runs/{run}/item-scores", item_id="item-3")
    assert one and {r["item_id"] for r in one} == {"item-3"}


def test_order_outcomes_equal_the_frames_and_the_flip_counts(api: Api, run: str) -> None:
    old = analysis.order_outcomes(_frame(api, run))
    rows, first = _all(api, f"/v1/runs/{run}/order-outcomes")
    assert first["total"] == first["n_keys"] == len(old)
    new = pd.DataFrame(rows, columns=analysis.ORDER_COLUMNS)
    assert _records(new) == _records(old)
    both = old[old["outcome_ab"].notna() & old["outcome_ba"].notna()]
    assert first["n_both"] == len(both) and first["n_flipped"] == int(both["flipped"].sum()) > 0
    flips, page = _all(api, f"/v1/runs/{run}/order-outcomes", limit=2, flipped="true")
    assert page["total"] == first["n_flipped"]
    assert _records(pd.DataFrame(flips, columns=analysis.ORDER_COLUMNS)) == _records(
        old[old["flipped"]].reset_index(drop=True)
    )
    summary = analysis.flip_summary_from_counts(first["by_pair"])
    assert _records(summary) == _records(analysis.flip_summary(old))


def test_rated_order_outcomes_give_the_same_preference_disagreements(api: Api, run: str) -> None:
    frame = _frame(api, run)
    ratings = pd.DataFrame(api.client.get(f"/v1/runs/{run}/human-ratings").json()["items"])
    old = analysis.preference_disagreements(analysis.order_outcomes(frame), ratings)
    rows, _ = _all(api, f"/v1/runs/{run}/order-outcomes", rated="true")
    assert {r["item_id"] for r in rows} <= {"item-1", "item-3", "item-4"}
    new = analysis.preference_disagreements(pd.DataFrame(rows, columns=analysis.ORDER_COLUMNS), ratings)
    assert not old.empty
    assert _records(new) == _records(old)


BAD_INPUT: list[tuple[dict[str, Any], str, str]] = [
    ({"limit": 5001}, "limit", "less than or equal to 5000"),
    ({"limit": 0}, "limit", "greater than or equal to 1"),
    ({"offset": -1}, "offset", "greater than or equal to 0"),
    ({"rated": "maybe"}, "rated", "valid boolean"),
]


@pytest.mark.parametrize("route", ["item-scores", "order-outcomes"])
def test_bad_input_is_a_422_naming_the_field(api: Api, run: str, route: str) -> None:
    for params, name, message in [
        *BAD_INPUT,
        *([({"flipped": "x"}, "flipped", "valid boolean")] * (route != "item-scores")),
    ]:
        response = api.client.get(f"/v1/runs/{run}/{route}", params=params)
        assert response.status_code == 422, (params, response.text)
        detail = response.json()["detail"]
        assert detail[0]["loc"] == ["query", name], params
        assert message in detail[0]["msg"], params
    assert api.client.get(f"/v1/runs/{run}/{route}", params={"limit": 5000}).status_code == 200
    assert api.client.get(f"/v1/runs/no-such-run/{route}").status_code == 404


@pytest.mark.parametrize("route", ["item-scores", "order-outcomes"])
def test_another_projects_run_is_a_404(secured: Api, route: str) -> None:
    run_id = _submit(secured, 3, key="alpha")
    assert secured.client.get(f"/v1/runs/{run_id}/{route}", headers=secured.as_key("beta")).status_code == 404
    own = secured.client.get(f"/v1/runs/{run_id}/{route}", headers=secured.as_key("alpha-read"))
    assert own.status_code == 200 and own.json()["total"] > 0
    assert secured.client.get(f"/v1/runs/{run_id}/{route}").status_code == 401


def test_postgres_gives_the_same_aggregates_in_the_same_order(api_factory: Any, pg_url: str) -> None:
    """On PostgreSQL too, with ids whose order depends on the collation: the keys come in Python's (code point)
    order, as the frame sorted them."""
    pg = api_factory(database_url=pg_url)
    body = run_body(4, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    body["aspects"] = ["consistency", "overall"]
    body["items"] = [
        {**it, "id": name, "candidates": {"a": "A: Rex.", "b": "B: Max", "c": "C: ?"}}
        for it, name in zip(body["items"], ["item-b", "Item-a", "item-A", "item_c"], strict=True)
    ]
    run_id = str(pg.submit(None, body)["id"])
    _judge_half(run_id)
    frame = _frame(pg, run_id)
    rows, _ = _all(pg, f"/v1/runs/{run_id}/order-outcomes", limit=3)
    old = analysis.order_outcomes(frame)
    assert _records(pd.DataFrame(rows, columns=analysis.ORDER_COLUMNS)) == _records(old)
    assert [r["item_id"] for r in rows] == sorted(r["item_id"] for r in rows)
    scores, _ = _all(pg, f"/v1/runs/{run_id}/item-scores")
    assert _records(pd.DataFrame(scores, columns=analysis.JUDGE_ITEM_COLUMNS)) == _records(
        analysis.judge_item_scores(frame)
    )


def test_a_rating_written_changes_the_kept_answer(api: Api, run: str) -> None:
    """The API keeps an aggregate per state of the run: a new rating is in the next answer."""
    before = api.client.get(f"/v1/runs/{run}/item-scores", params={"rated": "true"}).json()
    assert "item-7" not in {r["item_id"] for r in before["items"]}
    rating = {"item_id": "item-7", "system": "a", "aspect": "consistency", "rater": "cy", "kind": "score",
              "value": 3.0, "scale_min": 1.0, "scale_max": 10.0}  # fmt: skip
    assert api.client.post(f"/v1/runs/{run}/human-ratings", json={"ratings": [rating]}).status_code == 201
    after = api.client.get(f"/v1/runs/{run}/item-scores", params={"rated": "true"}).json()
    assert after["total"] > before["total"]
    assert {r["item_id"] for r in after["items"]} - {r["item_id"] for r in before["items"]} == {"item-7"}
