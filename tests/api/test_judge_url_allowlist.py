"""openai-compatible judges name a base URL; the operator's OPENAI_COMPATIBLE_API_KEY must only go where the
operator allows (DJ_JUDGE_URL_ALLOWLIST), and with auth on nowhere unless allow-listed."""

from __future__ import annotations

import pytest

from judge_api.config import Settings
from judge_api.judges import parse_judge
from judge_api.planning import PlanError, plan_run
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from workers.clients import JudgeCallError, OpenAIJudgeClient


@pytest.mark.parametrize(
    ("allowlist", "auth", "url", "allowed"),
    [
        ("", False, "http://127.0.0.1:9000/v1", True),
        ("", True, "http://127.0.0.1:9000/v1", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1", True),
        ("http://vllm.internal:8000", True, "http://vllm.internal:8000/v1", True),
        ("http://vllm.internal:8000", True, "http://vllm.internal:8000.evil.com/v1", False),
        ("http://vllm.internal:8000/v1", False, "http://attacker.example/v1", False),
        ("http://a:1/v1, http://b:2/v1", True, "http://b:2/v1", True),
        # issue 42: a dot segment would take the request out of the prefix (httpx sends /v1/../admin as /admin)
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/../admin", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/%2e%2e/admin", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/%2E./admin", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/./chat", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/..%5cadmin", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/%2e%2e%2fadmin", False),
        ("http://vllm.internal:8000/v1", True, "http://vllm.internal:8000/v1/chat..x", True),
    ],
)
def test_allowlist_rule(allowlist: str, auth: bool, url: str, allowed: bool) -> None:
    settings = Settings(DJ_JUDGE_URL_ALLOWLIST=allowlist, DJ_AUTH=auth)
    assert settings.judge_url_allowed(url) is allowed


def test_planning_rejects_and_client_refuses_an_unlisted_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from judge_api.config import reset_settings_cache

    monkeypatch.setenv("DJ_JUDGE_URL_ALLOWLIST", "http://vllm.internal:8000/v1")
    reset_settings_cache()
    try:
        request = RunCreate.model_validate(
            {
                "items": [{"id": "i", "candidates": {"a": "hi"}}],
                "rubrics": ["rsum-single"],
                "judges": ["openai-compatible:m@http://attacker.example/v1"],
            }
        )
        with pytest.raises(PlanError) as error:
            plan_run(request, get_registry(), 1000)
        assert error.value.field == "judges[0]" and "DJ_JUDGE_URL_ALLOWLIST" in error.value.message
        settings = Settings(DJ_JUDGE_URL_ALLOWLIST="http://vllm.internal:8000/v1")
        with pytest.raises(JudgeCallError) as refused:
            OpenAIJudgeClient(parse_judge("openai-compatible:m@http://attacker.example/v1"), settings)
        assert not refused.value.retryable
    finally:
        reset_settings_cache()
