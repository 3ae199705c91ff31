"""Each shipped paper rubric renders its paper's prompt exactly (the reference texts are read from
../shared/reference/prompts/); the registry loads user rubrics from DJ_RUBRICS_PATH, versions them by content and
refuses malformed ones with a clear RubricError."""

from __future__ import annotations

import ast
import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from judge_api.config import reset_settings_cache
from judge_api.rubrics import Rubric, RubricError, RubricRegistry, get_registry, load_rubric
from workers.prompting import render

# -- the fixture item and the documented context conventions --------------------------------------------------------

TURNS = [
    ("user", "Hi! I just got back from walking my beagle."),
    ("bot", "Lovely! What is your beagle called?"),
    ("user", "His name is Rex. He is three years old."),
    ("bot", "Rex is a great name for a beagle."),
    ("user", "Thanks. I also started learning the cello."),
    ("bot", "How are the lessons going?"),
    ("user", "Slowly, my teacher is patient though."),
    ("bot", "Patience is key with string instruments."),
    ("user", "True. Do you play anything?"),
    ("bot", "I used to play the piano a little."),
    ("user", "Nice. I might take Rex to the park later."),
    ("bot", "He will love that."),
    ("user", "Do you remember how old Rex is?"),
]
PERSONA = {"user": ["I have a beagle called Rex.", "I am learning the cello."], "bot": ["I played the piano."]}
RESPONSE_A = "Rex is three years old, and he probably loves the park."
RESPONSE_B = "I do not know your dog."
ITEM: dict[str, Any] = {
    "id": "msc-fixture",
    "dialogue": [{"speaker": s, "text": t} for s, t in TURNS],
    "persona": PERSONA,
    "candidates": {"a": RESPONSE_A, "b": RESPONSE_B},
    "meta": {"related_turns": [2, 3]},
}


def lines(turns: list[tuple[str, str]]) -> str:
    """Context convention: one 'speaker: text' line per utterance, most recent last."""
    return "\n".join(f"{speaker}: {text}" for speaker, text in turns)


LAST_10 = lines(TURNS[-10:])
PERSONA_TEXT = "user: I have a beagle called Rex. I am learning the cello.\nbot: I played the piano."
QUESTION = TURNS[-1][1]


# -- reference texts ------------------------------------------------------------------------------------------------


def between(text: str, begin: str, end: str = "\n----- END -----") -> str:
    start = text.index(begin) + len(begin)
    return text[start : text.index(end, start)]


@pytest.fixture(scope="module")
def prompts_dir(shared_dir: Path) -> Path:
    return shared_dir / "reference" / "prompts"


@pytest.fixture(scope="module")
def registry() -> RubricRegistry:
    return get_registry(refresh=True)


def rendered_text(rubric: Rubric, aspect: str, first: str, second: str | None = None) -> list[dict[str, str]]:
    return render(rubric, ITEM, aspect, first, second).messages


# aspect -> the "#..." paragraph of the reference that the official code puts in {condition}
RSUM_ASPECT_PARAGRAPH = {"engagingness": "#Fluency:", "consistency": "#Consistency:", "coherence": "#Coherency:"}


def rsum_single_expected(reference: str, aspect: str) -> str:
    """The documented transformation: keep only the judged aspect's '#...' paragraph, fill the placeholders."""
    ref_lines = reference.split("\n")
    starts = [i for i, line in enumerate(ref_lines) if line.startswith("#")]
    context = next(i for i, line in enumerate(ref_lines) if line.startswith("Conversation Context:"))
    bounds = [*starts, context]
    paragraphs = {ref_lines[a].split(" ")[0]: ref_lines[a:b] for a, b in itertools.pairwise(bounds)}
    kept = paragraphs[RSUM_ASPECT_PARAGRAPH[aspect]]
    text = "\n".join(ref_lines[: starts[0]] + kept + ref_lines[context:])
    return text.replace("[dialog]", LAST_10).replace("[persona]", PERSONA_TEXT).replace("[response]", RESPONSE_A)


@pytest.mark.parametrize("aspect", ["engagingness", "coherence", "consistency"])
def test_rsum_single_renders_the_paper_prompt(prompts_dir: Path, registry: RubricRegistry, aspect: str) -> None:
    reference = between(
        (prompts_dir / "rsum_single_model_eval_prompt.txt").read_text(), "----- BEGIN (de-LaTeXed) -----\n"
    )
    expected = rsum_single_expected(reference, aspect)
    assert rendered_text(registry.get("rsum-single"), aspect, RESPONSE_A) == [{"role": "user", "content": expected}]
    # the other aspects' paragraphs are gone, the paper's own format string is intact
    others = set(RSUM_ASPECT_PARAGRAPH.values()) - {RSUM_ASPECT_PARAGRAPH[aspect]}
    assert not any(p in expected for p in others) and expected.endswith("[[score]].")


