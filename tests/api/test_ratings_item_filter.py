"""Issue 39: ``GET /v1/runs/{id}/human-ratings?item_id=...`` gives only those items' ratings (the item explorer reads
one item's, not a run's thousands), in the order the whole list gives them; too many ids is a 422 naming the field."""

from __future__ import annotations

from tests.api.conftest import Api, run_body


def _rated_run(api: Api) -> str:
    run_id = str(api.submit(None, run_body(4))["id"])
    ratings = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "rater": r, "kind": "score", "value": v,
         "scale_min": 1.0, "scale_max": 10.0}
        for i in range(4) for s in ("a", "b") for r, v in (("ann", 1.0 + i), ("bo", 9.0 - i))
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    return run_id


def test_only_the_asked_items_ratings_in_the_same_order(api: Api) -> None:
    run_id = _rated_run(api)
    everything = api.client.get(f"/v1/runs/{run_id}/human-ratings").json()["items"]
    assert len(everything) == 16
    for asked in (["item-1"], ["item-3", "item-0"], ["no-such-item"], ["item-1", "item-1"]):
        response = api.client.get(f"/v1/runs/{run_id}/human-ratings", params={"item_id": asked})
        assert response.status_code == 200, response.text
        body = response.json()
        want = [r for r in everything if r["item_id"] in asked]
        assert body["items"] == want and body["total"] == len(want)


def test_too_many_item_ids_is_a_422_naming_item_id(api: Api) -> None:
    run_id = _rated_run(api)
    response = api.client.get(f"/v1/runs/{run_id}/human-ratings", params={"item_id": [f"i{k}" for k in range(1001)]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "item_id"]


def test_the_ratings_body_keeps_every_field_and_value(api: Api) -> None:
    """The list is written as pandas writes the records, not parsed and encoded again (issue 39): the same fields and
    values as before, non-ASCII raters, a preference's system_b, a fractional score, in the order first written."""
    run_id = str(api.submit(None, run_body(2))["id"])
    ratings = [
        {"item_id": "item-1", "system": "a", "aspect": "consistency", "rater": "Zoë", "kind": "score",
         "value": 7.25, "scale_min": 1.0, "scale_max": 10.0},
        {"item_id": "item-0", "system": "a", "system_b": "b", "aspect": "consistency", "rater": "李",
         "kind": "preference", "value": -1},
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    response = api.client.get(f"/v1/runs/{run_id}/human-ratings")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    common = {"aspect": "consistency", "turn": None, "tie_inconsistent": False}
    assert response.json() == {
        "run_id": run_id,
        "total": 2,
        "items": [
            {"item_id": "item-1", "system": "a", "system_b": None, "rater": "Zoë", "kind": "score", "value": 7.25,
             "scale_min": 1.0, "scale_max": 10.0, **common},
            {"item_id": "item-0", "system": "a", "system_b": "b", "rater": "李", "kind": "preference", "value": -1.0,
             "scale_min": -1.0, "scale_max": 1.0, **common},
        ],
    }  # fmt: skip
    empty = api.client.get(f"/v1/runs/{run_id}/human-ratings", params={"item_id": ["nothing"]})
    assert empty.json() == {"run_id": run_id, "total": 0, "items": []}
