"""The judge cache's side of a judgment: whose entries it may use (``cache_scope``), its key (``cache_key``), the
run's cache option (``cache_mode``), the row a paid reply is stored as (``cache_row``) and the reply an entry stores
(``cached_reply``)."""

from __future__ import annotations

from typing import Any

from judge_api.cachekeys import judge_cache_key
from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from judge_api.models import utcnow
from judge_api.repository.claims import JudgmentTask
from judge_api.repository.projects import DEFAULT_PROJECT
from judge_api.rubrics import Rubric
from workers.clients import JudgeReply, JudgeRequest


def cache_scope(judgment: JudgmentTask, settings: Settings) -> str | None:
    """Whose cache entries a judgment may read and write: its run's project, or None for the unscoped keys (the
    shared cache of a single-tenant deployment, ``DJ_SHARED_CACHE``, and the default project, whose keys stay those
    derived before the cache was scoped, so an existing cache stays valid)."""
    if settings.cache_shared or judgment.project_id == DEFAULT_PROJECT:
        return None
    return judgment.project_id


def cache_key(
    rubric: Rubric, spec: JudgeSpec, request: JudgeRequest, sample_index: int, reask: int, project: str | None = None
) -> str:
    """The judge cache's key of a request (judge_api.cachekeys.judge_cache_key)."""
    params = {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "json_schema": request.json_schema,
        "schema_name": request.schema_name,
        "top_logprobs": request.top_logprobs,
    }
    return judge_cache_key(rubric.version, spec.key, request.messages, params, sample_index, reask, project)


def cache_mode(judgment: JudgmentTask) -> str:
    """The run's ``options.cache``: 'use' (read and write the judge cache), 'refresh' (ask again and replace the
    entry), 'off' (neither read nor write). Judgments planned before the option existed use the cache."""
    return str(judgment.judge_params.get("cache") or "use")


def cache_row(key: str, spec: JudgeSpec, reply: JudgeReply) -> dict[str, Any]:
    return {
        "key": key,
        "judge": spec.key,
        "raw_output": reply.text,
        "finish_reason": reply.finish_reason,
        "structured": reply.structured,
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "created_at": utcnow(),
        "logprobs": reply.logprobs,
    }


def cached_reply(entry: Any) -> JudgeReply:
    """A cache entry (row) as the reply it stores; no latency, nothing paid."""
    return JudgeReply(
        entry.raw_output,
        entry.finish_reason,
        entry.input_tokens,
        entry.output_tokens,
        0.0,
        entry.structured,
        getattr(entry, "logprobs", None),
    )