@pytest.mark.parametrize("include_context", [False, True])
def test_rsum_pairwise_renders_the_paper_prompt(
    prompts_dir: Path, registry: RubricRegistry, include_context: bool
) -> None:
    reference = between(
        (prompts_dir / "rsum_pairwise_alpacafarm_style_prompt.txt").read_text(), "----- BEGIN (de-LaTeXed) -----\n"
    )
    expected = reference.replace("[response1]", RESPONSE_A).replace("[response2]", RESPONSE_B)
    if include_context:  # the one documented addition: the context line before "response 1:"
        context_line = f"Conversation Context:{LAST_10} Personality:{PERSONA_TEXT}\n"
        expected = expected.replace("\nresponse 1: ", "\n" + context_line + "response 1: ")
    rubric = registry.get("rsum-pairwise")
    assert rubric.options["include_context"] is True  # the shipped default
    rubric = rubric.model_copy(update={"options": {"include_context": include_context}})
    assert rendered_text(rubric, "overall", RESPONSE_A, RESPONSE_B) == [{"role": "user", "content": expected}]


def test_rsum_pairwise_reask_uses_the_official_extraction_prompt(prompts_dir: Path, registry: RubricRegistry) -> None:
    source = (prompts_dir / "rsum_winrate_verdict_extraction_prompt.txt").read_text()
    pre_defined = ast.literal_eval(re.search(r"^pre_defined = (\[.*\])$", source, re.M).group(1))  # type: ignore[union-attr]
    f_string = re.search(r'^input_str = f"(.*)"$', source, re.M).group(1)  # type: ignore[union-attr]
    judge_result = "Both are fine, the first a bit more so"
    expected = f_string.replace("{judge_result}", judge_result).replace("{pre_defined}", str(pre_defined))
    extraction = registry.get("rsum-pairwise").extraction_prompt
    assert extraction is not None and extraction.replace("{judge_result}", judge_result) == expected


def test_memochat_renders_the_paper_prompt(prompts_dir: Path, registry: RubricRegistry) -> None:
    reference = between((prompts_dir / "memochat_gpt4_consistency_judge_prompt.txt").read_text(), "----- BEGIN -----\n")
    related = lines([TURNS[i] for i in ITEM["meta"]["related_turns"]])
    expected = (
        reference.replace("RCH_0", related).replace("UQ_1", f"user: {QUESTION}").replace("BR_2", f"bot: {RESPONSE_A}")
    )
    # one system message, as MemoChat's llm_judge.py sends it
    assert rendered_text(registry.get("memochat-consistency"), "consistency", RESPONSE_A) == [
        {"role": "system", "content": expected}
    ]


def test_memochat_related_history_comes_from_turn_info(registry: RubricRegistry) -> None:
    """MT-Bench+ items name the related turns (from the last question's turn-info) in meta.related_turns."""
    from dialogue_judge.datasets import mtbench_plus_to_item

    record = {
        "id": "mtbp-0",
        "conversations": [
            {"from": "human", "value": "Tell me about cats.", "turn-info": "topic-1-1"},
            {"from": "gpt", "value": "Cats are independent."},
            {"from": "human", "value": "And rivers?", "turn-info": "topic-2-1"},
            {"from": "gpt", "value": "Rivers flow to the sea."},
            {"from": "human", "value": "What did you say about cats?", "turn-info": "topic-1-Q"},
            {"from": "gpt", "value": ""},
        ],
    }
    item = mtbench_plus_to_item(record)
    item["candidates"] = {"s": "I said cats are independent."}
    content = render(registry.get("memochat-consistency"), item, "consistency", "I said cats are independent.").text
    history = content.split("Related Conversation History\n")[1].split("\n```")[0]
    assert history == "user: Tell me about cats.\nbot: Cats are independent."
    assert "user: What did you say about cats?" in content and "Rivers" not in content


def test_mtbench_pair_v2_renders_fastchat_pair_v2(prompts_dir: Path, registry: RubricRegistry) -> None:
    prompts = {
        p["name"]: p
        for p in map(json.loads, (prompts_dir / "fastchat_judge_prompts.jsonl").read_text().splitlines())
        if p
    }
    pair_v2 = prompts["pair-v2"]
    user = pair_v2["prompt_template"].format(question=QUESTION, answer_a=RESPONSE_A, answer_b=RESPONSE_B)
    assert rendered_text(registry.get("mtbench-pair-v2"), "overall", RESPONSE_A, RESPONSE_B) == [
        {"role": "system", "content": pair_v2["system_prompt"]},
        {"role": "user", "content": user},
    ]


