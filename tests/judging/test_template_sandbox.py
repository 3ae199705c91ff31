"""Issue 42, finding 1: a rubric template, whatever its source, renders in Jinja2's immutable sandbox. The classic
escapes (``lipsum.__globals__``, ``''.__class__.__mro__``, ``cycler.__init__.__globals__``, writes to an input)
raise TemplateRefused naming the SecurityError, and run nothing: the file they would write is never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge_api.rubrics import MessageTemplate, Rubric, get_registry
from workers.prompting import TemplateRefused, render
from workers.responders.pipeline import _env as strategy_env

from .harness import Harness, dialogue_item

ITEM = {
    "id": "i",
    "dialogue": [{"speaker": "user", "text": "Do you remember my dog?", "session": 1}],
    "candidates": {"a": "Rex."},
}


def escapes(target: Path) -> list[str]:
    """Templates that, unsandboxed, run ``id > target`` (or reach Python internals, or change an input in place)."""
    command = f"id > {target}"
    return [
        f"{{{{ lipsum.__globals__['os'].popen('{command}').read() }}}}",
        f"{{{{ cycler.__init__.__globals__.os.popen('{command}').read() }}}}",
        f"{{{{ joiner.__init__.__globals__['os'].system('{command}') }}}}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ (response|attr('__class__')).__mro__ }}",
        f"{{% for c in ''.__class__.__base__.__subclasses__() %}}{{% if c.__name__ == 'Popen' %}}"
        f"{{{{ c('{command}', shell=True) }}}}{{% endif %}}{{% endfor %}}",
        "{{ options.update({'temperature': 2}) }}",
        "{{ options.__setitem__('temperature', 2) }}",
        "{% set _ = options.pop('temperature', None) %}x",
        "{{ 'a' * 10**10 }}",  # not code, but a worker's memory
        "{{ [1] * 10**10 }}",
        "{{ 10 ** 10000000 }}",
    ]


def planted(source: str) -> Rubric:
    """A rubric as an imported snapshot would carry it: a known id's settings with a message of the attacker's."""
    rubric = get_registry().get("rsum-single")
    return rubric.model_copy(
        update={"id": "planted-rubric", "messages": [MessageTemplate(role="user", text=source)], "templates": {}},
        deep=True,
    )


@pytest.mark.parametrize("index", range(12))
def test_a_template_escape_is_refused_and_runs_nothing(tmp_path: Path, index: int) -> None:
    target = tmp_path / "owned"
    rubric = planted(escapes(target)[index])
    options_before = dict(rubric.options)
    with pytest.raises(TemplateRefused) as refused:
        render(rubric, ITEM, "consistency", "Rex.")
    assert "SecurityError" in str(refused.value) and "'planted-rubric'" in str(refused.value)
    assert not target.exists()
    assert rubric.options == options_before


def test_a_template_that_only_reads_its_inputs_still_renders() -> None:
    rubric = planted(
        "{{ aspect_label }} | {{ response }} | {{ options.get('temperature', 0) }} | {{ lipsum(1)[:0] }}"
        "{{ '-' * 3 }}{{ 2 ** 3 }}"
    )
    assert render(rubric, ITEM, "consistency", "Rex.").messages[0]["content"].endswith("---8")


def test_two_rubrics_claiming_one_id_and_version_never_share_a_compiled_template() -> None:
    honest, fake = planted("honest {{ response }}"), planted("fake {{ response }}")
    assert honest.version == fake.version and honest.id == fake.id
    assert render(honest, ITEM, "consistency", "x").messages[0]["content"] == "honest x"
    assert render(fake, ITEM, "consistency", "x").messages[0]["content"] == "fake x"


def test_strategy_templates_are_sandboxed_too(tmp_path: Path) -> None:
    target = tmp_path / "owned"
    template = strategy_env.from_string(escapes(target)[0])
    with pytest.raises(Exception) as refused:
        template.render(response="x")
    assert type(refused.value).__name__ == "SecurityError"
    assert not target.exists()


# -- through the worker: an imported bundle, stored without any import gate, judged by the real engine ---------------


def _bundle_with_planted_rubric(harness: Harness, source: str) -> tuple[str, list[str]]:
    """A real run's bundle (judged by the engine), rewritten to be judged again under a rubric of its own whose
    message is ``source``: its judgments pending, planned with the planted rubric id, its snapshot the planted one."""
    from judge_api.db import session_scope
    from judge_api.repository import retention

    run_id = harness.run(
        items=[dialogue_item("i0", {"a": "Rex. <<q=70>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    with session_scope() as session:
        lines = list(retention.export_run(session, run_id))
        retention.delete_run(session, run_id)
    rewritten = []
    for line in lines:
        record = json.loads(line)
        if record["record"] == "judgment":
            record.update(rubric_id="planted-rubric", status="pending", score=None, raw_output=None, cache_key=None)
        if record["record"] == "rubric_snapshot":
            record.update(rubric_id="planted-rubric")
            record["content"].update(id="planted-rubric", messages=[{"role": "user", "text": source}], templates={})
        if record["record"] != "cache_entry":
            rewritten.append(json.dumps(record))
    return run_id, rewritten


def test_an_imported_snapshot_with_a_template_escape_fails_its_judgment_and_runs_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    from judge_api.db import session_scope
    from judge_api.repository import retention

    target = tmp_path / "owned"
    harness.build()
    _, lines = _bundle_with_planted_rubric(harness, escapes(target)[0])
    with session_scope() as session:
        run_id = str(retention.import_run(session, retention.parse_bundle(lines), "default", None)["run_id"])
    harness.sim.reset()
    statuses = harness.judge_all(run_id)
    rows = harness.rows(run_id)
    assert statuses and [r.status for r in rows] == ["failed"] * len(rows)
    assert all("SecurityError" in (r.error or "") and "'planted-rubric'" in (r.error or "") for r in rows)
    assert all(r.score is None and r.preference is None for r in rows)
    assert harness.calls() == 0  # never asked
    assert not target.exists()
    assert harness.pending(run_id) == []  # recorded once, not retried
