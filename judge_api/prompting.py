"""Render a rubric's messages for one judgment.

Untrusted text (dialogue turns, persona, memory, reference, the user's question, candidate responses) is
neutralised before it enters a template so that it cannot forge the judge's output format or close a fence:

* NFKC + invisible characters removed first (so a full-width or zero-width-split bracket pair is a bracket pair);
* every ``[[`` / ``]]`` is broken apart (``[ [`` / ``] ]``, also inside runs such as ``[[[``);
* triple backtick code fences become three apostrophes (MemoChat's prompt fences its parts with backticks);
* FastChat's answer markers ``[The Start/End of ...]`` become ``(The Start/End of ...)``;
* anything that looks like our fence tag (``<untrusted``, ``</untrusted``, ``< /untrusted``) loses its ``<``.

In hardened rubrics each untrusted block is then wrapped in ``<untrusted-KIND id="NONCE">...</untrusted-KIND
id="NONCE">``, NONCE being a hash of the (neutralised) content, so the content can neither contain the closing tag
nor predict the nonce. Paper rubrics are not fenced (they must render the paper's text), only neutralised: the
rendered prompt of a benign input is the paper's text byte for byte.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import jinja2

from judge_api.facts import extraction_sources, fact_sheet
from judge_api.rubrics import TEMPLATE_INPUTS, Rubric
from judge_api.template_sandbox import MAX_TEMPLATE_VALUE as MAX_TEMPLATE_VALUE
from judge_api.template_sandbox import RubricSandbox
from judge_api.textnorm import normalise

# Every rubric template renders in the immutable sandbox, whatever its source (the folders, a snapshot stored with a
# run, an imported bundle): a template can read its inputs, never reach Python internals (``lipsum.__globals__``,
# ``''.__class__.__mro__``) or change an input in place (``options.update(...)``); those raise
# ``jinja2.exceptions.SecurityError`` and the judgment fails with that error (docs/security.md).
_env = RubricSandbox(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
_template_cache: dict[str, jinja2.Template] = {}
_TEMPLATE_CACHE_SIZE = 1024

_MARKERS = re.compile(r"\[\s*(The (?:Start|End) of [^\]]*)\]", re.IGNORECASE)
_FENCE_TAG = re.compile(r"<(?=\s*/?\s*untrusted)", re.IGNORECASE)
_DOUBLE_OPEN = re.compile(r"\[(?=\[)")
_DOUBLE_CLOSE = re.compile(r"\](?=\])")


NEUTRALISED_CACHE_CHARS = 4096  # texts up to this long are remembered: a dialogue's turns recur in every prompt


def neutralise(text: str) -> str:
    """Defuse format tokens in untrusted text; visible meaning is kept for the judge."""
    if len(text) <= NEUTRALISED_CACHE_CHARS:
        return _neutralised(text)
    return _neutralise(text)


@functools.lru_cache(maxsize=4096)
def _neutralised(text: str) -> str:
    return _neutralise(text)


def _neutralise(text: str) -> str:
    text = normalise(text)
    text = _DOUBLE_CLOSE.sub("] ", _DOUBLE_OPEN.sub("[ ", text))
    text = text.replace("```", "'''")
    text = _MARKERS.sub(r"(\1)", text)
    return _FENCE_TAG.sub("‹", text)


def fence(kind: str, text: str) -> str:
    """Wrap untrusted text in a tag whose nonce is derived from the content (stable for the cache)."""
    nonce = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f'<untrusted-{kind} id="{nonce}">\n{text}\n</untrusted-{kind} id="{nonce}">'


@dataclass(frozen=True)
class RenderedPrompt:
    messages: list[dict[str, str]]
    variables: dict[str, Any]

    @property
    def prompt_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.messages, sort_keys=True).encode()).hexdigest()

    @property
    def text(self) -> str:
        return "\n\n".join(m["content"] for m in self.messages)


def _label(speaker: str, labels: dict[str, str]) -> str:
    return labels.get(speaker, speaker)


def _history_turns(rubric: Rubric, item: dict[str, Any]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = list(item.get("dialogue") or [])
    context = rubric.context
    if context.history == "related_turns":
        related = (item.get("meta") or {}).get("related_turns")
        if related is not None:
            wanted = {int(i) for i in related}
            turns = [t for i, t in enumerate(turns) if i in wanted]
        return turns
    if context.history == "last_n":
        return turns[-context.last_n_utterances :] if context.last_n_utterances else []
    return turns


def format_turns(turns: list[dict[str, Any]], labels: dict[str, str], max_chars: int) -> str:
    lines = [f"{_label(t['speaker'], labels)}: {neutralise(t['text'])}" for t in turns]
    text = "\n".join(lines)
    if len(text) > max_chars:  # keep the most recent context, as MemoChat truncates history
        text = text[-max_chars:]
        text = text[text.find("\n") + 1 :] if "\n" in text else text
    return text


def format_persona(item: dict[str, Any], labels: dict[str, str]) -> str:
    parts: list[str] = []
    persona = item.get("persona") or {}
    for speaker in ("user", "bot"):
        facts = [neutralise(f) for f in persona.get(speaker) or []]
        if facts:
            parts.append(f"{_label(speaker, labels)}: {' '.join(facts)}")
    if item.get("memory"):
        parts.append(f"memory: {neutralise(item['memory'])}")
    return "\n".join(parts)


def format_facts(facts: list[dict[str, str]]) -> str:
    """One line per fact, ``[fact:ID] (SOURCE) TEXT``: the fact-check protocol's list (docs/facts.md)."""
    return "\n".join(f"[fact:{f['id']}] ({f['source']}) {' '.join(neutralise(f['text']).split())}" for f in facts)