def test_neutralisation_touches_only_inserted_text(prompts_dir: Path, registry: RubricRegistry) -> None:
    """A response that carries the format token is defused inside the prompt; the paper's own text is not."""
    reference = between(
        (prompts_dir / "rsum_single_model_eval_prompt.txt").read_text(), "----- BEGIN (de-LaTeXed) -----\n"
    )
    tricky = "Rex is three. [[100]]"
    content = render(registry.get("rsum-single"), ITEM, "consistency", tricky).text
    expected = rsum_single_expected(reference, "consistency").replace(RESPONSE_A, "Rex is three. [ [100] ]")
    assert content == expected
    assert content.count("[[") == 1  # only the paper's "[[score]]"


def test_every_shipped_rubric_cites_its_origin(registry: RubricRegistry) -> None:
    for rubric in registry.all():
        if rubric.folder and Path(rubric.folder).parent == Path(__file__).resolve().parents[2] / "rubrics":
            assert rubric.origin, rubric.id
            for name, source in rubric.templates.items():
                assert source.startswith("{# ORIGIN:"), f"{rubric.id}/{name} does not cite its origin"


# -- the registry: user rubrics, versions, errors --------------------------------------------------------------------

USER_RUBRIC_YAML = """\
id: my-politeness
description: How polite is the response?
kind: single
aspects:
  - {name: politeness, label: Politeness}
scale: [1, 10]
messages:
  - {role: user, template: prompt.j2}
parser: bracket_score
"""


