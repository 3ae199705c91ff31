"""Generate the responses of systems under test for a set of items: every (item, system) once, concurrently.

The output is the items with their ``candidates`` filled (a system that failed on an item is left out of that
item's candidates) and ``meta.generation.<system>`` recording how each response came about: status, the error of a
failure, the generated memory, calls, tokens, latency, the strategy's step trace and the cache key (item + responder
string + strategy version). A record whose cache key is unchanged is reused instead of generated again, which makes
a rerun over the same output resumable and free.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from workers.responders.callers import Answer, Responder

GENERATION_VERSION = 1


def responder_input(item: dict[str, Any]) -> dict[str, Any]:
    """What a responder sees of an item: everything but the candidates and earlier generation records."""
    clean = {k: v for k, v in item.items() if k != "candidates"}
    meta = dict(clean.get("meta") or {})
    meta.pop("generation", None)
    clean["meta"] = meta
    return clean


def generation_key(item: dict[str, Any], responder: Responder) -> str:
    material = {
        "v": GENERATION_VERSION,
        "item": responder_input(item),
        "responder": responder.spec.key,
        "version": responder.version,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def record_of(answer: Answer, responder: Responder, key: str, seconds: float) -> dict[str, Any]:
    tally = answer.tally
    return {
        "status": "done" if answer.ok else "failed",
        "responder": responder.spec.key,
        "error": answer.error,
        "memory": answer.memory,
        "calls": tally.provider_calls,
        "cached_calls": answer.cached_calls,
        "attempts": tally.attempts,
        "input_tokens": tally.input_tokens,
        "output_tokens": tally.output_tokens,
        "seconds": round(seconds, 3),
        "trace": answer.trace,
        "cache_key": key,
    }


@dataclass
class GenerationSummary:
    items: int = 0
    generated: int = 0
    reused: int = 0
    failed: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # item id, system, error


def previous_records(lines: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The finished generation records of an earlier output (later lines win), by (item id, system)."""
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        generation = (line.get("meta") or {}).get("generation") or {}
        for system, record in generation.items():
            if isinstance(record, dict) and record.get("status") == "done":
                response = (line.get("candidates") or {}).get(system)
                if isinstance(response, str) and response.strip():
                    records[(str(line.get("id")), system)] = {**record, "response": response}
    return records


def generate(
    items: list[dict[str, Any]],
    systems: dict[str, Responder],
    *,
    concurrency: int,
    previous: dict[tuple[str, str], dict[str, Any]] | None = None,
    on_item: Callable[[dict[str, Any]], None] | None = None,
    on_progress: Callable[[int, int, GenerationSummary], None] | None = None,
) -> tuple[list[dict[str, Any]], GenerationSummary]:
    """Fill every item's candidates with every system's response; ``on_item`` gets each output item once all its
    systems are settled (the CLI appends it to the output file, so an interrupted run keeps what it finished)."""
    previous = previous or {}
    summary = GenerationSummary(items=len(items))
    outputs = [copy.deepcopy(item) for item in items]
    for output in outputs:
        output.setdefault("candidates", {})
        output.setdefault("meta", {})
        output["meta"]["generation"] = dict(output["meta"].get("generation") or {})
    pending: dict[int, int] = {index: 0 for index in range(len(items))}
    work: list[tuple[int, str, str]] = []
    for index, item in enumerate(items):
        for system, responder in systems.items():
            key = generation_key(item, responder)
            earlier = previous.get((str(item.get("id")), system))
            if earlier is not None and earlier.get("cache_key") == key:
                record = dict(earlier)
                outputs[index]["candidates"][system] = record.pop("response")
                outputs[index]["meta"]["generation"][system] = record
                summary.reused += 1
            else:
                work.append((index, system, key))
                pending[index] += 1
    total = len(items) * len(systems)

    def settled() -> int:
        return summary.reused + summary.generated + summary.failed

    if on_progress:
        on_progress(settled(), total, summary)
    for index, count in pending.items():
        if count == 0 and on_item:
            on_item(outputs[index])

    def run(index: int, system: str, key: str) -> tuple[int, str, dict[str, Any], str | None]:
        started = time.perf_counter()
        responder = systems[system]
        try:
            answer = responder.respond(responder_input(items[index]))
        except Exception as exc:  # a responder bug fails the item, never the whole generation
            answer = Answer(error=f"internal error: {type(exc).__name__}: {exc}"[:2000])
        return index, system, record_of(answer, responder, key, time.perf_counter() - started), answer.response

    with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="dj-generate") as pool:
        futures = [pool.submit(run, *job) for job in work]
        for future in as_completed(futures):
            index, system, record, response = future.result()
            output = outputs[index]
            output["meta"]["generation"][system] = record
            if response is not None:
                output["candidates"][system] = response
                summary.generated += 1
            else:
                output["candidates"].pop(system, None)
                summary.failed += 1
                summary.failures.append((str(items[index].get("id")), system, str(record["error"])))
            pending[index] -= 1
            if pending[index] == 0 and on_item:
                on_item(output)
            if on_progress:
                on_progress(settled(), total, summary)
    return outputs, summary
