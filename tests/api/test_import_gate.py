"""``POST /v1/runs/import`` passes the gate a submitted run passes (issue 42): the run limits and the rate limit
(finding 6), a new run id in the caller's project whatever the bundle's, so an import tells nobody another
project's run exists (finding 11), and judge-cache entries that stay in their project (finding 5).

The real API (auth on, two projects with their own keys) over a real database; finding 5 also with the real judge
engine against the loopback judge simulator, so the victim's cache entry is the one a worker wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.models import CacheEntry, Judgment, Run
from judge_simulator.process import SimulatorProcess

from .conftest import Api, ApiFactory, item, run_body
from .test_cache_isolation import judged, private_body, two_projects


def bundle_of(api: Api, key: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Submit ``body`` as ``key`` and return the run's export, one dict a line."""
    run_id = api.submit(key, body)["id"]
    exported = api.client.get(f"/v1/runs/{run_id}/export", headers=api.as_key(key))
    assert exported.status_code == 200, exported.text
    return [json.loads(line) for line in exported.text.splitlines()]


def encoded(lines: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def grown(lines: list[dict[str, Any]], copies: int, samples: int = 1) -> list[dict[str, Any]]:
    """The bundle with each item ``copies`` times (new item keys) and each judgment ``samples`` times (new sample
    indexes): a bundle larger than any run the limits would let anyone submit."""
    out = [lines[0]]
    for copy in range(copies):
        suffix = f"-c{copy}" if copy else ""
        for line in lines[1:]:
            if line["record"] == "item":
                out.append(
                    {
                        **line,
                        "item_key": line["item_key"] + suffix,
                        "payload": {**line["payload"], "id": line["item_key"] + suffix},
                    }
                )
            elif line["record"] == "judgment":
                for sample in range(samples):
                    out.append({**line, "item_key": line["item_key"] + suffix, "sample_index": sample})
            elif copy == 0:
                out.append(line)
    return out


def imported(api: Api, key: str, lines: list[dict[str, Any]]) -> Any:
    return api.client.post("/v1/runs/import", content=encoded(lines), headers=api.as_key(key))


# -- finding 6: the run limits and the rate limit ------------------------------------------------------------------


def test_an_import_over_the_run_limits_is_refused_and_a_second_in_the_minute_is_429(api_factory: ApiFactory) -> None:
    """Old: three imports each queued thousands of pending judgments past DJ_MAX_ITEMS=5, DJ_MAX_JUDGMENTS=10 and
    DJ_RUNS_PER_MINUTE=1. Now each limit refuses (422 naming it) with nothing stored, a refusal does not use the
    minute's slot, and a second import in the minute is 429 as a second POST /v1/runs is."""
    api = api_factory(auth=True, DJ_MAX_ITEMS="5", DJ_MAX_JUDGMENTS="10", DJ_RUNS_PER_MINUTE="1")
    api.create_key("alpha", ["submit", "read"], "source")  # the source run counts against its own key's minute
    api.create_key("alpha", ["submit", "read"], "importer")
    lines = bundle_of(api, "source", run_body(n_items=2))  # 2 items x 2 systems: 4 pending judgments
    before = api.row_counts()

    too_many_items = imported(api, "importer", grown(lines, copies=3))  # 6 items
    assert too_many_items.status_code == 422, too_many_items.text
    [problem] = too_many_items.json()["detail"]
    assert "DJ_MAX_ITEMS" in problem["msg"] and "item" in problem["loc"][1]
    assert api.row_counts() == before

    too_many_judgments = imported(api, "importer", grown(lines, copies=2, samples=3))  # 4 items, 24 judgments
    assert too_many_judgments.status_code == 422, too_many_judgments.text
    [problem] = too_many_judgments.json()["detail"]
    assert "DJ_MAX_JUDGMENTS" in problem["msg"] and problem["loc"] == ["body", "judgment"]
    assert api.row_counts() == before

    first = imported(api, "importer", lines)
    assert first.status_code == 201, first.text
    after_first = api.row_counts()
    second = imported(api, "importer", lines)
    assert second.status_code == 429, second.text
    assert "Retry-After" in second.headers
    assert api.row_counts() == after_first
    # the same as POST /v1/runs with that key in that minute
    submitted = api.client.post("/v1/runs", json=run_body(), headers=api.as_key("importer"))
    assert submitted.status_code == 429


# -- finding 11: a new id, whoever has the bundle's ------------------------------------------------------------


def test_another_projects_run_id_answers_as_a_fresh_id(api_factory: ApiFactory) -> None:
    """Old: a bundle carrying another project's run id was 409 ('exists in this deployment'), telling the caller
    that run exists. Now every import gets a new id in the caller's project: another project's id, a fresh id and
    the caller's own run's id answer alike (201, a new run_id, the bundle's as source_run_id)."""
    api = api_factory(auth=True)
    api.create_key("alpha", ["submit", "read"], "alpha")
    api.create_key("beta", ["submit", "read"], "beta")
    victim_run = api.submit("alpha", run_body())["id"]
    lines = bundle_of(api, "beta", run_body())
    own_run = lines[0]["run"]["id"]

    answers = {}
    for case, run_id in (("other project's", victim_run), ("fresh", "run_0000000000000000"), ("own", own_run)):
        lines[0]["run"]["id"] = run_id
        response = imported(api, "beta", lines)
        assert response.status_code == 201, (case, response.text)
        answer = response.json()
        assert answer["source_run_id"] == run_id and answer["run_id"] not in (run_id, victim_run, own_run)
        answers[case] = {k: v for k, v in answer.items() if k not in ("run_id", "source_run_id")}
        mine = api.client.get(f"/v1/runs/{answer['run_id']}", headers=api.as_key("beta"))
        assert mine.status_code == 200 and mine.json()["n_judgments"] == 4
    assert answers["other project's"] == answers["fresh"] == answers["own"]
    # the victim's run is untouched and still only the victim's
    assert api.client.get(f"/v1/runs/{victim_run}", headers=api.as_key("beta")).status_code == 404
    with session_scope() as session:
        victim = session.get(Run, victim_run)
        assert victim is not None and victim.project_id == "alpha"
        assert session.scalar(select(Judgment.id).where(Judgment.run_id == victim_run).limit(1)) is not None


# -- finding 5: cache entries stay in their project ------------------------------------------------------------


def test_a_guessed_cache_key_brings_nothing_of_the_victims_reply(
    api_factory: ApiFactory, sim: SimulatorProcess
) -> None:
    """Old: export picked cache entries by key alone, so an attacker who computed the victim's per-project key for
    a prompt the victim judged, and imported a judgment carrying it, got the victim's judge reply in their export.
    Now an imported judgment's key is re-keyed into the importer's project, and export leaves out an entry whose key
    another project's judgment carries (such as one planted before this fix)."""
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    api = two_projects(api_factory, sim)
    victim = judged(api, "a", private_body(judge))
    assert victim["score"] == 73.0
    with session_scope() as session:
        victim_key, victim_reply = session.execute(
            select(CacheEntry.key, CacheEntry.raw_output)
            .join(Judgment, Judgment.cache_key == CacheEntry.key)
            .join(Run, Run.id == Judgment.run_id)
            .where(Run.project_id == "team-a")
        ).one()
    # what the attacker computes: the key is a content address of the prompt, the judge and the project
    assert victim_key and victim_reply

    lines = bundle_of(api, "b", private_body(judge, candidate="Something the attacker wrote."))
    for line in lines:
        if line["record"] == "judgment":
            line.update(status="done", cache_key=victim_key, raw_output="{}", score=1.0)
    response = imported(api, "b", lines)
    assert response.status_code == 201, response.text
    attacker_run = response.json()["run_id"]

    def attackers_export() -> str:
        exported = api.client.get(f"/v1/runs/{attacker_run}/export", headers=api.as_key("b"))
        assert exported.status_code == 200, exported.text
        return str(exported.text)

    text = attackers_export()
    assert victim_key not in text and victim_reply not in text and '"record":"cache_entry"' not in text

    # a judgment carrying the victim's key as an import stored it before this fix: its export leaves the entry out
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == attacker_run).values(cache_key=victim_key))
    text = attackers_export()
    assert victim_reply not in text and '"record":"cache_entry"' not in text