def format_sources(item: dict[str, Any], labels: dict[str, str]) -> str:
    """One line per extraction source, ``[source:NAME] TEXT`` (a turn: ``[source:NAME] (SPEAKER) TEXT``), white space
    collapsed: what the fact-extract protocol shows the judge (docs/facts.md)."""
    lines = []
    for source in extraction_sources(item):
        speaker = f"({_label(source['speaker'], labels)}) " if source["speaker"] else ""
        lines.append(f"[source:{source['source']}] {speaker}{' '.join(neutralise(source['text']).split())}")
    return "\n".join(lines)


def parse_context(rubric: Rubric, item: dict[str, Any], first: str) -> dict[str, Any] | None:
    """What a facts parser checks a reply against: the fact sheet and the response as the judge saw it, and for
    fact_extract the extraction sources' texts as the judge saw them."""
    if rubric.kind != "facts":
        return None
    context: dict[str, Any] = {"facts": fact_sheet(item), "response": neutralise(first)}
    if rubric.parser == "fact_extract":
        context["sources"] = {s["source"]: neutralise(s["text"]) for s in extraction_sources(item)}
    return context


def last_user_question(item: dict[str, Any]) -> str:
    for turn in reversed(item.get("dialogue") or []):
        if turn["speaker"] == "user":
            return neutralise(turn["text"])
    return ""


def build_variables(
    rubric: Rubric, item: dict[str, Any], aspect: str, first: str, second: str | None
) -> dict[str, Any]:
    """Template inputs. ``first``/``second`` are the responses in presentation order."""
    labels = rubric.context.speaker_labels
    turns = _history_turns(rubric, item)
    dialogue = list(item.get("dialogue") or [])
    if rubric.context.history == "related_turns" and dialogue and dialogue[-1]["speaker"] == "user":
        turns = [t for t in turns if t is not dialogue[-1]]
    aspect_cfg = rubric.aspect(aspect)
    response = neutralise(first)
    response2 = neutralise(second) if second is not None else None
    variables: dict[str, Any] = {
        "aspect": aspect,
        "aspect_label": aspect_cfg.label or aspect.capitalize(),
        "aspect_description": aspect_cfg.description or "",
        "dialog": format_turns(turns, labels, rubric.context.max_history_chars),
        "persona": format_persona(item, labels),
        "memory": neutralise(item.get("memory") or ""),
        "reference": neutralise(item.get("reference") or ""),
        "question": last_user_question(item),
        "response": response,
        "response1": response,
        "response2": response2,
        "options": rubric.options,
        "facts": format_facts(fact_sheet(item)),
        "sources": format_sources(item, labels),
    }
    if rubric.hardened:
        for name, kind in (
            ("dialog", "dialogue"),
            ("persona", "persona"),
            ("memory", "memory"),
            ("reference", "reference"),
            ("question", "question"),
            ("facts", "facts"),
            ("sources", "sources"),
        ):
            variables[name] = fence(kind, variables[name])
        variables["response"] = variables["response1"] = fence("response", response)
        if response2 is not None:
            variables["response2"] = fence("response", response2)
    assert set(variables) == set(TEMPLATE_INPUTS), "template inputs and judge_api.rubrics.TEMPLATE_INPUTS differ"
    return variables


class TemplateRefused(ValueError):
    """A rubric template that cannot be rendered: a syntax error, a missing input, or the sandbox refusing it."""


def _template(source: str) -> jinja2.Template:
    # by the source's hash, never by rubric id and version: two stored rubrics claiming one id and version (another
    # project's snapshot) must never share a compiled template
    key = hashlib.sha256(source.encode()).hexdigest()
    template = _template_cache.get(key)
    if template is None:
        template = _env.from_string(source)
        if len(_template_cache) >= _TEMPLATE_CACHE_SIZE:
            _template_cache.clear()
        _template_cache[key] = template
    return template


def render(rubric: Rubric, item: dict[str, Any], aspect: str, first: str, second: str | None = None) -> RenderedPrompt:
    """The rubric's messages for one judgment; raises TemplateRefused (naming the rubric and the template) when a
    template cannot be rendered, in particular when the sandbox refuses what it does."""
    variables = build_variables(rubric, item, aspect, first, second)
    messages = []
    for message in rubric.messages:
        if message.template and message.template not in rubric.templates:
            raise TemplateRefused(f"rubric {rubric.id!r} version {rubric.version} has no template {message.template!r}")
        source = rubric.templates[message.template] if message.template else (message.text or "")
        try:
            content = _template(source).render(**variables)
        except (jinja2.TemplateError, RecursionError) as exc:  # a macro calling itself for ever
            where = message.template or "inline text"
            raise TemplateRefused(
                f"rubric {rubric.id!r} version {rubric.version} template {where!r} cannot be rendered: "
                f"{type(exc).__name__}: {exc}"[:2000]
            ) from None
        messages.append({"role": message.role, "content": content})
    return RenderedPrompt(messages, variables)
