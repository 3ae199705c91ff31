"""Issue 39: on random runs (hypothesis), the aggregate path (what the database groups: ``/item-scores``,
``/order-outcomes``, ``/score-deltas``, ``/worse-items``) equals the row path (the same figures computed from the
runs' whole ``/judgments.csv`` frames, as the dashboard did before): item means over samples and judges, the
human-rated scatter (agreement), outcomes per order with the win / tie / loss they give and the order flips, paired
differences between two runs with their bootstrap CIs, and the worse items in order.

Each example submits two runs over overlapping items (two judges, two samples, two aspects, three systems) and
writes drawn verdicts as a worker does: scores with halves, tenths and ties (sums that are not exact in binary),
preferences and outcomes of every kind, failures and unparseable verdicts, some judgments left pending."""

from __future__ import annotations

from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from dashboard import analysis
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment
from judge_api.repository import claims
from tests import compare_reference
from tests.api.conftest import JUDGE, Api, run_body
from tests.api.test_item_aggregates import _all, _frame, _records

JUDGE_2 = JUDGE.replace("sim-judge", "sim-judge-2")
SCORES = (1.0, 1.5, 2.0, 0.1, 0.2, 0.3, 7.7, 10.0, 3.3333333333333335)

verdict = st.one_of(
    st.tuples(st.just("done"), st.sampled_from(SCORES), st.sampled_from((-2.0, -1.0, 0.0, 1.0, 2.0))),
    st.tuples(st.sampled_from(("failed", "unparseable", "pending")), st.none(), st.none()),
)
OUTCOME = {2.0: "win", 1.0: "win", 0.0: "tie", -1.0: "loss", -2.0: "loss"}


def _submit(api: Api, items: range) -> str:
    body = run_body(1, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"], judges=[JUDGE, JUDGE_2])
    body["aspects"] = ["consistency", "overall"]
    body["options"] = {"samples": 2, "temperature": 0.7}
    template = body["items"][0]
    body["items"] = [
        {**template, "id": f"item-{i}", "candidates": {"a": "A: Rex.", "b": "B: Max", "c": "C: ?"}} for i in items
    ]
    return str(api.submit(None, body)["id"])


def _write(run_id: str, drawn: list[tuple[str, float | None, float | None]]) -> None:
    """The drawn verdicts, cycled over the run's judgments in id order ("pending": not written)."""
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.system_b).where(Judgment.run_id == run_id).order_by(Judgment.id)
        ).all()
    engine = get_engine()
    token, claimed = claims.claim_many(engine, [r.id for r in rows], 600.0)
    verdicts = []
    for k, (jid, system_b) in enumerate(rows):
        status, score, preference = drawn[k % len(drawn)]
        if status == "pending" or jid not in claimed:
            continue
        values: dict[str, Any] = {"status": status, "input_tokens": 10, "output_tokens": 3, "provider_calls": 1}
        if status == "failed":
            values["error"] = "provider said no"
        elif status == "done" and system_b is None:
            values["score"] = score
        elif status == "done":
            values.update(preference=preference, outcome=OUTCOME[preference or 0.0])
        verdicts.append((jid, token, values))
    assert all(claims.write_verdicts(engine, verdicts))


def _rate(api: Api, run_id: str, items: range, values: list[float]) -> None:
    ratings = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "rater": "ann", "kind": "score",
         "value": values[(i + k) % len(values)], "scale_min": 1.0, "scale_max": 10.0}
        for i in items for k, s in enumerate(("a", "b"))
    ] + [
        {"item_id": f"item-{i}", "system": "a", "system_b": "b", "aspect": "overall", "rater": "ann",
         "kind": "preference", "value": float(i % 3 - 1)}
        for i in items
    ]  # fmt: skip
    response = api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings})
    assert response.status_code == 201, response.text


