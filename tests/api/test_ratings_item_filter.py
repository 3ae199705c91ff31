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
