"""The fact-check protocol (dialogue-judge's ``fact-check`` rubric, docs/facts.md): one JSON label per fact. Also
the memory-audit and fact-extract protocols (``judge_memory``, ``judge_extract`` below).

The prompt lists the facts one per line as ``[fact:ID] (SOURCE) TEXT`` (inside an ``<untrusted-facts>`` fence when
there is one). The judged response is located like a single-score response. Markers in the response script the
label of one fact each, ``<<f:ID=L>>``:

* ``s`` supported, ``c`` contradicted, ``n`` not addressed (a fact without a marker is not addressed too);
* ``s!`` / ``c!``: that label, with evidence that is *not* in the response (a planted parse error);
* ``-``: the fact is left out of the reply (a planted "fact not labelled");
* ``?``: the label ``unsure`` (a planted unknown label);
* a marker naming an ID that is not in the list is labelled anyway (a planted unknown fact id).

The evidence of ``s``/``c`` is the response's text from the start of the marker's sentence (after the previous
``.``, ``!``, ``?`` or line break) to the end of the marker; put the marker inside the sentence it is about.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from .requests import Judgement, locate_response

if TYPE_CHECKING:
    from .requests import JudgeRequest
    from .script import Rule

FACT_LINE = re.compile(r"(?m)^\[fact:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})\] ")
FACTS_FENCE = re.compile(r"<untrusted-facts\b[^>]*>(?P<facts>.*?)</untrusted-facts", re.DOTALL)
FACT_MARKER = re.compile(r"<<f:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})=(s!|c!|s|c|n|-|\?)>>")

_LABELS = {"s": "supported", "c": "contradicted", "n": "not_addressed", "?": "unsure"}
_SENTENCE_END = re.compile(r"[.!?\n]")


def fact_ids(prompt: str) -> list[str]:
    fenced = FACTS_FENCE.search(prompt)
    return FACT_LINE.findall(fenced.group("facts") if fenced else prompt)


_ANY_MARKER = re.compile(r"<<[^<>]*>>")


def _evidence(response: str, marker: re.Match[str]) -> str:
    """The marker's sentence up to the end of the marker (a ``.`` inside another marker, as in ``user.1``, does not
    end a sentence)."""
    inside = [(m.start(), m.end()) for m in _ANY_MARKER.finditer(response, 0, marker.start())]
    ends = [
        m.end()
        for m in _SENTENCE_END.finditer(response, 0, marker.start())
        if not any(a <= m.start() < b for a, b in inside)
    ]
    return response[ends[-1] if ends else 0 : marker.end()].strip()


def judge_facts(rule: Rule, request: JudgeRequest) -> Judgement:

    ids = fact_ids(request.prompt)
    response = locate_response(request.prompt, rule) or ""
    scripted: dict[str, tuple[str, str]] = {}
    for marker in FACT_MARKER.finditer(response):
        code = marker.group(2)
        if code == "-":
            scripted[marker.group(1)] = ("-", "")
        elif code.endswith("!"):
            scripted[marker.group(1)] = (_LABELS[code[0]], "a quote the response does not contain")
        else:
            scripted[marker.group(1)] = (_LABELS[code], _evidence(response, marker) if code in "sc" else "")
    entries = []
    for fact_id in ids + [i for i in scripted if i not in ids]:
        label, evidence = scripted.get(fact_id, ("not_addressed", ""))
        if label != "-":
            entries.append({"id": fact_id, "label": label, "evidence": evidence})
    contradicted = sum(1 for e in entries if e["label"] == "contradicted")
    explanation = f"The response contradicts {contradicted} of {len(ids)} facts."
    text = json.dumps({"facts": entries, "explanation": explanation})
    return Judgement(rule.name, "facts", float(contradicted), "", "", explanation, text)


# -- the memory-audit protocol (dialogue-judge's ``memory-audit`` rubric) -------------------------------------------
GOLD_MARKER = re.compile(r"<<g:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})>>")
MEMORY_MARKER = re.compile(r"<<m:(s|f|w)(!?)>>")
_MEMORY_LABELS = {"s": "supported", "f": "fabricated", "w": "wrong_relationship"}


def judge_memory(rule: Rule, request: JudgeRequest) -> Judgement:
    """The memory-audit protocol: the prompt lists the gold facts as ``[fact:ID] (SOURCE) TEXT`` lines and the judged
    text (located like a single-score response) is the generated memory. Markers in the memory script the reply:

    * ``<<g:ID>>``: gold fact ID is recalled (evidence: the marker's sentence up to the marker); gold facts without
      one are missing; an ID not in the list is labelled anyway (a planted unknown fact id);
    * ``<<m:s>>`` / ``<<m:f>>`` / ``<<m:w>>``: the marker's sentence up to the marker is a generated fact labelled
      supported / fabricated / wrong_relationship; ``<<m:f!>>`` (any label with ``!``) quotes a fact that is not in
      the memory (a planted parse error).
    """

    ids = fact_ids(request.prompt)
    memory = locate_response(request.prompt, rule) or ""
    recalled = {m.group(1): _evidence(memory, m) for m in GOLD_MARKER.finditer(memory)}
    gold = [
        {"id": fact_id, "label": "recalled", "evidence": recalled[fact_id]}
        if fact_id in recalled
        else {"id": fact_id, "label": "missing", "evidence": ""}
        for fact_id in ids
    ]
    gold += [{"id": i, "label": "recalled", "evidence": e} for i, e in recalled.items() if i not in ids]
    generated = [
        {
            "fact": "a fact the memory does not state" if m.group(2) else _evidence(memory, m),
            "label": _MEMORY_LABELS[m.group(1)],
        }
        for m in MEMORY_MARKER.finditer(memory)
    ]
    supported = sum(1 for g in generated if g["label"] == "supported")
    explanation = (
        f"The memory recalls {len(recalled)} of {len(ids)} gold facts; "
        f"{supported} of {len(generated)} stated facts are supported."
    )
    text = json.dumps({"gold": gold, "generated": generated, "explanation": explanation})
    return Judgement(rule.name, "memory", float(supported), "", "", explanation, text)


# -- the fact-extract protocol (dialogue-judge's ``fact-extract`` rubric) -------------------------------------------
SOURCES_FENCE = re.compile(r"<untrusted-sources\b[^>]*>(?P<sources>.*?)</untrusted-sources", re.DOTALL)
SOURCE_LINE = re.compile(r"(?m)^\[source:(?P<name>memory|session [0-9]+ turn [0-9]+)\] (?P<text>.*)$")
_SPEAKER = re.compile(r"\A\([^()]*\) ")
EXTRACT_MARKER = re.compile(r"<<x(?:=(?P<text>[^<>@!]*))?(?:@(?P<source>[^<>!=]+))?(?P<bad>!)?>>")
MISQUOTE = "a quote the source does not contain"


def extraction_sources(prompt: str) -> list[tuple[str, str]]:
    """The ``[source:NAME] TEXT`` lines of the prompt (inside the ``<untrusted-sources>`` fence when there is one),
    a turn's ``(speaker)`` label removed."""
    fenced = SOURCES_FENCE.search(prompt)
    block = fenced.group("sources") if fenced else prompt
    out = []
    for line in SOURCE_LINE.finditer(block):
        text = line.group("text")
        out.append((line.group("name"), text if line.group("name") == "memory" else _SPEAKER.sub("", text, count=1)))
    return out


def _span(text: str, marker: re.Match[str]) -> str:
    """The text before the marker back to the end of the previous sentence or of the previous ``<<x...>>`` marker
    (a ``.`` inside another marker does not end a sentence)."""
    inside = [(m.start(), m.end()) for m in _ANY_MARKER.finditer(text, 0, marker.start())]
    starts = [
        m.end()
        for m in _SENTENCE_END.finditer(text, 0, marker.start())
        if not any(a <= m.start() < b for a, b in inside)
    ]
    starts += [m.end() for m in EXTRACT_MARKER.finditer(text, 0, marker.start())]
    return text[max(starts, default=0) : marker.start()].strip()


def judge_extract(rule: Rule, request: JudgeRequest) -> Judgement:
    """The fact-extract protocol: the prompt lists the sources as ``[source:NAME] TEXT`` lines (``memory``,
    ``session N turn M``). Markers in a source's text script the reply, one fact each, in the order they appear:

    * ``<<x>>``: a fact whose quote is the text before the marker back to the end of the previous sentence or
      ``<<x...>>`` marker, and whose text is that quote with other markers removed;
    * ``<<x=TEXT>>``: the same quote, with TEXT as the fact's text (``<<x=>>``: an empty text, a planted parse
      error);
    * ``<<x@NAME>>``: the fact names source NAME instead of its own (a planted unknown source, or a quote that is
      not in the named source);
    * ``<<x!>>`` (after the other parts): the quote is a text the source does not contain (a planted parse error).
    """

    facts = []
    for name, text in extraction_sources(request.prompt):
        for marker in EXTRACT_MARKER.finditer(text):
            quote = _span(text, marker)
            fact_text = marker.group("text")
            if fact_text is None:
                fact_text = " ".join(_ANY_MARKER.sub("", quote).split())
            facts.append(
                {
                    "text": fact_text,
                    "source": (marker.group("source") or name).strip(),
                    "quote": MISQUOTE if marker.group("bad") else quote,
                }
            )
    explanation = f"The sources state {len(facts)} facts."
    text = json.dumps({"facts": facts, "explanation": explanation})
    return Judgement(rule.name, "extract", float(len(facts)), "", "", explanation, text)
