"""What the workers may call: the one rule for judges and systems under test, applied where a run is submitted
(``POST /v1/runs``: planning and ``routers.runs.check_systems``, a 422 naming the field) and again by the workers at
the point of use (``workers.asking`` before a judgment is rendered or asked, ``workers.clients`` when a judge client
is built, ``workers.responders.stored`` before a generation's responder is built), so a row stored by any path (an
imported bundle, a row written by hand) cannot get past it.

* An openai-compatible base URL (a judge, or a chat model behind a strategy) and an ``http:`` responder's URL must be
  under DJ_JUDGE_URL_ALLOWLIST; without an allowlist any URL while auth is off, none once auth is on
  (``Settings.judge_url_allowed``).
* A ``python:`` responder imports and runs a module of the caller's choosing in the worker: refused while auth is on.

Each function returns the reason a call is refused, or None when it may go ahead.
"""

from __future__ import annotations

from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from judge_api.responders import ResponderSpec


def judge_refusal(spec: JudgeSpec, settings: Settings) -> str | None:
    """Why the workers may not ask this judge, or None (only openai-compatible judges name a URL)."""
    if spec.base_url is None:
        return None
    if settings.judge_url_allowed(spec.base_url):
        return None
    return (
        f"base URL {spec.base_url!r} is not in DJ_JUDGE_URL_ALLOWLIST (openai-compatible judges must be "
        "allow-listed by the operator when auth is on)"
    )


def responder_refusal(spec: ResponderSpec, settings: Settings) -> str | None:
    """Why the workers may not run this system under test, or None."""
    if spec.kind == "python":
        if settings.auth_enabled:
            return (
                f"{spec.key!r}: python responders run in-process on the workers and are refused when auth is on "
                "(DJ_AUTH); serve the system over HTTP ('http:<url>') or generate with 'dialogue-judge generate'"
            )
        return None
    url = spec.url if spec.kind == "http" else spec.model.base_url if spec.model is not None else None
    if url is not None and not settings.judge_url_allowed(url):
        return (
            f"URL {url!r} is not in DJ_JUDGE_URL_ALLOWLIST (the workers call only allow-listed URLs for systems, "
            "as for judges, when auth is on)"
        )
    return None
