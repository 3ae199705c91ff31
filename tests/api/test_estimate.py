"""POST /v1/runs/estimate (issue 24 item 4): the same body as POST /v1/runs, nothing stored, nothing called; the
judgment count is what the run plans, tokens counted with OpenAI's tokenizer, costs from the price table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from judge_api.judges import parse_judge
from judge_api.pricing import load_prices
from judge_api.prompting import render
from judge_api.rubrics import get_registry
from judge_api.tokens import count_messages

from .conftest import JUDGE, Api, item, run_body

HISTORY = [
    {"speaker": "user" if k % 2 == 0 else "bot", "text": f"Turn {k:03d}: we talked about Rex the beagle and the coast."}
    for k in range(160)
]


def long_body(judge: str, n_items: int = 3, systems: tuple[str, ...] = ("a", "b", "c", "d")) -> dict[str, Any]:
    items = []
    for i in range(n_items):
        it = item(i, systems)
        it["dialogue"] = [*HISTORY, {"speaker": "user", "text": f"Question {i}: what is my dog's name?"}]
        items.append(it)
    return {"items": items, "rubrics": ["memochat-consistency"], "judges": [judge]}


@pytest.mark.parametrize(
    "body",
    [
        run_body(3),
        run_body(2, mode=["pairwise"], rubrics=["rsum-pairwise"], aspects=["overall"], orders="both"),
        run_body(2, aspects=["consistency", "coherence"], judges=[JUDGE, "openai:gpt-4o"]),
    ],
)
def test_judgment_count_is_what_the_run_plans_and_nothing_is_stored(api: Api, body: dict[str, Any]) -> None:
    before = api.row_counts()
    response = api.client.post("/v1/runs/estimate", json=body)
    assert response.status_code == 200, response.text
    estimate = response.json()
    assert api.row_counts() == before  # nothing stored
    created = api.submit(body=body)
    assert estimate["judgments"] == created["n_judgments"]
    assert estimate["provider_calls"] + estimate["cached_judgments"] <= estimate["judgments"]


def test_tokens_and_costs_of_an_openai_judge(api: Api) -> None:
    body = long_body("openai:gpt-4o")
    estimate = api.client.post("/v1/runs/estimate", json=body).json()
    assert estimate["judgments"] == 12 and estimate["provider_calls"] == 12 and estimate["cached_judgments"] == 0
    rubric = get_registry().get("memochat-consistency")
    spec = parse_judge("openai:gpt-4o")
    expected_in = sum(
        count_messages(spec, render(rubric, it, "consistency", text).messages)
        for it in body["items"]
        for text in it["candidates"].values()
    )
    assert estimate["input_tokens"] == expected_in
    (judge,) = estimate["per_judge"]
    assert judge["tokenizer"] == "o200k_base" and judge["priced"]
    # per item, 3 of 4 candidates read the shared history from the prompt cache (128-token steps)
    assert estimate["cached_input_tokens"] > 0 and estimate["cached_input_tokens"] % 128 == 0
    assert estimate["cached_input_tokens"] > 9 * 0.8 * (expected_in / 12)
    price = load_prices().for_spec(spec)
    out = estimate["output_tokens"]
    cached = estimate["cached_input_tokens"]
    realtime = ((expected_in - cached) * price.input + cached * price.cached_input + out * price.output) / 1e6
    assert estimate["cost_usd"]["realtime"] == pytest.approx(realtime)
    assert estimate["cost_usd"]["batch"] == pytest.approx(realtime * 0.5)
    assert estimate["cost_usd"]["list"] == pytest.approx((expected_in * price.input + out * price.output) / 1e6)
    assert estimate["seconds"] is None and any("rate limit" in n for n in estimate["notes"])


def test_seconds_at_the_configured_rate_limit(api_factory: Any) -> None:
    api = api_factory(DJ_RATE_LIMITS="openai:gpt-4o=60/0")
    estimate = api.client.post("/v1/runs/estimate", json=long_body("openai:gpt-4o", n_items=2)).json()
    assert estimate["seconds"] == pytest.approx(8 * 60 / 60)


def test_anthropic_judge_is_approximated_and_says_so(api: Api) -> None:
    estimate = api.client.post("/v1/runs/estimate", json=long_body("anthropic:claude-sonnet-4-5")).json()
    (judge,) = estimate["per_judge"]
    assert judge["tokenizer"].startswith("approximate")
    assert judge["cache_write_tokens"] > 0 and judge["cached_input_tokens"] == 3 * judge["cache_write_tokens"]
    assert any("approximated" in n for n in estimate["notes"])


def test_bad_body_is_a_422_naming_the_field(api: Api) -> None:
    response = api.client.post("/v1/runs/estimate", json=run_body(1, rubrics=["no-such-rubric"]))
    assert response.status_code == 422
    assert "rubrics" in response.text


def test_cli_submit_estimate_submits_nothing(api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from dialogue_judge.cli import app, submit
    from dialogue_judge.client import ApiClient

    def client(url: str | None = None, key: str | None = None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)  # the TestClient (an httpx2.Client) serves the app
        return wrapped

    monkeypatch.setattr(submit, "api_client", client)
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(it) for it in long_body("openai:gpt-4o")["items"]))
    before = api.row_counts()
    result = CliRunner().invoke(
        app,
        ["submit", str(items), "--judge", "openai:gpt-4o", "--rubric", "memochat-consistency", "--estimate"],
    )
    assert result.exit_code == 0, result.output
    assert "judgments         12" in result.stdout and "cost USD" in result.stdout and "batch" in result.stdout
    assert api.row_counts() == before


def test_every_shipped_rubric_states_its_reply_length_and_the_notes_say_where_it_comes_from(api: Api) -> None:
    registry = get_registry()
    shipped = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "rubrics").iterdir() if p.is_dir())
    assert shipped and all(registry.get(name).typical_reply_tokens for name in shipped)
    # a bare JSON score replies with a few tokens, an explanation with more, a fact-by-fact JSON with more still
    assert cast(int, registry.get("geval-consistency").typical_reply_tokens) < 10
    assert 40 < cast(int, registry.get("memochat-consistency").typical_reply_tokens) < 150
    assert cast(int, registry.get("fact-check").typical_reply_tokens) > cast(
        int, registry.get("memochat-consistency").typical_reply_tokens
    )
    estimate = api.client.post("/v1/runs/estimate", json=long_body("openai:gpt-4o")).json()
    stated = cast(int, registry.get("memochat-consistency").typical_reply_tokens)
    assert estimate["output_tokens"] == 12 * stated
    (note,) = [n for n in estimate["notes"] if n.startswith("memochat-consistency:")]
    assert f"{stated} output tokens a reply" in note and "typical_reply_tokens its rubric.yaml states" in note
    capped = api.client.post("/v1/runs/estimate", json={**long_body("openai:gpt-4o"), "options": {"max_tokens": 20}})
    assert capped.json()["output_tokens"] == 12 * 20
    assert any("capped at max_tokens 20" in n for n in capped.json()["notes"])


def test_a_judge_the_price_table_does_not_list_has_an_unknown_cost_not_zero(api: Api) -> None:
    body = long_body("openai:gpt-4o", n_items=1)
    body["judges"] = ["openai:gpt-4o", "openai:gpt-5.4"]  # gpt-5.4 is in the SDK's list, not in the table
    response = api.client.post("/v1/runs/estimate", json=body)
    assert response.status_code == 200, response.text
    estimate = response.json()
    assert estimate["cost_usd"] is None and estimate["unpriced_judges"] == ["openai:gpt-5.4"]
    judges = {j["judge"]: j for j in estimate["per_judge"]}
    unpriced, priced = judges["openai:gpt-5.4"], judges["openai:gpt-4o"]
    assert unpriced["cost_usd"] is None and not unpriced["priced"] and unpriced["provider_calls"] == 4
    assert unpriced["input_tokens"] > 0  # the tokens are still counted
    assert priced["priced"] and priced["cost_usd"]["realtime"] > 0  # the priced judge keeps its figures
    (note,) = [n for n in estimate["notes"] if "cost unknown" in n]
    assert note.startswith("openai:gpt-5.4: ") and "budget_usd is refused" in note


def test_a_priced_run_has_no_unpriced_judges(api: Api) -> None:
    estimate = api.client.post("/v1/runs/estimate", json=long_body("anthropic:claude-sonnet-4-6", n_items=1)).json()
    assert estimate["unpriced_judges"] == [] and estimate["cost_usd"]["realtime"] > 0


def test_cli_estimate_prints_an_unknown_cost(api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from dialogue_judge.cli import app, submit
    from dialogue_judge.client import ApiClient

    def client(url: str | None = None, key: str | None = None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)
        return wrapped

    monkeypatch.setattr(submit, "api_client", client)
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(it) for it in long_body("openai:gpt-5.5")["items"]))
    args = ["submit", str(items), "--judge", "openai:gpt-5.5", "--rubric", "memochat-consistency"]
    result = CliRunner().invoke(app, [*args, "--estimate"])
    assert result.exit_code == 0, result.output
    assert "cost USD          unknown: not in the price table: openai:gpt-5.5" in result.stdout
    before = api.row_counts()
    refused = CliRunner().invoke(app, [*args, "--budget", "1"])
    assert refused.exit_code == 2 and "budget_usd" in refused.output and "openai:gpt-5.5" in refused.output
    assert api.row_counts() == before


# --- calibration from the project's own history (issue 24: the estimate within +-15 % of the bill) ---

CLAUDE = "anthropic:claude-sonnet-4-6"


def _history_run(api: Api, judge: str, key: str | None, n_items: int = 5) -> tuple[str, Any]:
    """A run of ``n_items`` x 4 judgments of memochat-consistency, and an engine on its database."""
    from sqlalchemy import create_engine

    created = api.submit(key, body=long_body(judge, n_items=n_items))
    return created["id"], create_engine(api.database_url)


def _plant(engine: Any, run_id: str, outputs: list[int], **fields: Any) -> list[dict[str, Any]]:
    """Mark the run's first ``len(outputs)`` judgments (by id) succeeded by a call with those output tokens and, per
    judgment, input tokens of 4 characters a token plus the request's overhead: as a judge would have recorded them.
    Returns the planted rows (id, item payload, system, input tokens)."""
    from sqlalchemy import text

    rubric = get_registry().get("memochat-consistency")
    with engine.begin() as connection:
        rows = connection.execute(
            text(
                "SELECT j.id, j.system_a, i.payload FROM judgments j JOIN items i ON i.id = j.item_pk "
                "WHERE j.run_id = :r ORDER BY j.id"
            ),
            {"r": run_id},
        ).all()
        planted = []
        for (judgment_id, system, payload), output in zip(rows, outputs, strict=False):
            it = payload if isinstance(payload, dict) else json.loads(payload)
            messages = render(rubric, it, "consistency", it["candidates"][system]).messages
            chars = sum(len(m["content"]) for m in messages)
            values = {
                "status": "done",
                "provider_calls": 1,
                "cached": False,
                "output_tokens": output,
                "input_tokens": chars // 4 + 4 * len(messages) + 3,
                **fields,
            }
            assignments = ", ".join(f"{name} = :{name}" for name in values)
            connection.execute(
                text(f"UPDATE judgments SET {assignments} WHERE id = :id"), {**values, "id": judgment_id}
            )
            planted.append({"chars": chars, "input_tokens": values["input_tokens"], "messages": messages})
    return planted


def _claude_input(body: dict[str, Any], chars_per_token: float) -> int:
    """The estimator's input tokens of ``body``'s prompts at ``chars_per_token`` (4 per message, 3 a request)."""
    rubric = get_registry().get("memochat-consistency")
    total = 0
    for it in body["items"]:
        for response in it["candidates"].values():
            messages = render(rubric, it, "consistency", response).messages
            total += sum(round(len(m["content"]) / chars_per_token) + 4 for m in messages) + 3
    return total


def test_the_estimate_is_calibrated_from_the_projects_own_judgments(api_factory: Any, db_url: str) -> None:
    api = api_factory(auth=True, database_url=db_url)
    api.create_key("alpha", ["submit", "read"], "alpha")
    api.create_key("beta", ["submit", "read"], "beta")
    run_id, engine = _history_run(api, CLAUDE, "alpha")
    planted = _plant(engine, run_id, [30] * 10 + [16] * 10)  # a mean reply of 23 tokens
    engine.dispose()
    body = long_body(CLAUDE)  # 12 calls
    before = api.row_counts()
    response = api.client.post("/v1/runs/estimate", json=body, headers=api.as_key("alpha"))
    assert response.status_code == 200, response.text
    assert api.row_counts() == before  # still nothing stored
    estimate = response.json()
    assert estimate["output_tokens"] == 12 * 23  # the stated figure gives 12 x 75
    (judge,) = estimate["per_judge"]
    assert judge["reply_tokens"] == [
        {"rubric": "memochat-consistency", "tokens": 23.0, "source": "calibrated", "earlier_judgments": 20}
    ]
    ratio = sum(p["chars"] for p in planted) / sum(p["input_tokens"] - 4 * len(p["messages"]) - 3 for p in planted)
    assert 3.99 < ratio < 4.01
    assert estimate["input_tokens"] == _claude_input(body, ratio)
    assert estimate["input_tokens"] < _claude_input(body, 3.8)  # the stated approximation counts more
    assert judge["tokenizer"] == f"approximate ({ratio:.2f} characters a token, calibrated from 20 earlier judgments)"
    notes = estimate["notes"]
    assert any(
        f"memochat-consistency by {CLAUDE}: 23.0 output tokens a reply, calibrated from 20 earlier judgments" in n
        for n in notes
    )
    assert any(n.startswith(f"{CLAUDE}: input tokens at {ratio:.2f} characters a token, calibrated") for n in notes)
    assert not any(n.startswith("memochat-consistency: 75 output tokens") for n in notes)
    # the cost follows the calibrated tokens (Anthropic: a prefix written once per item, read by the rest)
    price = load_prices().for_spec(parse_judge(CLAUDE))
    cost = (
        (estimate["input_tokens"] - judge["cached_input_tokens"] - judge["cache_write_tokens"]) * price.input
        + judge["cached_input_tokens"] * price.cached_input
        + judge["cache_write_tokens"] * price.cache_write
        + 12 * 23 * price.output
    ) / 1e6
    assert estimate["cost_usd"]["realtime"] == pytest.approx(cost)

    # another project's history is not this one's: beta sees the stated figures
    other = api.client.post("/v1/runs/estimate", json=body, headers=api.as_key("beta")).json()
    assert other["output_tokens"] == 12 * 75
    assert other["input_tokens"] == _claude_input(body, 3.8)
    assert other["per_judge"][0]["reply_tokens"][0]["source"] == "stated"
    assert other["per_judge"][0]["reply_tokens"][0]["earlier_judgments"] == 0
    # bad input is refused as before, history or not
    bad = api.client.post(
        "/v1/runs/estimate", json={**body, "rubrics": ["no-such-rubric"]}, headers=api.as_key("alpha")
    )
    assert bad.status_code == 422 and "rubrics" in bad.text
    assert api.row_counts() == before


def test_fewer_than_the_threshold_or_unusable_judgments_leave_the_stated_figure(api: Api) -> None:
    from sqlalchemy import text

    run_id, engine = _history_run(api, "openai:gpt-4o", None)
    planted = _plant(engine, run_id, [40] * 20)
    last = "(SELECT MAX(id) FROM judgments WHERE run_id = :r)"
    with engine.begin() as connection:  # the 20th still pending: 19 usable
        connection.execute(text(f"UPDATE judgments SET status = 'pending' WHERE id = {last}"), {"r": run_id})
    body = long_body("openai:gpt-4o")

    def estimated() -> dict[str, Any]:
        return dict(api.client.post("/v1/runs/estimate", json=body).json())

    stated = estimated()
    assert stated["output_tokens"] == 12 * 75
    assert stated["per_judge"][0]["reply_tokens"][0]["earlier_judgments"] == 19
    assert stated["per_judge"][0]["tokenizer"] == "o200k_base"
    (note,) = [n for n in stated["notes"] if n.startswith("memochat-consistency:")]
    assert "75 output tokens a reply" in note and "Not calibrated" in note and "openai:gpt-4o 19" in note
    # the 20th judgment is a judge-cache hit, failed, of another rubric version, or made no call: still 19 usable
    version = "(SELECT MIN(rubric_version) FROM judgments)"
    for change in ("cached = true", "status = 'failed'", "rubric_version = 'older'", "provider_calls = 0"):
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE judgments SET status = 'done', provider_calls = 1, cached = false, "
                    f"rubric_version = {version} WHERE id = {last}"
                ),
                {"r": run_id},
            )
            connection.execute(text(f"UPDATE judgments SET {change} WHERE id = {last}"), {"r": run_id})
        figures = estimated()
        assert figures["output_tokens"] == 12 * 75, change
        assert figures["input_tokens"] == stated["input_tokens"], change
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE judgments SET provider_calls = 1 WHERE id = {last}"), {"r": run_id})
    calibrated = estimated()
    engine.dispose()
    assert calibrated["output_tokens"] == 12 * 40
    # OpenAI's tokenizer still counts the input, scaled by what the provider recorded over what it counted
    spec = parse_judge("openai:gpt-4o")
    scale = sum(p["input_tokens"] for p in planted) / sum(count_messages(spec, p["messages"]) for p in planted)
    assert 0.85 < scale < 0.95  # o200k counts more tokens on this text than 4 characters a token (as planted)
    rubric = get_registry().get("memochat-consistency")
    prompts = [render(rubric, it, "consistency", r).messages for it in body["items"] for r in it["candidates"].values()]
    assert stated["input_tokens"] == sum(count_messages(spec, m) for m in prompts)
    assert calibrated["input_tokens"] == sum(round(count_messages(spec, m) * scale) for m in prompts)
    judge = calibrated["per_judge"][0]
    assert judge["tokenizer"] == f"o200k_base x {scale:.3f} (calibrated from 20 earlier judgments)"
    assert judge["cached_input_tokens"] < stated["per_judge"][0]["cached_input_tokens"]  # the prefix scaled too
    assert judge["cached_input_tokens"] % 128 == 0
    prefix = f"openai:gpt-4o: input tokens counted with its tokenizer x {scale:.3f}, calibrated from 20"
    assert any(n.startswith(prefix) for n in calibrated["notes"])
    # capped by the run's max_tokens as the stated figure is
    capped = api.client.post("/v1/runs/estimate", json={**body, "options": {"max_tokens": 30}}).json()
    assert capped["output_tokens"] == 12 * 30


def test_the_reply_length_is_the_mean_of_the_most_recent_judgments(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from judge_api import estimate

    monkeypatch.setattr(estimate, "CALIBRATION_WINDOW", 10)
    monkeypatch.setattr(estimate, "MIN_CALIBRATION", 10)
    run_id, engine = _history_run(api, "openai:gpt-4o", None)
    _plant(engine, run_id, [100] * 10 + [20] * 10)  # by id: the older ten replied with 100, the newer with 20
    engine.dispose()
    figures = api.client.post("/v1/runs/estimate", json=long_body("openai:gpt-4o")).json()
    assert figures["output_tokens"] == 12 * 20
    assert figures["per_judge"][0]["reply_tokens"][0]["earlier_judgments"] == 10