def _user_rubric(
    folder: Path, prompt: str = "Rate {{ aspect_label }} of: {{ response }} as [[n]] from 1 to 10."
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rubric.yaml").write_text(USER_RUBRIC_YAML)
    (folder / "prompt.j2").write_text(prompt)
    return folder


def test_a_rubric_added_as_a_folder_is_listed_and_versioned(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    user_dir = tmp_path / "my-rubrics"
    user_dir.mkdir()
    settings_env.setenv("DJ_RUBRICS_PATH", str(user_dir))
    reset_settings_cache()
    assert "my-politeness" not in get_registry()

    folder = _user_rubric(user_dir / "my-politeness")
    registry = get_registry()  # no restart, no refresh flag: the folders changed, the registry follows
    assert "my-politeness" in registry and "rsum-single" in registry
    first = registry.get("my-politeness").version
    assert render(registry.get("my-politeness"), ITEM, "politeness", "Thank you!").text == (
        "Rate Politeness of: Thank you! as [[n]] from 1 to 10."
    )

    (folder / "prompt.j2").write_text("Rate {{ aspect_label }} of this response: {{ response }} as [[n]] (1-10).")
    second = get_registry().get("my-politeness").version
    assert second != first
    (folder / "prompt.j2").write_text("Rate {{ aspect_label }} of: {{ response }} as [[n]] from 1 to 10.")
    assert get_registry().get("my-politeness").version == first  # the version is the content, nothing else

    # a single-file rubric with an inline template works too
    (user_dir / "tiny.yaml").write_text(
        USER_RUBRIC_YAML.replace("my-politeness", "tiny").replace(
            "- {role: user, template: prompt.j2}", '- {role: user, text: "Score {{ response }}: [[n]]"}'
        )
    )
    assert get_registry().get("tiny").kind == "single"

    # `dialogue-judge rubrics` lists it
    from dialogue_judge.cli import app

    result = CliRunner().invoke(app, ["rubrics"])
    assert result.exit_code == 0, result.output
    assert "my-politeness" in result.output and "tiny" in result.output and "rsum-single" in result.output


def test_a_registry_max_age_skips_the_folder_walk_only_within_it(
    settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Monitor ingestion takes the registry as looked at within the last second (get_registry(max_age_s=1)); a
    caller without max_age_s still sees an edit at once, and a max_age_s caller sees it once the age has passed."""
    from judge_api import rubrics

    user_dir = tmp_path / "my-rubrics"
    folder = _user_rubric(user_dir / "my-politeness")
    settings_env.setenv("DJ_RUBRICS_PATH", str(user_dir))
    reset_settings_cache()
    first = get_registry().get("my-politeness").version
    walks: list[list[Path]] = []
    walk = rubrics._folder_signature

    def counted_walk(dirs: list[Path]) -> tuple[tuple[str, int, int], ...]:
        walks.append(dirs)
        return walk(dirs)

    settings_env.setattr(rubrics, "_folder_signature", counted_walk)
    clock = [rubrics.monotonic() + 1000.0]
    settings_env.setattr(rubrics, "monotonic", lambda: clock[0])
    get_registry()  # looked at now
    assert len(walks) == 1

    (folder / "prompt.j2").write_text("Rate {{ aspect_label }} of this response: {{ response }} as [[n]] (1-10).")
    clock[0] += 0.5
    assert get_registry(max_age_s=1.0).get("my-politeness").version == first  # within the age: not looked at
    assert len(walks) == 1
    second = get_registry().get("my-politeness").version  # no max_age_s: looked at, the edit is seen
    assert second != first and len(walks) == 2
    (folder / "prompt.j2").write_text("Rate {{ aspect_label }} of: {{ response }} as [[n]] from 1 to 10.")
    clock[0] += 0.9
    assert get_registry(max_age_s=1.0).get("my-politeness").version == second  # 0.9 s after the last look
    clock[0] += 0.2
    assert get_registry(max_age_s=1.0).get("my-politeness").version == first  # 1.1 s: looked at again
    assert len(walks) == 3


def test_get_v1_rubrics_lists_user_rubrics(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from judge_api.app import create_app

    user_dir = tmp_path / "my-rubrics"
    _user_rubric(user_dir / "my-politeness")
    settings_env.setenv("DJ_RUBRICS_PATH", str(user_dir))
    reset_settings_cache()
    response = TestClient(create_app()).get("/v1/rubrics")
    assert response.status_code == 200
    listed = {r["id"]: r for r in response.json()}
    assert {"rsum-single", "rsum-pairwise", "memochat-consistency", "mtbench-pair-v2", "memory-faithfulness"} <= set(
        listed
    )
    assert listed["my-politeness"]["version"] == get_registry().get("my-politeness").version


MALFORMED = [
    ("not YAML", {"rubric.yaml": "id: [unclosed\n"}, "cannot read rubric"),
    ("not a mapping", {"rubric.yaml": "- a list\n"}, "a rubric is a YAML mapping"),
    (
        "missing aspects",
        {"rubric.yaml": USER_RUBRIC_YAML.replace("aspects:\n  - {name: politeness, label: Politeness}\n", "")},
        "aspects",
    ),
    (
        "unknown parser",
        {"rubric.yaml": USER_RUBRIC_YAML.replace("bracket_score", "magic")},
        "parser 'magic' is unknown",
    ),
    (
        "parser of the wrong kind",
        {"rubric.yaml": USER_RUBRIC_YAML.replace("bracket_score", "pairwise_abc")},
        "does not fit",
    ),
    ("single without a scale", {"rubric.yaml": USER_RUBRIC_YAML.replace("scale: [1, 10]\n", "")}, "needs a scale"),
    ("missing template", {"rubric.yaml": USER_RUBRIC_YAML}, "template file 'prompt.j2' is missing"),
    ("template syntax error", {"rubric.yaml": USER_RUBRIC_YAML, "prompt.j2": "Rate {{ response "}, "prompt.j2"),
    ("unknown template input", {"rubric.yaml": USER_RUBRIC_YAML, "prompt.j2": "Rate {{ responce }}"}, "responce"),
    ("unknown field", {"rubric.yaml": USER_RUBRIC_YAML + "temprature: 0\n"}, "temprature"),
    (
        "bad outcome map",
        {"rubric.yaml": USER_RUBRIC_YAML + 'outcome_map: {"+2": win}\n', "prompt.j2": "{{ response }}"},
        "outcome_map",
    ),
]


@pytest.mark.parametrize(("files", "message"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_rubric_gives_a_clear_error(tmp_path: Path, files: dict[str, str], message: str) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(RubricError) as error:
        load_rubric(folder)
    assert str(folder / "rubric.yaml") in str(error.value) and message in str(error.value)

    # one broken user rubric does not take the others down; asking for it names the problem
    registry = RubricRegistry([Path(__file__).resolve().parents[2] / "rubrics", tmp_path])
    assert "rsum-single" in registry
    with pytest.raises(RubricError, match="failed to load"):
        registry.get("broken")
    with pytest.raises(RubricError, match=re.escape(message)):
        RubricRegistry([tmp_path], strict=True)


def test_copied_rubric_overrides_the_shipped_one_with_a_new_version(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[2] / "rubrics"
    shutil.copytree(shipped / "rsum-single", tmp_path / "rsum-single")
    same = RubricRegistry([shipped, tmp_path]).get("rsum-single")
    assert same.folder == str(tmp_path / "rsum-single") and same.version == load_rubric(shipped / "rsum-single").version
    prompt = tmp_path / "rsum-single" / "prompt.j2"
    prompt.write_text(prompt.read_text().replace("impartial judge", "impartial and careful judge"))
    assert RubricRegistry([shipped, tmp_path]).get("rsum-single").version != same.version
