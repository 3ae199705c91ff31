"""Reference metrics through the judging engine: planned for every candidate of an item with a reference, computed
by the worker without a provider call, stored as judgments of the ``reference`` pseudo-judge, shown in the report."""

from __future__ import annotations

import re

import pytest

from judge_api import repository
from judge_api.db import session_scope
from judge_api.planning import PlanError, plan_run
from judge_api.reference_metrics import lexical_metrics
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from judge_api.stats.render import report_to_table
from judge_api.stats.report import build_report

from .harness import Harness, dialogue_item

REFERENCE = "Yes, your beagle is called Rex!"
CANDIDATES = {"gold": "Yes, your beagle is called Rex! <<q=90>>", "off": "I like cats a lot. <<q=20>>"}


def items() -> list[dict]:
    return [
        dialogue_item("r1", CANDIDATES, reference=REFERENCE),
        dialogue_item("r2", CANDIDATES, reference="Rex the beagle, of course."),
        dialogue_item("no-ref", CANDIDATES),
    ]


def test_metrics_are_computed_without_a_provider_call(harness: Harness) -> None:
    run_id = harness.run(
        items=items(), rubrics=["rsum-single"], judges=[harness.judge("openai-compatible")], aspects=["consistency"]
    )
    rows = harness.rows(run_id)
    metric_rows = [r for r in rows if r.judge == "reference"]
    judge_rows = [r for r in rows if r.judge != "reference"]
    # two items with a reference x two candidates x three default metrics; the item without one gets none
    assert len(metric_rows) == 2 * 2 * 3 and {r.item_key for r in metric_rows} == {"r1", "r2"}
    assert len(judge_rows) == 3 * 2
    assert harness.calls() == 2  # the items share their prompts (one call per candidate, the rest cached)
    for row in metric_rows:
        reference = {i["id"]: i.get("reference", "") for i in items()}[row.item_key]
        expected = lexical_metrics(CANDIDATES[row.system_a], reference)[row.aspect]
        assert row.status == "done" and row.score == pytest.approx(expected)
        assert row.provider_calls == 0 and row.cost_usd == 0 and row.rubric_id == "reference-metrics"
    gold_f1 = next(r.score for r in metric_rows if (r.item_key, r.system_a, r.aspect) == ("r1", "gold", "f1"))
    off_f1 = next(r.score for r in metric_rows if (r.item_key, r.system_a, r.aspect) == ("r1", "off", "f1"))
    assert gold_f1 is not None and off_f1 is not None
    assert gold_f1 > 0.8 > 0.2 > off_f1  # the marker <<q=90>> is three extra tokens for "gold"

    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
        versions = repository.rubric_versions(session, "default", "reference-metrics")
    assert [v.version for v in versions] == ["parlai-nltk-1"]  # the definitions are stored with the run
    report = build_report(frame, n_boot=50)
    table = report["paper_table"]
    assert table["metrics"] == ["f1", "bleu-1", "bleu-2"] and table["aspects"] == ["consistency"]
    gold = next(r for r in table["rows"] if r["system"] == "gold")
    assert gold["metrics"]["f1"] == pytest.approx(
        (
            lexical_metrics(CANDIDATES["gold"], REFERENCE)["f1"]
            + lexical_metrics(CANDIDATES["gold"], "Rex the beagle, of course.")["f1"]
        )
        / 2
    )
    assert gold["judge"] != "reference" and "average" in gold
    scores = {(r["system"], r["aspect"], r["judge"]): r for r in report["scores"]}
    assert scores["gold", "f1", "reference"]["ci_low"] is not None  # bootstrap CI over items
    assert (scores["gold", "f1", "reference"]["scale_min"], scores["gold", "f1", "reference"]["scale_max"]) == (0, 1)
    assert any(r["judge"] == "reference" and r["aspect"] == "f1" for r in report["paired"])
    assert "reference" not in report["bias"]["per_judge"]
    assert "F1" in report_to_table(report) and "BLEU-2" in report_to_table(report)


def test_pairwise_runs_and_opting_out(harness: Harness) -> None:
    run_id = harness.run(
        items=items(),
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        metrics=["f1"],
    )
    assert sorted({(r.judge, r.aspect) for r in harness.rows(run_id) if r.mode == "single"}) == [("reference", "f1")]
    none = harness.run(
        items=items(),
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
        metrics=[],
    )
    assert not [r for r in harness.rows(none) if r.judge == "reference"]


def test_bertscore_needs_a_local_model(harness: Harness, tmp_path) -> None:
    request = RunCreate.model_validate(
        {
            "items": items(),
            "rubrics": ["rsum-single"],
            "judges": [harness.judge("openai-compatible")],
            "metrics": ["f1", "bertscore"],
        }
    )
    with pytest.raises(PlanError) as error:
        plan_run(request, get_registry(), 1000)
    assert error.value.field == "metrics[1]" and "DJ_BERTSCORE_MODEL" in error.value.message
    # configured on the service but not usable on the worker: the judgment fails, saying why; nothing downloads
    harness.build(DJ_BERTSCORE_MODEL=str(tmp_path / "no-such-model"), DJ_BERTSCORE_LAYERS="4")
    run_id = harness.run(
        items=items()[:1],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
        metrics=["bertscore"],
    )
    (row, *_) = [r for r in harness.rows(run_id) if r.judge == "reference"]
    assert row.status == "failed" and row.error is not None
    assert "not a local model directory" in row.error and "never downloads" in row.error


def test_a_reference_only_run_has_no_rubric_no_call_and_no_cost(harness: Harness) -> None:
    """Issue 26.1: judges ['reference'] and no rubric is a run of the reference metrics alone (old: a 422)."""
    run_id = harness.run(items=items(), judges=["reference"], metrics=["f1", "bleu-1"])
    rows = harness.rows(run_id)
    assert len(rows) == 2 * 2 * 2 and {r.judge for r in rows} == {"reference"}  # items with a reference x systems
    assert all(r.status == "done" and r.provider_calls == 0 and r.cost_usd == 0 for r in rows)
    assert harness.calls() == 0
    gold = next(r for r in rows if (r.item_key, r.system_a, r.aspect) == ("r1", "gold", "f1"))
    assert gold.score == pytest.approx(lexical_metrics(CANDIDATES["gold"], REFERENCE)["f1"])
    with session_scope() as session:
        report = build_report(repository.judgments_frame(session, run_id), n_boot=50)
    assert report["paper_table"]["metrics"] == ["f1", "bleu-1"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"judges": ["reference", "openai:gpt-4o"]}, "judges: 'reference' (the reference metrics) stands alone"),
        ({"judges": ["reference"], "rubrics": ["rsum-single"]}, "rubrics: judges ['reference'] computes"),
        ({"judges": ["reference"], "metrics": []}, "metrics: judges ['reference'] needs at least one"),
        ({"judges": ["openai:gpt-4o"]}, "rubrics: name at least one rubric, or use judges ['reference']"),
        ({"judges": ["reference"], "items": [dialogue_item("x", CANDIDATES)]}, "items: reference metrics need"),
    ],
)
def test_reference_only_runs_refuse_what_they_cannot_do(body: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RunCreate.model_validate({"items": items(), **body}).model_dump()
