"""Review r49a of d122812: GET /human-ratings written as pandas writes the records (the same JSON values as before)."""

from __future__ import annotations

import json

import pandas as pd

from judge_api import repository
from tests.api.conftest import Api, run_body

RATER = 'Zoë "q" \\ \x01\t\n\u2028 😀 李 </script>'


def test_hostile_raters_meta_and_filters_round_trip(api: Api) -> None:
    run_id = str(api.submit(None, run_body(3))["id"])
    ratings = [
        {"item_id": "item-0", "system": "a", "aspect": "c\"o/n", "rater": RATER, "kind": "score", "value": 0.1 + 0.2,
         "scale_min": -5.0, "scale_max": 5.0, "meta": {"turn": 3, "tie_inconsistent": True, "x": [1, {"y": None}]}},
        {"item_id": "item-1", "system": "a", "system_b": "b", "aspect": "ä", "rater": "r2", "kind": "preference",
         "value": 0, "meta": {"turn": "t-1"}},
        {"item_id": "item-2", "system": "b", "aspect": "a", "rater": "r3", "kind": "score", "value": 1e-300,
         "scale_min": -1e-299, "scale_max": 1e9, "meta": {"turn": {"nested": 2**60}, "tie_inconsistent": 0}},
    ]  # fmt: skip
    posted = api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings})
    assert posted.status_code == 201, posted.text
    response = api.client.get(f"/v1/runs/{run_id}/human-ratings")
    assert response.status_code == 200
    body = json.loads(response.content)  # strict: no NaN / Infinity tokens
    items = body["items"]
    assert body["total"] == 3 and body["run_id"] == run_id
    assert [i["rater"] for i in items] == [RATER, "r2", "r3"]
    assert items[0]["aspect"] == 'c"o/n' and items[1]["aspect"] == "ä"
    assert items[0]["turn"] == 3 and items[1]["turn"] == "t-1" and items[2]["turn"] == {"nested": 2**60}
    assert [i["tie_inconsistent"] for i in items] == [True, False, False]
    assert items[1]["system_b"] == "b" and items[0]["system_b"] is None
    one = api.client.get(f"/v1/runs/{run_id}/human-ratings", params={"item_id": ["item-2", 'zz"\\']}).json()
    assert one["total"] == 1 and one["items"] == items[2:]


def test_the_frame_keeps_its_dtypes(api: Api) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    run_id = str(api.submit(None, run_body(2))["id"])
    ratings = [
        {"item_id": "item-0", "system": "a", "aspect": "c", "rater": "r", "kind": "score", "value": 2,
         "scale_min": 1, "scale_max": 5, "meta": {"turn": 1}},
        {"item_id": "item-1", "system": "a", "aspect": "c", "rater": "r", "kind": "score", "value": 3,
         "scale_min": 1, "scale_max": 5},
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    engine = create_engine(api.database_url)
    with Session(engine) as session:
        frame = repository.ratings_frame(session, run_id)
        empty = repository.ratings_frame(session, run_id, ["nothing"])
    engine.dispose()
    dtypes = {c: str(t) for c, t in frame.dtypes.items()}
    assert dtypes["turn"] == "float64" and dtypes["tie_inconsistent"] == "bool" and dtypes["value"] == "float64"
    assert pd.isna(frame["system_b"]).all()
    assert list(empty.columns) == list(frame.columns)
