"""DJ_LOG_FORMAT=json: a judgment's log lines are JSON objects carrying its run id, judgment id, judge and attempt;
at INFO no line holds the prompt, the reply or a provider key."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from judge_api import logs
from judge_api.secrets import install_log_scrubber

from .harness import OPENAI_KEY, Harness, dialogue_item

SECRET_PROMPT = "my-very-private-dialogue-line-42"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logs.JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def captured() -> Iterator[Lines]:
    install_log_scrubber()
    handler = Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_the_judgment_and_never_the_prompt_or_key(harness: Harness, captured: Lines) -> None:
    # the first call answers 429 (a retry is logged), the third reply cannot be parsed (its outcome is logged)
    harness.sim.set_script(
        {
            "faults": [
                {"kind": "rate_limit", "first_n": 1, "retry_after": 1},
                {"kind": "malformed", "calls": [3], "text": "No idea."},
            ]
        }
    )
    judge = harness.judge("openai")
    items = [
        dialogue_item("u0", {"a": f"{SECRET_PROMPT} <<q=70>>"}),
        dialogue_item("u1", {"a": f"{SECRET_PROMPT} <<q=30>>"}),
    ]
    run_id = harness.run(items=items, rubrics=["rsum-single"], judges=[judge], aspects=["consistency"])
    rows = harness.rows(run_id)
    assert {r.status for r in rows} == {"done", "unparseable"}
    parsed = [json.loads(line) for line in captured.lines]  # every line is one JSON object
    mine = [p for p in parsed if p.get("run_id") == run_id]
    retry = [p for p in mine if "retry" in p["message"]]
    assert retry and retry[0]["attempt"] == 1 and retry[0]["judge"] == judge
    assert retry[0]["judgment_id"] in {r.id for r in rows}
    assert retry[0]["level"] == "INFO" and retry[0]["logger"] == "workers.execute"
    unparseable = next(r for r in rows if r.status == "unparseable")
    outcome = [p for p in mine if p.get("judgment_id") == unparseable.id and "unparseable" in p["message"]]
    assert outcome and outcome[0]["judge"] == judge
    everything = "\n".join(captured.lines)
    assert SECRET_PROMPT not in everything
    assert OPENAI_KEY not in everything
    assert "Rex" not in everything  # the dialogue's text


def test_configure_switches_handlers_to_json_and_text_leaves_them(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("uvicorn.access")
    handler = logging.StreamHandler()
    monkeypatch.setattr(logger, "handlers", [handler])
    logs.configure("text")
    assert not isinstance(handler.formatter, logs.JsonFormatter)
    root_handlers = list(logging.getLogger().handlers)
    try:
        logs.configure("json")
        assert isinstance(handler.formatter, logs.JsonFormatter)
    finally:
        for added in set(logging.getLogger().handlers) - set(root_handlers):
            logging.getLogger().removeHandler(added)
    with logs.context(run_id="run_x", judgment_id=7):
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
        line = json.loads(logs.JsonFormatter().format(record))
    assert line["message"] == "hello there" and line["run_id"] == "run_x" and line["judgment_id"] == 7
    assert "judge" not in line  # unset fields are left out
