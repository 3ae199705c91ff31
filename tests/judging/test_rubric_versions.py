"""Rubric versions: a run keeps the rubric version it was planned with. Editing or deleting the rubric's folder
while the run is in flight changes nothing for it (the version is stored with the run); a new run gets the new
version; a version that is neither stored nor in the folders fails its judgments with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.models import Judgment, RubricSnapshot
from judge_api.rubrics import get_registry

from .harness import Harness, dialogue_item

REPO = Path(__file__).resolve().parents[2]
OLD_LINE = "You are an impartial judge."
NEW_LINE = "You are a fair and careful judge."


@pytest.fixture
def user_rubric(harness: Harness, tmp_path: Path) -> Path:
    """A copy of rsum-single under its own id, ``my-rubric``, in a user rubric folder the engine reads."""
    folder = tmp_path / "rubrics" / "my-rubric"
    shutil.copytree(REPO / "rubrics" / "rsum-single", folder)
    config = folder / "rubric.yaml"
    config.write_text(config.read_text().replace("id: rsum-single", "id: my-rubric"))
    harness.build(DJ_RUBRICS_PATH=str(folder.parent))
    assert OLD_LINE in (folder / "prompt.j2").read_text()
    return folder


def request(harness: Harness, n: int = 3) -> dict[str, Any]:
    return {
        "items": [dialogue_item(f"i{k}", {"a": f"Rex is {k}. <<q={40 + k}>>"}) for k in range(n)],
        "rubrics": ["my-rubric"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
    }


def edit(folder: Path) -> None:
    prompt = folder / "prompt.j2"
    prompt.write_text(prompt.read_text().replace(OLD_LINE, NEW_LINE))


def system_prompts(harness: Harness) -> list[str]:
    return [r["body"]["messages"][0]["content"] for r in harness.sim.requests(100)]


def test_a_run_keeps_its_version_when_the_rubric_is_edited_in_flight(harness: Harness, user_rubric: Path) -> None:
    planned = harness.create(**request(harness))
    old_version = get_registry(refresh=True).get("my-rubric").version
    edit(user_rubric)
    new_version = get_registry(refresh=True).get("my-rubric").version
    assert new_version != old_version

    harness.judge_all(planned)
    rows = harness.rows(planned)
    assert [r.status for r in rows] == ["done"] * 3, [r.error for r in rows]
    assert {r.rubric_version for r in rows} == {old_version}
    prompts = system_prompts(harness)
    assert len(prompts) == 3 and all(OLD_LINE in p and NEW_LINE not in p for p in prompts)

    # a run planned after the edit is asked with the new text, under the new version
    harness.sim.reset()
    later = harness.run(**request(harness, 1))
    assert {r.rubric_version for r in harness.rows(later)} == {new_version}
    assert all(NEW_LINE in p for p in system_prompts(harness))
    with session_scope() as session:
        stored = set(session.execute(select(RubricSnapshot.rubric_id, RubricSnapshot.version)).tuples())
    assert stored == {("my-rubric", old_version), ("my-rubric", new_version)}


def test_a_fresh_worker_finishes_a_run_whose_rubric_folder_was_deleted(harness: Harness, user_rubric: Path) -> None:
    planned = harness.create(**request(harness))
    version = get_registry(refresh=True).get("my-rubric").version
    shutil.rmtree(user_rubric)
    engine = harness.build()  # a worker started after the deletion: it never saw the folder
    assert "my-rubric" not in engine.registry

    assert set(harness.judge_all(planned, engine=engine)) == {"done"}
    rows = harness.rows(planned)
    assert all(r.status == "done" and r.rubric_version == version for r in rows)
    assert all(OLD_LINE in p for p in system_prompts(harness))
    # a new run cannot use the deleted rubric: it is rejected at planning, not failed later
    with pytest.raises(Exception, match="unknown rubric 'my-rubric'"):
        harness.create(**request(harness))


def test_a_version_neither_stored_nor_in_the_folders_fails_with_the_reason(harness: Harness, user_rubric: Path) -> None:
    planned = harness.create(**request(harness, 2))
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == planned).values(rubric_version="0123456789abcdef"))
        session.commit()
    assert set(harness.judge_all(planned)) == {"failed"}
    for row in harness.rows(planned):
        assert "version 0123456789abcdef is not stored" in (row.error or "")
        assert "re-submit the run" in (row.error or "")
    assert harness.calls() == 0

    # the folder deleted as well: the reason says the rubric is gone
    more = harness.create(**request(harness, 1))
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == more).values(rubric_version="fedcba9876543210"))
        session.commit()
    shutil.rmtree(user_rubric)
    assert harness.judge_all(more) == ["failed"]
    assert "unknown rubric 'my-rubric'" in (harness.rows(more)[0].error or "")
