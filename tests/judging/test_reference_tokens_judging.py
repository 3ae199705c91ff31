"""The reference metrics' ``tokenize`` option through the judging engine and the report (issue 26.5): ``auto`` scores
a Chinese item with character tokens and an English one with ParlAI's, each judgment's version names its tokens,
and the report (API JSON, table, Markdown) warns when most references are CJK and whitespace tokens were used."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from judge_api import repository
from judge_api.app import create_app
from judge_api.config import reset_settings_cache
from judge_api.db import session_scope
from judge_api.planning import plan_reference_metrics, run_rubrics
from judge_api.reference_metrics import lexical_metrics
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from judge_api.stats.render import report_to_markdown, report_to_table

from .harness import Harness, dialogue_item

CHAR, WHITESPACE = "parlai-nltk-1.tok-char", "parlai-nltk-1"
ENGLISH_REFERENCE = "Yes, your beagle is called Rex!"
ENGLISH = {"gold": "Yes, your beagle is called Rex!", "off": "I like cats a lot."}
# by hand (char tokens): 我不喜欢苹果 vs 我喜欢吃苹果 share 我 喜 欢 苹 果, 5 of 6 each way
CHINESE_REFERENCE, CHINESE = "我喜欢吃苹果。", {"gold": "我不喜欢苹果！", "off": "今天天气很好。"}
JAPANESE_REFERENCE, JAPANESE = "東京に行きました", {"gold": "京都に行きたい", "off": "猫が好きです"}


def items() -> list[dict[str, Any]]:
    return [
        dialogue_item("zh", CHINESE, reference=CHINESE_REFERENCE),
        dialogue_item("ja", JAPANESE, reference=JAPANESE_REFERENCE),
        dialogue_item("en", ENGLISH, reference=ENGLISH_REFERENCE),
    ]


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    harness.build()  # migrates the database the API then opens
    reset_settings_cache()
    with TestClient(create_app()) as client:
        yield client


def _report(api: TestClient, run_id: str) -> dict[str, Any]:
    response = api.get(f"/v1/runs/{run_id}/report", params={"n_boot": 20})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_auto_scores_cjk_items_with_characters_and_english_with_parlais_tokens(
    harness: Harness, api: TestClient
) -> None:
    run_id = harness.run(items=items(), judges=["reference"], metrics=["f1", "bleu-1", "bleu-2"])
    rows = {(r.item_key, r.system_a, r.aspect): r for r in harness.rows(run_id)}
    assert len(rows) == 3 * 2 * 3 and all(r.status == "done" for r in rows.values())
    assert {r.rubric_version for (item, _, _), r in rows.items() if item in ("zh", "ja")} == {CHAR}
    assert {r.rubric_version for (item, _, _), r in rows.items() if item == "en"} == {WHITESPACE}
    assert rows["zh", "gold", "f1"].score == pytest.approx(5 / 6, rel=1e-12)
    assert rows["zh", "gold", "bleu-2"].score == pytest.approx(math.sqrt(5 / 6 * 2 / 5), rel=1e-12)
    assert rows["ja", "gold", "f1"].score == pytest.approx(2 / 3, rel=1e-12)
    for system, text in ENGLISH.items():  # ParlAI's figures, bit for bit
        expected = lexical_metrics(text, ENGLISH_REFERENCE, tokenize="whitespace")
        assert {m: rows["en", system, m].score for m in expected} == expected
    with session_scope() as session:
        versions = [v.version for v in repository.rubric_versions(session, "default", "reference-metrics")]
    assert sorted(versions) == [WHITESPACE, CHAR]  # both definitions stored with the run

    report = _report(api, run_id)
    section = report["reference_metrics"]
    assert section["tokenize"] == "auto" and section["warning"] is None
    assert section["by_tokenisation"] == {
        "whitespace": {"n_items": 1, "n_unspaced": 0},
        "char": {"n_items": 2, "n_unspaced": 2},
    }
    table, markdown = report_to_table(report), report_to_markdown(report)
    assert "WARNING" not in table and "Warning" not in markdown
    assert "Reference metric tokens (tokenize: auto)" in table and CHAR in table


def test_whitespace_on_cjk_references_is_warned_about(harness: Harness, api: TestClient) -> None:
    run_id = harness.run(items=items(), judges=["reference"], metrics=["f1"], tokenize="whitespace")
    rows = {(r.item_key, r.system_a): r for r in harness.rows(run_id)}
    assert {r.rubric_version for r in rows.values()} == {WHITESPACE}
    assert rows["zh", "gold"].score == 0.0  # one token each side, and they differ
    report = _report(api, run_id)
    warning = report["reference_metrics"]["warning"]
    assert warning is not None and "2 of 3 references are mostly CJK" in warning
    assert report_to_table(report).startswith(f"WARNING: {warning}\n")
    assert f"> **Warning:** {warning}" in report_to_markdown(report)


def test_an_english_run_has_the_section_and_no_warning(harness: Harness, api: TestClient) -> None:
    run_id = harness.run(items=items()[2:], judges=["reference"], metrics=["f1"], tokenize="whitespace")
    section = _report(api, run_id)["reference_metrics"]
    assert section["warning"] is None and section["by_tokenisation"]["whitespace"] == {"n_items": 1, "n_unspaced": 0}


def test_bertscore_keeps_the_base_version_and_char_applies_to_every_item() -> None:
    request = RunCreate.model_validate(
        {"items": items(), "judges": ["reference"], "metrics": ["f1", "bertscore"], "tokenize": "char"}
    )
    planned = plan_reference_metrics(request)
    assert {(p.aspect, p.rubric_version) for p in planned} == {("f1", CHAR), ("bertscore", WHITESPACE)}
    assert sorted(r.version for r in run_rubrics(request, get_registry())) == [WHITESPACE, CHAR]
