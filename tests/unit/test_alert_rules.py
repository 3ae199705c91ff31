"""How a monitor's rule reads its verdict stream (judge_api/alerts.py), without a database: the stream stops at the
first unfinished judgment (so it only grows at its end), a version rule pairs the candidate after the stream's start
with the whole baseline, a time rule compares the current UTC window with the one before it in blocks, and a floor
rule reads its window."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from judge_api.alerts import Target, look_compare, look_floor, settled_prefix
from judge_api.schemas.monitors import AlertRule
from judge_api.stats.alerts import CompareEvidence

TARGET = Target("rsum-single", "consistency", "openai:gpt-4o", "mean", 1.0, 100.0)
NOW = datetime(2026, 11, 25, 12, 0)


def row(i: int, version: str, score: float | None, ts: datetime, status: str = "done") -> dict[str, Any]:
    return {
        "id": i,
        "status": status,
        "score": score,
        "contradiction_rate": None,
        "response_id": f"r{i}",
        "ts": ts,
        "system": "bot",
        "version": version,
        "segment": "",
    }


def test_the_stream_stops_at_the_first_unfinished_judgment() -> None:
    rows = [row(1, "v1", 70, NOW), row(2, "v2", None, NOW, "failed"), row(3, "v1", None, NOW, "pending")]
    rows.append(row(4, "v2", 10, NOW))
    assert [r["id"] for r in settled_prefix(rows)] == [1, 2]


def test_version_rule_pairs_the_candidate_after_the_start_with_all_of_the_baseline() -> None:
    rule = AlertRule.model_validate(
        {"name": "v", "compare": {"by": "version", "baseline": "v1", "candidate": "v2"}, "aspect": "consistency"}
    )
    rows = [row(i, "v1" if i % 2 else "v2", 80.0 if i % 2 else 40.0, NOW) for i in range(1, 201)]
    look = look_compare(rule, TARGET, rows, 0, NOW)
    assert look.evidence.decision == "regression" and look.evidence.n == 100 and look.last_id == 200
    assert look.evidence.difference == 40.0
    later = look_compare(rule, TARGET, rows, 150, NOW)  # the candidate after id 150, the baseline from the start
    assert isinstance(later.evidence, CompareEvidence)
    assert later.evidence.n_candidate == 25 and later.evidence.n_baseline == 100 and later.evidence.n == 25
    assert all(r["id"] > 150 and r["version"] == "v2" for r in later.used)


def test_time_rule_compares_the_current_utc_day_with_the_week_before_in_blocks() -> None:
    rule = AlertRule.model_validate(
        {"name": "t", "compare": {"by": "time", "candidate": "24h", "baseline": "7d"}, "aspect": "consistency"}
    )
    today = datetime(2026, 11, 25)
    rows: list[dict[str, Any]] = []
    for day in range(1, 9):  # 8 days back: the oldest is outside the baseline window
        for k in range(14):
            rows.append(
                row(len(rows) + 1, "v1", 90.0 if day == 8 else 70.0, today - timedelta(days=day) + timedelta(hours=k))
            )
    for k in range(3):
        rows.append(row(len(rows) + 1, "v1", 20.0, today + timedelta(hours=k)))
    look = look_compare(rule, TARGET, rows, 0, NOW)
    assert look.slices["block"] == 7
    assert look.slices["candidate"]["from"] == "2026-11-25T00:00:00Z"
    assert look.slices["baseline"]["from"] == "2026-11-18T00:00:00Z"
    assert isinstance(look.evidence, CompareEvidence)
    assert look.evidence.n_candidate == 3 and look.evidence.n_baseline == 7 * 14 and look.evidence.n == 3
    assert look.evidence.baseline_mean == 70.0 and look.evidence.difference == 50.0
    assert look.epoch == int((today - datetime(1970, 1, 1)).total_seconds() // 86400)


def test_floor_rule_reads_its_window() -> None:
    rule = AlertRule.model_validate(
        {"name": "f", "floor": {"below": 60, "min_n": 3, "window": "24h"}, "aspect": "consistency"}
    )
    rows = [row(1, "v1", 10.0, NOW - timedelta(days=2))] + [
        row(i, "v1", 55.0, NOW - timedelta(hours=i)) for i in (2, 3, 4)
    ]
    look = look_floor(rule, TARGET, rows, NOW)
    assert look.evidence.decision == "breach" and look.evidence.n == 3 and look.evidence.mean == 55.0
    rows.append(row(5, "v1", 95.0, NOW))
    assert look_floor(rule, TARGET, rows, NOW).evidence.decision == "ok"
