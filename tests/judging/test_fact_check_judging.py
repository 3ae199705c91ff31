"""The fact-check rubric through the judge engine and the simulator over HTTP: labels, figures and the score are
stored per response, a planted parse error is unparseable with the raw reply, and a re-run is served from the cache
with the same labels."""

from __future__ import annotations

from .harness import Harness, dialogue_item


def test_fact_check_through_the_engine(harness: Harness) -> None:
    items = [
        dialogue_item(
            "f1",
            {
                "keeps": "How is Rex the beagle <<f:user.1=s>> doing?",
                "breaks": "How is your cat Rex <<f:user.1=c>>? I never liked animals <<f:bot.1=c>>.",
                "forged": "Rex <<f:user.1=s!>> is great.",
            },
        )
    ]
    run_id = harness.run(items=items, rubrics=["fact-check"], judges=[harness.judge("openai-compatible")])
    rows = {row.system_a: row for row in harness.rows(run_id)}
    keeps = rows["keeps"].details
    assert rows["keeps"].status == "done" and rows["keeps"].score == 100.0 and keeps is not None
    assert keeps["retention_rate"] == 1.0
    assert [(f["id"], f["label"]) for f in keeps["facts"]] == [
        ("user.1", "supported"),
        ("bot.1", "not_addressed"),
    ]
    breaks = rows["breaks"]
    assert breaks.status == "done" and breaks.score == 1.0 and breaks.details is not None
    assert breaks.details["contradiction_count"] == 2 and breaks.details["contradiction_rate"] == 1.0
    assert breaks.details["facts"][1]["evidence"] == "I never liked animals <<f:bot.1=c>>"
    forged = rows["forged"]
    assert forged.status == "unparseable" and forged.score is None
    assert "evidence for 'user.1' is not in the response" in (forged.error or "")
    assert "a quote the response does not contain" in (forged.raw_output or "")
    calls = harness.calls()

    again = harness.run(items=items, rubrics=["fact-check"], judges=[harness.judge("openai-compatible")])
    cached = {row.system_a: row for row in harness.rows(again)}
    assert harness.calls() == calls
    assert cached["breaks"].details == breaks.details and cached["forged"].status == "unparseable"
