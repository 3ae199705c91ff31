"""``dialogue-judge facts extract``: extend items' fact sheets with the atomic facts a judge extracts (docs/facts.md).

Each item's extraction sources (``judge_api.facts.extraction_sources``: its memory text and earlier sessions' turns)
are judged once per item and judge with a ``fact_extract`` rubric (``rubrics/fact-extract``), in this process on
SQLite with the gate's judge cache (``dialogue_judge.gate.standalone``): the run item carries only what the prompt
renders (memory and dialogue), so the cache key depends on the item's sources, the judge, the request options and
the rubric version, and a repeated extraction makes no judge call.

The written item keeps everything it had; its ``facts`` become its base sheet (its explicit ``facts`` when it has
them, kept as they are, else the persona-derived facts) followed by the extracted facts (``mem.K``, ``sN.tM.K``),
and ``meta.facts_extraction`` says what was done: judge, rubric and version, ``base`` (``explicit`` / ``persona``),
the counts, each extracted fact's quote, and for an item whose extraction failed its status and error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialogue_judge.gate.standalone import InProcessRunner, default_cache_db, run_in_process
from judge_api.facts import extraction_sources, fact_sheet
from judge_api.rubrics import Rubric
from judge_api.schemas import RunCreate

EXTRACT_SYSTEM = "extract"
"""The one candidate of a run item (the prompt does not render it; an item is judged once, whatever its systems)."""
MAX_FACTS = 500
"""An item's fact sheet holds at most this many facts (``judge_api.schemas.Item.facts``)."""


@dataclass
class Extraction:
    """What ``extract_facts`` did: the items to write, and the items whose extraction failed."""

    items: list[dict[str, Any]]
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(item id, status, reason) of every item whose extraction failed, in input order: status ``unparseable``,
    ``failed`` or ``cancelled`` (the judgment's), or ``refused`` (the facts do not fit the item's sheet)."""
    judged: int = 0
    cached: int = 0
    extracted: int = 0


def run_request(items: list[dict[str, Any]], rubric: Rubric, judge: str) -> RunCreate:
    """The extraction run: one run item per input item that has sources, carrying only what the prompt renders."""
    run_items = [
        {
            "id": item["id"],
            "memory": item.get("memory"),
            "dialogue": item.get("dialogue") or [],
            "candidates": {EXTRACT_SYSTEM: "-"},
        }
        for item in items
        if extraction_sources(item)
    ]
    # with nothing to extract, a stand-in item still has the judge and rubric validated; the run then has no items
    stand_in = {"id": "stand-in", "dialogue": [], "candidates": {EXTRACT_SYSTEM: "-"}}
    request = RunCreate.model_validate(
        {
            "name": "facts-extract",
            "items": run_items or [stand_in],
            "rubrics": [rubric.id],
            "judges": [judge],
            "mode": ["single"],
            "aspects": rubric.aspect_names[:1],
            "metrics": [],
        }
    )
    return request if run_items else request.model_copy(update={"items": []})


def _merged(
    raw: dict[str, Any], item: dict[str, Any], extracted: list[dict[str, str]], record: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """The written item (the input as given, ``facts`` and ``meta.facts_extraction`` set), or the reason it cannot
    hold the extracted facts."""
    base = fact_sheet(item)
    taken = {f["id"] for f in base}
    clash = [f["id"] for f in extracted if f["id"] in taken]
    if clash:
        return None, f"extracted fact id {clash[0]!r} is already a fact of the item"
    if extracted and len(base) + len(extracted) > MAX_FACTS:
        return None, f"the fact sheet would hold {len(base) + len(extracted)} facts (at most {MAX_FACTS})"
    out = dict(raw)
    out["facts"] = base + [{"id": f["id"], "text": f["text"], "source": f["source"]} for f in extracted]
    meta = dict(out.get("meta") or {})
    meta["facts_extraction"] = {
        **record,
        "base": "explicit" if item.get("facts") is not None else "persona",
        "n_base": len(base),
        "n_extracted": len(extracted),
        "quotes": {f["id"]: f["quote"] for f in extracted},
    }
    out["meta"] = meta
    return out, None


def extract_facts(
    raws: list[dict[str, Any]],
    items: list[dict[str, Any]],
    rubric: Rubric,
    judge: str,
    *,
    database: Path | None,
    cache: bool,
    workers: int,
    allow_failed: bool,
    progress: bool | None,
) -> Extraction:
    """Judge the extraction of every item with sources and merge the facts (``raws``: the items as given,
    ``items``: the same validated and dumped). Raises ``judge_api.planning.PlanError`` for a run that cannot be
    planned; a judgment that fails or is unparseable is a failure of its item (written without extracted facts
    only with ``allow_failed``)."""
    request = run_request(items, rubric, judge)
    rows: dict[str, dict[str, Any]] = {}
    if request.items:
        runner = InProcessRunner((database or default_cache_db()) if cache else None, workers=workers)
        try:
            run_id = run_in_process(request, runner=runner, progress=progress)
            rows = {row["item_id"]: row for row in runner.judgments(run_id)}
        finally:
            runner.close()
    record = {"judge": judge, "rubric": rubric.id, "rubric_version": rubric.version}
    result = Extraction(items=[])
    for raw, item in zip(raws, items, strict=True):
        row = rows.get(item["id"])
        status, problem = "done", None
        merged: dict[str, Any] | None = None
        if row is None:  # nothing to extract from
            merged, problem = _merged(raw, item, [], {**record, "status": "no sources"})
        else:
            result.judged += 1
            result.cached += bool(row.get("cached"))
            details = row.get("details") or {}
            if row["status"] == "done" and isinstance(details.get("extracted"), list):
                merged, problem = _merged(raw, item, details["extracted"], {**record, "status": "done"})
            else:
                status = row["status"] if row["status"] != "done" else "unparseable"
                problem = row.get("error") or "no extracted facts"
        if merged is not None:
            result.items.append(merged)
            result.extracted += merged["meta"]["facts_extraction"]["n_extracted"]
            continue
        status = "refused" if status == "done" else status
        result.failures.append((item["id"], status, problem or ""))
        if allow_failed:
            kept, _ = _merged(raw, item, [], {**record, "status": status, "error": problem})
            result.items.append(kept or raw)
    return result
