"""Issue 42 review: an imported judgment row is one the planner could have made for its run. Old: a submit key
imported judgments with a status or mode outside the known ones, a pairwise judgment with one system, a negative
sample index or a list as details (201); the run's report and label queue (status, mode, pairwise) and its
judgments list (details) then answered 500. Now each is a 422 naming the line and field, and nothing is stored."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .conftest import ApiFactory, run_body
from .test_import_gate import bundle_of, imported

BAD_ROWS: dict[str, tuple[dict[str, Any], str]] = {
    "status outside the known ones": ({"status": "bogus"}, "status"),
    "mode not the run's": ({"mode": "nope"}, "mode"),
    "a single judgment naming two systems": ({"system_b": "b"}, "system_b"),
    "a negative sample index": ({"sample_index": -1}, "sample_index"),
    "details a list": ({"details": [1, 2]}, "details"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_an_imported_judgment_the_planner_could_not_have_made_is_refused(api_factory: ApiFactory, case: str) -> None:
    api = api_factory(auth=True)
    api.create_key("alpha", ["submit", "read"], "a")
    lines = bundle_of(api, "a", run_body(n_items=2))
    change, field = BAD_ROWS[case]
    bad = copy.deepcopy(lines)
    for line in bad:
        if line["record"] == "judgment":
            line.update({"status": "done", "score": 4.0, "raw_output": "[[4]]", "verdict": "4", **change})
    before = api.row_counts()
    response = imported(api, "a", bad)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"][1].endswith(f"judgment.{field}"), problem
    assert api.row_counts() == before
    # the honest bundle still imports, and its run's reads answer
    honest = imported(api, "a", lines)
    assert honest.status_code == 201, honest.text
    run_id = honest.json()["run_id"]
    for route in ("/report", "/judgments"):
        assert api.client.get(f"/v1/runs/{run_id}{route}", headers=api.as_key("a")).status_code == 200