# -- attacked again: rows twice ------------------------------------------------------------------------------------


@pytest.mark.parametrize("record", ["item", "judgment", "generation", "rating"])
def test_a_bundle_carrying_a_row_twice_is_refused_naming_it(api_factory: ApiFactory, record: str) -> None:
    """Old: a judgment or rating line repeated hit a unique constraint while storing (500). Now each is a 422
    naming the line (or the field), before anything is stored."""
    api = api_factory(auth=True)
    api.create_key("alpha", ["submit", "read"], "alpha")
    body = run_body(items=[item(0, systems=("a",))], systems={"x": "http:http://127.0.0.1:9/v1/respond"})
    lines = bundle_of(api, "alpha", body)
    rating = {"item_id": "item-0", "system": "a", "aspect": "overall", "rater": "r", "value": 3, "scale_min": 1}
    rated = api.client.post(
        f"/v1/runs/{lines[0]['run']['id']}/human-ratings",
        json={"ratings": [{**rating, "scale_max": 5}]},
        headers=api.as_key("alpha"),
    )
    assert rated.status_code == 201, rated.text
    exported = api.client.get(f"/v1/runs/{lines[0]['run']['id']}/export", headers=api.as_key("alpha"))
    lines = [json.loads(line) for line in exported.text.splitlines()]
    if record == "judgment":  # a run with systems has none before its responses: one as a finished run has
        lines = bundle_of(api, "alpha", run_body())
    [first] = [line for line in lines if line["record"] == record][:1]
    # the bundle's run is gone (old code answered 409 for its id), so only the row twice is at fault
    assert api.client.delete(f"/v1/runs/{lines[0]['run']['id']}", headers=api.as_key("alpha")).status_code == 200
    before = api.row_counts()
    response = imported(api, "alpha", [*lines, first])
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert record in problem["loc"][1] and ("same" in problem["msg"] or "twice" in problem["msg"]), problem
    assert api.row_counts() == before
