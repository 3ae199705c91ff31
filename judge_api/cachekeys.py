"""What a judgment asks its judge, and the judge cache's key for it: shared by the workers (which ask) and the
estimate (which counts what a run would ask and what the cache already holds)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from judge_api.rubrics import Rubric

TOP_LOGPROBS = 20  # OpenAI's maximum


def expected_scoring(rubric: Rubric, options: dict[str, Any]) -> bool:
    """Does this judgment want the probability-weighted score (the run's option over the rubric's)?"""
    return rubric.kind == "single" and (options.get("scoring") or rubric.scoring) == "expected"


def request_options(rubric: Rubric, options: dict[str, Any], sample_index: int) -> dict[str, Any]:
    """The request parameters of a judgment besides its messages (a run's ``judge_params`` over the defaults)."""
    schema = (
        rubric.structured_output.json_schema
        if (options.get("structured_output") and rubric.structured_output)
        else None
    )
    seed = options.get("seed")
    if seed is not None and sample_index:
        seed = int(seed) + sample_index
    return {
        "temperature": float(options.get("temperature", 0.0)),
        "max_tokens": int(options.get("max_tokens", 512)),
        "seed": seed,
        "json_schema": schema,
        "schema_name": rubric.structured_output.name if rubric.structured_output else "verdict",
        "top_logprobs": TOP_LOGPROBS if expected_scoring(rubric, options) else None,
    }


def judge_cache_key(
    rubric_version: str,
    judge_key: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    sample_index: int,
    reask: int,
    project: str | None = None,
) -> str:
    """Content address of one provider reply: rubric version, rendered prompt, judge, every request parameter
    (``request_options``), the self-consistency sample, the re-ask round and the project whose cache it is: one
    project never reads another's entries, nor learns from a hit that another judged the same text."""
    material = {
        "rubric_version": rubric_version,
        "judge": judge_key,
        "messages": messages,
        "temperature": params["temperature"],
        "max_tokens": params["max_tokens"],
        "seed": params["seed"],
        "schema": params["json_schema"],
        "schema_name": params["schema_name"],
        "sample": sample_index,
        "reask": reask,
    }
    if params.get("top_logprobs"):  # only then: the keys of every other request stay what they were
        material["top_logprobs"] = params["top_logprobs"]
    if project is not None:  # likewise: unscoped keys (default project, shared cache) are the keys of old
        material["project"] = project
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