def _check(
    api: Api,
    n_items: int,
    shift: int,
    base_verdicts: list[tuple[str, float | None, float | None]],
    cand_verdicts: list[tuple[str, float | None, float | None]],
    human: list[float],
    seed: int,
) -> None:
    base, cand = _submit(api, range(n_items)), _submit(api, range(shift, shift + n_items))
    _write(base, base_verdicts)
    _write(cand, cand_verdicts)
    _rate(api, base, range(n_items), human)
    frame_base, frame_cand = _frame(api, base), _frame(api, cand)

    # means: the item scores over samples, per judge
    old_items = analysis.judge_item_scores(frame_base)
    rows, first = _all(api, f"/v1/runs/{base}/item-scores", limit=5)
    assert first["total"] == len(old_items)
    assert _records(pd.DataFrame(rows, columns=analysis.JUDGE_ITEM_COLUMNS)) == _records(old_items)

    # agreement: the judge-vs-human scatter on the rated keys
    ratings = pd.DataFrame(api.client.get(f"/v1/runs/{base}/human-ratings").json()["items"])
    humans = analysis.human_item_scores(ratings)
    rated, _ = _all(api, f"/v1/runs/{base}/item-scores", rated="true")
    old_scatter = analysis.scatter_frame(old_items, humans)
    new_scatter = analysis.scatter_frame(pd.DataFrame(rated, columns=analysis.JUDGE_ITEM_COLUMNS), humans)
    assert _records(new_scatter) == _records(old_scatter)

    # win rates: each key's outcome per order, the flips, the preference disagreements
    old_orders = analysis.order_outcomes(frame_base)
    orders, page = _all(api, f"/v1/runs/{base}/order-outcomes", limit=4)
    assert page["n_keys"] == len(old_orders)
    assert _records(pd.DataFrame(orders, columns=analysis.ORDER_COLUMNS)) == _records(old_orders)
    assert _records(analysis.flip_summary_from_counts(page["by_pair"])) == _records(analysis.flip_summary(old_orders))
    rated_orders, _ = _all(api, f"/v1/runs/{base}/order-outcomes", rated="true")
    new_disagreements = analysis.preference_disagreements(
        pd.DataFrame(rated_orders, columns=analysis.ORDER_COLUMNS), ratings
    )
    assert _records(new_disagreements) == _records(analysis.preference_disagreements(old_orders, ratings))

    # paired differences between the runs, with the same bootstrap
    b, c = analysis.judge_item_scores(frame_base), analysis.judge_item_scores(frame_cand)
    old_deltas = compare_reference.compare_scores(b, c, n_boot=200, seed=seed)
    response = api.client.get(f"/v1/runs/{cand}/score-deltas", params={"baseline": base, "n_boot": 200, "seed": seed})
    assert response.status_code == 200, response.text
    new_deltas = pd.DataFrame(response.json()["items"], columns=old_deltas.columns)
    assert _records(new_deltas) == _records(old_deltas)  # to the last bit
    old_worse = compare_reference.worse_items(b, c)
    worse, _ = _all(api, f"/v1/runs/{cand}/worse-items", limit=3, baseline=base)
    assert _records(pd.DataFrame(worse, columns=old_worse.columns)) == _records(old_worse)


EXAMPLES = {
    "n_items": st.integers(2, 6),
    "shift": st.integers(0, 3),
    "base_verdicts": st.lists(verdict, min_size=1, max_size=40),
    "cand_verdicts": st.lists(verdict, min_size=1, max_size=40),
    "human": st.lists(st.sampled_from((1.0, 2.5, 5.0, 10.0)), min_size=1, max_size=5),
    "seed": st.integers(0, 3),
}
SLOW_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=12, deadline=None, suppress_health_check=SLOW_FIXTURES)
@given(**EXAMPLES)
def test_the_aggregate_path_equals_the_row_path(api: Api, **drawn: Any) -> None:
    _check(api, **drawn)


@settings(max_examples=5, deadline=None, suppress_health_check=SLOW_FIXTURES)
@given(**EXAMPLES)
def test_the_aggregate_path_equals_the_row_path_on_postgres(api_factory: Any, pg_url: str, **drawn: Any) -> None:
    _check(api_factory(database_url=pg_url), **drawn)
