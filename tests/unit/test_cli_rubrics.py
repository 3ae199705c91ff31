"""`dialogue-judge rubrics`: the shipped rubrics, a user's rubric folder, and a broken one reported (exit 2)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from judge_api.config import REPO_ROOT, reset_settings_cache
from judge_api.rubrics import get_registry

SHIPPED = [
    "dj-consistency",
    "fact-check",
    "fact-extract",
    "geval-consistency",
    "memochat-consistency",
    "memory-audit",
    "memory-faithfulness",
    "mtbench-pair-v2",
    "rsum-pairwise",
    "rsum-single",
    "smoke-consistency",
]


@pytest.fixture
def rubric_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DJ_RUBRICS_PATH", str(tmp_path))
    reset_settings_cache()
    yield tmp_path
    reset_settings_cache()
    get_registry(refresh=True)


def test_lists_shipped_and_user_rubrics(rubric_dir: Path) -> None:
    mine = rubric_dir / "my-consistency"
    shutil.copytree(REPO_ROOT / "rubrics" / "rsum-single", mine)
    config = (mine / "rubric.yaml").read_text().replace("id: rsum-single", "id: my-consistency")
    (mine / "rubric.yaml").write_text(config)
    result = CliRunner().invoke(app, ["rubrics"])
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert listed == sorted([*SHIPPED, "my-consistency"])


def test_a_broken_rubric_is_reported_and_exits_2(rubric_dir: Path) -> None:
    broken = rubric_dir / "broken"
    broken.mkdir()
    (broken / "rubric.yaml").write_text("id: broken\nkind: single\n")
    result = CliRunner().invoke(app, ["rubrics"])
    assert result.exit_code == 2
    assert "skipped broken" in result.stderr and "rsum-single" in result.stdout


def test_cacheable_prefix_is_shown(rubric_dir: Path) -> None:
    """A rubric whose template puts the candidate before the history cannot share a prefix (issue 24 item 2)."""
    first = rubric_dir / "candidate-first"
    shutil.copytree(REPO_ROOT / "rubrics" / "rsum-single", first)
    config = (first / "rubric.yaml").read_text().replace("id: rsum-single", "id: candidate-first")
    (first / "rubric.yaml").write_text(config)
    (first / "prompt.j2").write_text(
        "Assistant Response: {{ response }}\nConversation Context:{{ dialog }} Personality:{{ persona }}\n"
        "Rate it [[rating]]."
    )
    result = CliRunner().invoke(app, ["rubrics"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert lines["candidate-first"].endswith("cacheable prefix: none")
    assert lines["memochat-consistency"].endswith("cacheable prefix: history")
    assert lines["rsum-single"].endswith("cacheable prefix: history")
