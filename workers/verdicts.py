"""A reply read as a verdict: parsed (with expected scoring when log-probabilities were asked for,
``parse_scored``), shaped into the judgment's stored values (``verdict_values``), and the request that asks again
for an unparseable one (``reask_request``)."""

from __future__ import annotations

from typing import Any

from judge_api.repository.claims import JudgmentTask
from judge_api.rubrics import DEFAULT_OUTCOME_MAP, Rubric
from workers.clients import JudgeReply, JudgeRequest
from workers.parsing import ParsedVerdict, parse_reply
from workers.scoring import apply_expected_scoring

REASK_MESSAGE = (
    "Your previous reply could not be read ({error}). Reply again, ending with your verdict strictly in the "
    "required format."
)


def parse_scored(
    reply: JudgeReply, rubric: Rubric, request: JudgeRequest, context: dict[str, Any] | None = None
) -> ParsedVerdict:
    """Parse a reply; with expected scoring (log-probabilities asked for) weight the score by them."""
    parsed = parse_reply(
        reply.text, rubric, finish_reason=reply.finish_reason, structured=reply.structured, context=context
    )
    if request.top_logprobs:
        parsed = apply_expected_scoring(parsed, rubric, reply.text, reply.logprobs, reply.structured is not None)
    return parsed


def verdict_values(rubric: Rubric, judgment: JudgmentTask, parsed: ParsedVerdict) -> dict[str, Any]:
    if not parsed.ok:
        return {"status": "unparseable", "error": parsed.error}
    values: dict[str, Any] = {
        "status": "done",
        "explanation": parsed.explanation,
        "error": None,
        "details": parsed.details or None,
    }
    if rubric.mode == "single":
        values["score"] = parsed.score
        return values
    assert parsed.preference is not None
    preference_for_a = parsed.preference if judgment.order != "ba" else -parsed.preference
    # the run's mapping over the rubric's over the default: every level has an outcome
    outcome_map = {
        **DEFAULT_OUTCOME_MAP,
        **rubric.outcome_map,
        **((judgment.judge_params or {}).get("outcome_map") or {}),
    }
    values.update(
        verdict=parsed.verdict,
        preference=float(preference_for_a),
        outcome=outcome_map[str(preference_for_a)],
    )
    return values


def reask_request(rubric: Rubric, request: JudgeRequest, reply: JudgeReply, parsed: ParsedVerdict) -> JudgeRequest:
    """The request that asks again for an unparseable reply: the rubric's extraction prompt over the reply, else
    the conversation so far and a reminder of the format."""
    if rubric.extraction_prompt:
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": rubric.extraction_prompt.replace("{judge_result}", reply.text)},
        ]
    else:
        messages = [
            *request.messages,
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": REASK_MESSAGE.format(error=parsed.error)},
        ]
    return JudgeRequest(
        messages,
        request.temperature,
        request.max_tokens,
        request.seed,
        request.json_schema,
        request.schema_name,
        request.top_logprobs,
    )
