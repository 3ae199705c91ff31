"""Fault-test harness: real processes (API, Celery workers, the judge simulator, a Redis server of our own when the
test restarts it) and one verdict, ``verify_exactly_once``: the run finished, every planned judgment exists exactly
once with a terminal status (failures carry their reason), the report counts each judgment once, and no judgment
claims a provider call the provider did not see."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_api.config import Settings

TERMINAL = {"done", "failed", "unparseable", "cancelled"}


def make_items(n: int, systems: dict[str, int], marker: str = "", prefix: str = "item") -> list[dict[str, Any]]:
    """Items whose candidates carry their expected score (``<<q=NN>>``, read by the simulator) plus ``marker``
    (a word fault scripts match on; the candidate is in every judge prompt). ``prefix`` names the items and is
    part of the prompt, so items of another prefix never hit the judge cache. Item i of system s scores
    (systems[s] + i) % 100 + 1, so a verdict written to the wrong row shows up as a wrong score."""
    return [
        {
            "id": f"{prefix}-{i}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago."},
                {"speaker": "bot", "text": "How lovely!"},
                {"speaker": "user", "text": "Do you remember my dog's name?"},
            ],
            "candidates": {
                s: f"Answer from {s} about Rex ({prefix}). <<q={expected_score(base, i)}>> {marker}".strip()
                for s, base in systems.items()
            },
        }
        for i in range(n)
    ]


def expected_score(base: int, index: int) -> int:
    return (base + index) % 100 + 1


def single_run(items: list[dict[str, Any]], judge: str, **extra: Any) -> dict[str, Any]:
    return {
        "items": items,
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "mode": ["single"],
        "aspects": ["consistency"],
        **extra,
    }


def wait_run(api_url: str, run_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Poll until the run is finished, riding out API restarts, 503s (database away) and refused connections."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{api_url}/v1/runs/{run_id}", timeout=10)
            last = response.status_code, response.text[:500]
            if response.status_code == 200:
                summary = response.json()
                if summary["status"] in ("done", "budget_exhausted"):
                    return dict(summary)
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.25)
    raise TimeoutError(f"run {run_id} not finished after {timeout_s}s; last answer: {last}")


def wait_until(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (httpx.HTTPError, KeyError):
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"timed out waiting for {what}")


def run_counts(api_url: str, run_id: str) -> dict[str, int]:
    return dict(httpx.get(f"{api_url}/v1/runs/{run_id}", timeout=10).json()["counts"])


IDENTITY = ("item_key", "mode", "system_a", "system_b", '"order"', "rubric_id", "aspect", "judge", "sample_index")


def judgment_rows(database_url: str, run_id: str) -> list[dict[str, Any]]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    f"SELECT id, dedup_key, {', '.join(IDENTITY)}, status, score, error, provider_calls, attempts, "
                    "cached, input_tokens, claim_token FROM judgments WHERE run_id = :r ORDER BY id"
                ),
                {"r": run_id},
            )
            return [dict(r._mapping) for r in rows]
    finally:
        engine.dispose()


@dataclass
class Verdict:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    report: dict[str, Any]

    @property
    def by_status(self) -> Counter[str]:
        return Counter(r["status"] for r in self.rows)

    @property
    def provider_calls(self) -> int:
        return sum(int(r["provider_calls"]) for r in self.rows)


def verify_exactly_once(
    service: LiveService,
    database_url: str,
    run_id: str,
    n_judgments: int,
    *,
    sim: Any = None,
    exact_calls: bool = False,
    expected_scores: dict[tuple[str, str], float] | None = None,
    timeout_s: float = 120.0,
) -> Verdict:
    summary = wait_run(service.api_url, run_id, timeout_s)
    rows = judgment_rows(database_url, run_id)
    sim_calls = int(sim.stats()["total_calls"]) if sim is not None else None
    # every planned judgment exists exactly once
    assert len(rows) == n_judgments == summary["n_judgments"], (len(rows), n_judgments, summary)
    identities = Counter(tuple(r[k.strip('"')] for k in IDENTITY) for r in rows)
    assert max(identities.values()) == 1, [k for k, v in identities.items() if v > 1]
    assert len({r["dedup_key"] for r in rows}) == n_judgments
    # finished, and a failure always says why
    assert {r["status"] for r in rows} <= TERMINAL, Counter(r["status"] for r in rows)
    assert all(r["claim_token"] is None for r in rows)
    for r in rows:
        if r["status"] in ("failed", "unparseable", "cancelled"):
            assert r["error"], r
        if r["status"] == "done":
            assert r["score"] is not None and r["error"] is None, r
    if expected_scores is not None:
        for r in rows:
            if r["status"] == "done":
                assert r["score"] == expected_scores[(r["item_key"], r["system_a"])], r
    by_status = Counter(r["status"] for r in rows)
    assert {k: v for k, v in summary["counts"].items() if v} == dict(by_status)
    assert summary["provider_calls"] == sum(int(r["provider_calls"]) for r in rows)
    # the report counts each judgment once
    report = httpx.get(f"{service.api_url}/v1/runs/{run_id}/report", params={"n_boot": 20}, timeout=60)
    assert report.status_code == 200, report.text[:2000]
    body = report.json()
    assert body["counts"]["n_rows"] == n_judgments
    assert {k: v for k, v in body["counts"]["by_status"].items() if v} == dict(by_status)
    assert body["cost"]["input_tokens"] == sum(int(r["input_tokens"]) for r in rows)
    assert body["cost"]["n_finished"] == sum(by_status[s] for s in ("done", "failed", "unparseable"))
    done_in_scores = sum(int(s.get("n_done") or 0) for s in body["scores"])
    assert done_in_scores == by_status["done"], body["scores"]
    # no judgment claims a provider call the provider did not answer
    calls = sum(int(r["provider_calls"]) for r in rows)
    if sim_calls is not None:
        assert calls <= sim_calls, (calls, sim_calls)
        if exact_calls:
            assert calls == sim_calls, (calls, sim_calls)
    return Verdict(rows, summary, body)


def scores_for(items: list[dict[str, Any]], systems: dict[str, int]) -> dict[tuple[str, str], float]:
    """(item id, system) -> the score the simulator must give: the candidate's own ``<<q=NN>>`` marker."""
    return {
        (item["id"], s): float(re.search(r"<<q=(\d+)>>", item["candidates"][s]).group(1))  # type: ignore[union-attr]
        for item in items
        for s in systems
    }


@pytest.fixture
def services() -> Iterator[list[LiveService]]:
    """LiveServices registered here are stopped at teardown, whatever the test did to them."""
    started: list[LiveService] = []
    yield started
    for service in started:
        service.stop()


def shipped_timers() -> dict[str, str]:
    """The recovery timers as judge_api.config ships them (LiveService shortens them for the other fault tests)."""
    fields = Settings.model_fields
    return {
        "DJ_CLAIM_LEASE": str(fields["claim_lease_s"].default),
        "DJ_REQUEUE_AFTER": str(fields["requeue_after_s"].default),
        "DJ_SWEEP_INTERVAL": str(fields["sweep_interval_s"].default),
        "DJ_VISIBILITY_TIMEOUT": str(fields["visibility_timeout_s"].default),
    }
