"""The ``fact_extract`` parser: the atomic facts a judge extracted from an item's memory and earlier sessions' turns.

The judge sees the item's extraction sources (``judge_api.facts.extraction_sources``: the memory text, source
``memory``, and every earlier session's turn, source ``session N turn M``) and replies with one JSON object
(structured output, or the last top-level JSON object of the text)::

    {"facts": [{"text": "The user has two dogs.", "source": "session 1 turn 3", "quote": "I have two dogs"}],
     "explanation": "..."}

Parsed strictly: ``facts`` is a list; every fact has a non-empty ``text`` (at most 4000 characters), a ``source``
that is one of the item's sources, and a non-empty ``quote`` that occurs in that source's text as the judge saw it
(NFKC normalisation, case and runs of white space ignored, as the fact-check parser compares evidence); the same
fact (text, source) is not listed twice. Anything else is unparseable with the reason; nothing is guessed or
dropped. An empty list is a valid answer (nothing to extract).

Fact ids are assigned deterministically (``judge_api.facts.extracted_fact_id``): the facts are ordered by their
source's position in the item (memory first, then the turns in dialogue order), keeping the judge's order within a
source, and the K-th fact of a source is ``mem.K`` or ``sN.tM.K``. ``details`` holds ``extracted`` (``id``,
``text``, ``source``, ``quote``) and ``n_facts``; the score is ``n_facts`` clipped to the facts scale [1, 100]
(informative only: an extraction is not a quality judgment).
"""

from __future__ import annotations

from typing import Any

from judge_api.facts import extracted_fact_id
from judge_api.rubrics import Rubric
from workers.parsed import ParsedVerdict, last_json_object
from workers.textnorm import normalise

MAX_FACT_CHARS = 4000


def _comparable(text: str) -> str:
    return " ".join(normalise(text).casefold().split())


def _facts(entries: Any, sources: dict[str, str]) -> list[dict[str, str]] | str:
    if not isinstance(entries, list):
        return "'facts' must be a list of {text, source, quote}"
    comparable = {name: _comparable(text) for name, text in sources.items()}
    found: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"facts[{index}] is not an object"
        text, source, quote = entry.get("text"), entry.get("source"), entry.get("quote")
        if not isinstance(text, str) or not text.strip():
            return f"facts[{index}]: 'text' is empty"
        if len(text.strip()) > MAX_FACT_CHARS:
            return f"facts[{index}]: 'text' is longer than {MAX_FACT_CHARS} characters"
        if not isinstance(source, str) or source not in sources:
            known = ", ".join(sources) or "none"
            return f"facts[{index}]: source {source!r} does not exist in the item (sources: {known})"
        if not isinstance(quote, str) or not quote.strip():
            return f"facts[{index}]: 'quote' is empty (it must quote {source})"
        if _comparable(quote) not in comparable[source]:
            return f"facts[{index}]: the quote is not in {source}: {quote[:200]!r}"
        key = (source, _comparable(text))
        if key in seen:
            return f"facts[{index}]: the fact {text[:200]!r} of {source} is listed twice"
        seen.add(key)
        found.append({"text": " ".join(text.split()), "source": source, "quote": quote.strip()[:1000]})
    order = {name: position for position, name in enumerate(sources)}
    numbered: list[dict[str, str]] = []
    counts: dict[str, int] = {}
    for fact in sorted(found, key=lambda f: order[f["source"]]):  # stable: the judge's order within a source
        counts[fact["source"]] = counts.get(fact["source"], 0) + 1
        numbered.append({"id": extracted_fact_id(fact["source"], counts[fact["source"]]), **fact})
    return numbered


def parse_fact_extract(
    text: str, rubric: Rubric, structured: dict[str, Any] | None, context: dict[str, Any]
) -> ParsedVerdict:
    data = structured if structured is not None else last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    facts = _facts(data.get("facts"), context.get("sources") or {})
    if isinstance(facts, str):
        return ParsedVerdict(False, error=facts)
    return ParsedVerdict(
        True,
        score=float(min(100, max(1, len(facts)))),
        explanation=str(data.get("explanation", ""))[:4000],
        details={"extracted": facts, "n_facts": len(facts)},
        method="json",
    )
