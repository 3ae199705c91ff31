"""The fact-check protocol (dialogue-judge's ``fact-check`` rubric, docs/facts.md): one JSON label per fact.

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

if TYPE_CHECKING:
    from .behaviour import Judgement, JudgeRequest
    from .script import Rule

FACT_LINE = re.compile(r"(?m)^\[fact:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})\] ")
FACTS_FENCE = re.compile(r"<untrusted-facts\b[^>]*>(?P<facts>.*?)</untrusted-facts", re.DOTALL)
FACT_MARKER = re.compile(r"<<f:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})=(s!|c!|s|c|n|-|\?)>>")
FACT_PROTOCOL = r"(?m)^\[fact:[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\] \("
"""The default rule's ``match``: the prompt lists facts in the protocol's format."""

_LABELS = {"s": "supported", "c": "contradicted", "n": "not_addressed", "?": "unsure"}
_SENTENCE_END = re.compile(r"[.!?\n]")


def fact_ids(prompt: str) -> list[str]:
    fenced = FACTS_FENCE.search(prompt)
    return FACT_LINE.findall(fenced.group("facts") if fenced else prompt)


def _evidence(response: str, marker: re.Match[str]) -> str:
    ends = [m.end() for m in _SENTENCE_END.finditer(response, 0, marker.start())]
    return response[ends[-1] if ends else 0 : marker.end()].strip()


def judge_facts(rule: Rule, request: JudgeRequest) -> Judgement:
    from .behaviour import Judgement, locate_response

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
