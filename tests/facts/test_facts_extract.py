"""Fact extraction with a judge (issue 15, item 1): the fact-extract rubric, its strict parser and deterministic fact
ids, the simulator's scripted extraction (``<<x>>``, ``<<x=TEXT>>``, ``<<x@SOURCE>>``, ``<<x!>>``), and
``dialogue-judge facts extract`` (exact sheets, cache hit on rerun, failures, bad input), then fact-check judging of
its output with the planted contradiction rate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.gate.standalone import InProcessRunner, run_in_process
from judge_api.facts import extracted_fact_id, extraction_sources, fact_sheet
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from judge_simulator.behaviour import JudgeRequest, judge
from judge_simulator.process import SimulatorProcess
from judge_simulator.script import Script
from workers.parsing import parse_reply
from workers.prompting import parse_context, render

MEMORY = "User has two dogs<<x>>. Bot is a nurse<<x=The bot works as a nurse.>> and likes tea<<x>>."
DIALOGUE = [
    {"speaker": "user", "text": "Hi! I live in Oslo<<x=The user lives in Oslo.>>.", "session": 1},
    {"speaker": "bot", "text": "Nice to meet you.", "session": 1},
    {"speaker": "user", "text": "My sister is a pilot<<x>>.", "session": 2},
    {"speaker": "bot", "text": "How are your dogs?", "session": 3},
]
PERSONA = {"user": ["I have two dogs."], "bot": ["I am a nurse."]}


def item(**changes: Any) -> dict[str, Any]:
    base = {"id": "a", "dialogue": DIALOGUE, "persona": PERSONA, "memory": MEMORY, "candidates": {"v1": "Hello."}}
    return {**base, **changes}


@pytest.fixture(scope="module")
def rubric() -> Any:
    return get_registry(refresh=True).get("fact-extract")


def extract(rubric: Any, it: dict[str, Any]) -> Any:
    prompt = render(rubric, it, "facts", "-")
    reply = judge(Script(), JudgeRequest(model="sim", prompt=prompt.text))
    assert reply.rule == "fact-extract"
    return parse_reply(reply.text, rubric, context=parse_context(rubric, it, "-"))


def test_rubric_is_data_with_its_origin(rubric: Any) -> None:
    assert rubric.kind == "facts" and rubric.parser == "fact_extract" and rubric.scale == (1, 100)
    origin = rubric.origin or ""
    assert "The paper's" in origin and "This project's own" in origin


@pytest.mark.parametrize(
    ("it", "expected"),
    [
        (
            item(),
            [
                ("memory", "", MEMORY),
                ("session 1 turn 1", "user", DIALOGUE[0]["text"]),
                ("session 1 turn 2", "bot", "Nice to meet you."),
                ("session 2 turn 1", "user", "My sister is a pilot<<x>>."),
            ],
        ),
        (item(memory=None, dialogue=[{"speaker": "user", "text": "hi"}]), []),  # no sessions: nothing earlier
        (item(memory="  ", dialogue=DIALOGUE[3:]), []),  # only the current session, blank memory
        (
            item(memory=None, dialogue=[{"speaker": "bot", "text": " ", "session": 1}, *DIALOGUE[1:2], DIALOGUE[3]]),
            [("session 1 turn 2", "bot", "Nice to meet you.")],  # a blank turn counts its position, is left out
        ),
    ],
)
def test_extraction_sources(it: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert [(s["source"], s["speaker"], s["text"]) for s in extraction_sources(it)] == expected


@pytest.mark.parametrize(
    ("source", "k", "fact_id"),
    [("memory", 3, "mem.3"), ("session 1 turn 2", 1, "s1.t2.1"), ("session 12 turn 30", 4, "s12.t30.4")],
)
def test_fact_ids(source: str, k: int, fact_id: str) -> None:
    assert extracted_fact_id(source, k) == fact_id


def test_scripted_extraction_gives_the_exact_sheet(rubric: Any) -> None:
    parsed = extract(rubric, item())
    assert parsed.ok, parsed.error
    assert [(f["id"], f["text"], f["source"], f["quote"]) for f in parsed.details["extracted"]] == [
        ("mem.1", "User has two dogs", "memory", "User has two dogs"),
        ("mem.2", "The bot works as a nurse.", "memory", "Bot is a nurse"),
        ("mem.3", "and likes tea", "memory", "and likes tea"),
        ("s1.t1.1", "The user lives in Oslo.", "session 1 turn 1", "I live in Oslo"),
        ("s2.t1.1", "My sister is a pilot", "session 2 turn 1", "My sister is a pilot"),
    ]
    assert parsed.details["n_facts"] == 5 and parsed.score == 5


def test_ids_follow_the_sources_not_the_reply_order(rubric: Any) -> None:
    it = item(memory="User has two dogs.", dialogue=DIALOGUE[:1] + DIALOGUE[3:])
    reply = json.dumps(
        {
            "facts": [
                {"text": "The user lives in Oslo.", "source": "session 1 turn 1", "quote": "live in OSLO"},
                {"text": "The user has two dogs.", "source": "memory", "quote": "two  dogs"},
                {"text": "The user has dogs.", "source": "memory", "quote": "has two"},
            ]
        }
    )
    parsed = parse_reply(reply, rubric, context=parse_context(rubric, it, "-"))
    assert parsed.ok, parsed.error
    assert [(f["id"], f["text"]) for f in parsed.details["extracted"]] == [
        ("mem.1", "The user has two dogs."),
        ("mem.2", "The user has dogs."),
        ("s1.t1.1", "The user lives in Oslo."),
    ]


@pytest.mark.parametrize(
    ("memory", "error"),
    [
        ("User has two dogs<<x!>>.", "facts[0]: the quote is not in memory: 'a quote the source does not contain'"),
        ("User has two dogs<<x@session 9 turn 1>>.", "facts[0]: source 'session 9 turn 1' does not exist in the item"),
        ("User has two dogs<<x@session 1 turn 1>>.", "facts[0]: the quote is not in session 1 turn 1"),
        ("User has two dogs<<x=>>.", "facts[0]: 'text' is empty"),
        ("Dogs<<x>>. Dogs<<x>>.", "facts[1]: the fact 'Dogs' of memory is listed twice"),
    ],
)
def test_planted_parse_errors(rubric: Any, memory: str, error: str) -> None:
    parsed = extract(rubric, item(memory=memory, dialogue=DIALOGUE[:1] + DIALOGUE[3:]))
    assert not parsed.ok and error in (parsed.error or ""), parsed.error


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("no json", "no JSON object"),
        ('{"facts": "dogs"}', "'facts' must be a list"),
        ('{"facts": ["dogs"]}', "facts[0] is not an object"),
        ('{"facts": [{"text": " ", "source": "memory", "quote": "dogs"}]}', "facts[0]: 'text' is empty"),
        ('{"facts": [{"text": "Dogs.", "source": "persona.user", "quote": "dogs"}]}', "source 'persona.user' does not"),
        ('{"facts": [{"text": "Dogs.", "source": "memory"}]}', "facts[0]: 'quote' is empty (it must quote memory)"),
        ('{"facts": [{"text": "Dogs.", "source": "memory", "quote": "cats"}]}', "the quote is not in memory: 'cats'"),
        ('{"facts": [{"text": "' + "x" * 4001 + '", "source": "memory", "quote": "dogs"}]}', "longer than 4000"),
    ],
)
def test_strict_parser_refuses(rubric: Any, reply: str, error: str) -> None:
    it = item(memory="User has two dogs.", dialogue=DIALOGUE[3:])
    parsed = parse_reply(reply, rubric, context=parse_context(rubric, it, "-"))
    assert not parsed.ok and error in (parsed.error or ""), parsed.error


def test_an_empty_list_is_an_answer(rubric: Any) -> None:
    it = item(memory="Nothing here.", dialogue=DIALOGUE[3:])
    parsed = parse_reply('{"facts": []}', rubric, context=parse_context(rubric, it, "-"))
    assert parsed.ok and parsed.details == {"extracted": [], "n_facts": 0}


# -- dialogue-judge facts extract ----------------------------------------------------------------------------------

EXPLICIT = [{"id": "dogs", "text": "The user has two dogs.", "source": "session 1"}]


def cli_items() -> list[dict[str, Any]]:
    return [
        item(id="a"),
        item(id="b", memory="User plays chess<<x>>.", dialogue=DIALOGUE[3:], facts=EXPLICIT),
        item(id="c", memory=None, dialogue=DIALOGUE[3:], meta={"topic": "none"}),  # nothing to extract from
    ]


def write(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def extract_args(sim: SimulatorProcess, src: Path, out: Path, tmp_path: Path) -> list[str]:
    judge_spec = f"openai-compatible:sim-judge@{sim.base_url}"
    return ["facts", "extract", str(src), "--judge", judge_spec, "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]


def test_cli_extracts_exact_sheets_and_reruns_from_the_cache(
    sim: SimulatorProcess, settings_env: pytest.MonkeyPatch, tmp_path: Path, rubric: Any
) -> None:
    src, out = write(tmp_path / "items.jsonl", cli_items()), tmp_path / "out" / "facts.jsonl"
    result = CliRunner().invoke(app, extract_args(sim, src, out, tmp_path))
    assert result.exit_code == 0, result.output
    assert sim.stats()["total_calls"] == 2  # items a and b; c has no sources
    a, b, c = read(out)
    assert [(f["id"], f["text"], f["source"]) for f in a["facts"]] == [
        ("user.1", "I have two dogs.", "persona.user"),
        ("bot.1", "I am a nurse.", "persona.bot"),
        ("mem.1", "User has two dogs", "memory"),
        ("mem.2", "The bot works as a nurse.", "memory"),
        ("mem.3", "and likes tea", "memory"),
        ("s1.t1.1", "The user lives in Oslo.", "session 1 turn 1"),
        ("s2.t1.1", "My sister is a pilot", "session 2 turn 1"),
    ]
    extraction = a["meta"]["facts_extraction"]
    assert extraction["base"] == "persona" and (extraction["n_base"], extraction["n_extracted"]) == (2, 5)
    assert extraction["status"] == "done" and extraction["rubric"] == "fact-extract"
    assert extraction["rubric_version"] == rubric.version and extraction["quotes"]["mem.2"] == "Bot is a nurse"
    # explicit facts are kept as they are (the persona is not added), the extracted ones follow, and it says so
    assert b["facts"] == [*EXPLICIT, {"id": "mem.1", "text": "User plays chess", "source": "memory"}]
    assert b["meta"]["facts_extraction"]["base"] == "explicit"
    assert [f["id"] for f in c["facts"]] == ["user.1", "bot.1"] and c["meta"]["topic"] == "none"
    assert c["meta"]["facts_extraction"]["status"] == "no sources"
    assert {k: a[k] for k in ("id", "dialogue", "persona", "memory", "candidates")} == {
        k: cli_items()[0][k] for k in ("id", "dialogue", "persona", "memory", "candidates")
    }
    first = out.read_text()

    again = CliRunner().invoke(app, extract_args(sim, src, out, tmp_path))  # a rerun: no judge call
    assert again.exit_code == 0, again.output
    assert sim.stats()["total_calls"] == 2
    assert out.read_text() == first and "(2 from the cache)" in again.stderr


def test_cli_output_goes_through_fact_check_with_the_planted_contradiction_rate(
    sim: SimulatorProcess, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    responses = {  # per item: v1 supports the extracted facts, v2 contradicts one of the four facts
        "a": {"v1": "Your dogs <<f:mem.1=s>> are fine.", "v2": "You have no pets <<f:mem.1=c>>."},
        "b": {"v1": "Oslo is lovely <<f:s1.t1.1=s>>.", "v2": "Enjoy Bergen, your home <<f:s1.t1.1=c>>."},
    }
    items = [
        item(id="a", memory="User has two dogs<<x>>. User likes tea<<x>>.", dialogue=DIALOGUE[3:]),
        item(id="b", memory="User sails<<x>>.", dialogue=DIALOGUE[:1] + DIALOGUE[3:]),
    ]
    items = [{**it, "candidates": responses[it["id"]]} for it in items]
    src, out = write(tmp_path / "items.jsonl", items), tmp_path / "facts.jsonl"
    result = CliRunner().invoke(app, extract_args(sim, src, out, tmp_path))
    assert result.exit_code == 0, result.output
    extracted = read(out)
    assert [len(fact_sheet(it)) for it in extracted] == [4, 4]
    request = RunCreate.model_validate(  # what `dialogue-judge submit --rubric fact-check` sends, unchanged items
        {"items": extracted, "rubrics": ["fact-check"], "judges": [f"openai-compatible:sim-judge@{sim.base_url}"]}
    )
    with InProcessRunner(None, workers=2) as runner:
        run_id = run_in_process(request, runner=runner, progress=False)
        judgments = runner.judgments(run_id)
    assert {j["status"] for j in judgments} == {"done"} and len(judgments) == 4
    rates: dict[str, list[float]] = {}
    for j in judgments:
        rates.setdefault(j["system_a"], []).append(j["details"]["contradiction_rate"])
    assert {s: sum(r) / len(r) for s, r in rates.items()} == {"v1": 0.0, "v2": 0.25}
    labels = {(j["item_id"], j["system_a"]): {f["id"]: f["label"] for f in j["details"]["facts"]} for j in judgments}
    assert labels["b", "v2"] == {
        "user.1": "not_addressed",
        "bot.1": "not_addressed",
        "mem.1": "not_addressed",
        "s1.t1.1": "contradicted",
    }


def test_cli_failures_exit_1_unless_allowed(
    sim: SimulatorProcess, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    items = [item(id="ok", memory="User sails<<x>>.", dialogue=DIALOGUE[3:]),
             item(id="bad", memory="User sails<<x!>>.", dialogue=DIALOGUE[3:])]  # fmt: skip
    src, out = write(tmp_path / "items.jsonl", items), tmp_path / "facts.jsonl"
    result = CliRunner().invoke(app, extract_args(sim, src, out, tmp_path))
    assert result.exit_code == 1, result.output
    assert "item bad: unparseable: facts[0]: the quote is not in memory" in result.stderr
    assert "1 of 2 extractions failed" in result.stderr and not out.exists()

    allowed = CliRunner().invoke(app, [*extract_args(sim, src, out, tmp_path), "--allow-failed"])
    assert allowed.exit_code == 0, allowed.output
    assert "warning: item bad: unparseable" in allowed.stderr
    ok, bad = read(out)
    assert [f["id"] for f in ok["facts"]] == ["user.1", "bot.1", "mem.1"]
    assert [f["id"] for f in bad["facts"]] == ["user.1", "bot.1"]
    assert bad["meta"]["facts_extraction"]["status"] == "unparseable"
    assert "the quote is not in memory" in bad["meta"]["facts_extraction"]["error"]


def test_cli_an_id_clash_with_explicit_facts_is_a_failure(
    sim: SimulatorProcess, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clash = [{"id": "mem.1", "text": "Something.", "source": "memory"}]
    src = write(tmp_path / "items.jsonl", [item(memory="User sails<<x>>.", dialogue=DIALOGUE[3:], facts=clash)])
    result = CliRunner().invoke(app, extract_args(sim, src, tmp_path / "o.jsonl", tmp_path))
    assert result.exit_code == 1 and "item a: refused: extracted fact id 'mem.1' is already a fact" in result.stderr


@pytest.mark.parametrize(
    ("items", "extra", "message"),
    [
        (None, ["--rubric", "fact-check"], "is not a fact-extract rubric"),
        (None, ["--rubric", "no-such-rubric"], "--rubric"),
        ([{"candidates": {"s": "hi"}}], [], "item 0: id: Field required"),
        ([{"id": "a", "candidates": {"s": 5}}], [], "item 0: candidates.s"),
        ([item(id="a"), item(id="a")], [], "item 1: id: duplicate item id 'a'"),
        ("missing", [], "no such file"),
        (None, ["--judge", "nosuchprovider:x"], "--judge: judge 'nosuchprovider:x': unknown provider"),
        ([item(memory=None, dialogue=[])], ["--judge", "gpt-4o"], "--judge: judge 'gpt-4o' must look like"),
    ],
)
def test_cli_bad_input_exits_2(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, items: Any, extra: list[str], message: str
) -> None:
    src = tmp_path / "items.jsonl"
    if items != "missing":
        write(src, items or cli_items())
    out = tmp_path / "o.jsonl"
    args = ["facts", "extract", str(src), "--judge", "openai:gpt-4o", "-o", str(out), "--no-cache", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not out.exists()


def test_cli_with_nothing_to_extract_writes_the_persona_facts_without_a_call(
    settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # no memory and one session: nothing for the judge to read, so no run is made (the judge is unreachable)
    src = write(tmp_path / "items.jsonl", [item(memory=None, dialogue=DIALOGUE[-1:])])
    out = tmp_path / "o.jsonl"
    judge = "openai-compatible:sim@http://127.0.0.1:9/v1"
    result = CliRunner().invoke(app, ["facts", "extract", str(src), "--judge", judge, "-o", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    (written,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [f["id"] for f in written["facts"]] == ["user.1", "bot.1"]
    assert written["meta"]["facts_extraction"]["status"] == "no sources"
