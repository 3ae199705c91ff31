"""GET /v1/rubrics/{id}/versions[/{version}]: the rubric versions runs were planned with, stored with the run in the
same transaction (a rejected submission stores none), and the folders' current version."""

from __future__ import annotations

import shutil
from pathlib import Path

from judge_api.rubrics import get_registry

from .conftest import Api, ApiFactory, run_body

REPO = Path(__file__).resolve().parents[2]


def test_versions_are_stored_with_runs_and_served(api_factory: ApiFactory, tmp_path: Path) -> None:
    user_rubrics = tmp_path / "user-rubrics"
    shutil.copytree(REPO / "rubrics" / "rsum-single", user_rubrics / "rsum-single")
    api = api_factory(DJ_RUBRICS_PATH=str(user_rubrics))
    first = get_registry(refresh=True).get("rsum-single")

    # before any run: only the folders' version, not stored
    listed = api.client.get("/v1/rubrics/rsum-single/versions").json()
    assert [(v["version"], v["current"], v["stored_at"]) for v in listed] == [(first.version, True, None)]
    assert api.row_counts()["rubric_snapshots"] == 0

    api.submit(body=run_body())
    api.submit(body=run_body())  # the same version is stored once
    assert api.row_counts()["rubric_snapshots"] == 1

    prompt = user_rubrics / "rsum-single" / "prompt.j2"
    prompt.write_text(prompt.read_text().replace("You are an impartial judge.", "You are a fair judge."))
    second = get_registry(refresh=True).get("rsum-single")
    api.submit(body=run_body())
    listed = api.client.get("/v1/rubrics/rsum-single/versions").json()
    assert [(v["version"], v["current"]) for v in listed] == [(first.version, False), (second.version, True)]
    assert all(v["stored_at"] for v in listed)

    old = api.client.get(f"/v1/rubrics/rsum-single/versions/{first.version}")
    assert old.status_code == 200
    old_templates = old.json()["content"]["templates"]
    assert "You are an impartial judge." in old_templates["prompt.j2"]
    assert old.json()["content"]["parser"] == first.parser and "folder" not in old.json()["content"]
    current = api.client.get(f"/v1/rubrics/rsum-single/versions/{second.version}").json()
    assert "You are a fair judge." in current["content"]["templates"]["prompt.j2"] and current["current"]


def test_unknown_rubric_or_version_is_404_with_the_reason(api: Api) -> None:
    missing = api.client.get("/v1/rubrics/no-such-rubric/versions")
    assert missing.status_code == 404 and "rubric 'no-such-rubric' not found" in missing.json()["detail"]
    wrong = api.client.get("/v1/rubrics/rsum-single/versions/0000000000000000")
    assert wrong.status_code == 404 and "has no version '0000000000000000'" in wrong.json()["detail"]


def test_a_rejected_submission_stores_no_rubric_version(api: Api) -> None:
    before = api.row_counts()
    bad = api.client.post("/v1/runs", json=run_body(aspects=["no-such-aspect"]))
    assert bad.status_code == 422
    assert api.row_counts() == before


def test_versions_need_the_read_scope(secured: Api) -> None:
    assert secured.client.get("/v1/rubrics/rsum-single/versions").status_code == 401
    ok = secured.client.get("/v1/rubrics/rsum-single/versions", headers=secured.as_key("alpha-read"))
    assert ok.status_code == 200
    admin = secured.client.get("/v1/rubrics/rsum-single/versions", headers=secured.as_key("alpha-admin"))
    assert admin.status_code == 200  # admin implies every scope
