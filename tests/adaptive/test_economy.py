"""What the status and the report say about an adaptive run."""

from __future__ import annotations

from typing import Any

from judge_api.adaptive.economy import economy, message
from judge_api.stats.render import report_to_markdown, report_to_table

PAIRING_CONFIG = {"pairing": "adaptive", "options": {"samples": 1}}
STATE: dict[str, Any] = {
    "finished": True,
    "round": 7,
    "pairing": {
        "stop": "separated",
        "stop_message": "every adjacent pair of the ranking is separated at the requested confidence",
        "confidence": 0.95,
        "top_k": None,
        "max_calls": None,
        "target": {"rubric_id": "mtbench-pair-v2", "aspect": "overall", "judge": "openai:gpt-4o"},
        "calls": 300,
        "round_robin_calls": 2400,
        "comparisons": 150,
        "round_robin_comparisons": 1200,
        "ranking": [
            {"system": "x", "rank": 1, "strength": 0.5, "ci_low": 0.2, "ci_high": 0.8, "comparisons": 100},
            {"system": "y", "rank": 2, "strength": -0.5, "ci_low": -0.8, "ci_high": -0.2, "comparisons": 100},
        ],
        "gaps": [{"upper": "x", "lower": "y", "diff": 1.0, "z": 3.5, "z_needed": 3.1, "separated": True}],
    },
    "samples": {
        "judgments": 300,
        "samples": 420,
        "fixed": 5,
        "fixed_samples": 1500,
        "saving": 0.72,
        "histogram": {"1": 250, "2": 30, "5": 20},
    },
}


def test_no_economy_for_a_fixed_run() -> None:
    assert economy({"pairing": "all", "options": {"samples": 3}}, None) is None
    assert message(None) is None


def test_before_the_first_step_nothing_is_measured_yet() -> None:
    before = economy(PAIRING_CONFIG, None)
    assert before is not None and not before.finished and before.pairing is None
    assert message(before) == "adaptive run: planning"


def test_economy_and_message_of_a_finished_run() -> None:
    config = {"pairing": "adaptive", "options": {"samples": "adaptive"}}
    out = economy(config, STATE)
    assert out is not None and out.pairing is not None and out.samples is not None
    assert out.pairing.share == 0.125 and out.rounds == 7
    text = message(out)
    assert text is not None
    assert "adaptive pairing stopped: every adjacent pair" in text and "(separated)" in text
    assert "300 of 2,400 round-robin calls (12.5 %)" in text and "x > y" in text
    assert "adaptive samples: 420 for 300 judgments (72.0 % fewer than 5 each)" in text
    # a fixed-sample run keeps only the pairing part
    assert economy(PAIRING_CONFIG, STATE).samples is None  # type: ignore[union-attr]


def test_report_renders_the_economy() -> None:
    out = economy({"pairing": "adaptive", "options": {"samples": "adaptive"}}, STATE)
    assert out is not None
    report = {"run": {"economy": out.model_dump(mode="json")}}
    table = report_to_table(report)
    assert "Adaptive pairing" in table and "separated" in table and "12.5%" in table and "150/1200" in table
    assert "[0.200, 0.800]" in table and "3.50 / 3.10" in table
    md = report_to_markdown(report)
    assert "## Adaptive samples" in md and "72.0%" in md and "1: 250, 2: 30, 5: 20" in md
    assert "Adaptive" not in report_to_table({"run": {"economy": None}})
