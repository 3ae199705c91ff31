"""The Python client's submission retries (dialogue_judge/client.py): one Idempotency-Key per submission, the same
on every retry; retried on connection errors and 5xx (honouring Retry-After) until ``retry_for`` runs out; never
on 4xx; other calls are not retried."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx
import pytest

from dialogue_judge.client import ApiClient, ApiError

CREATED = {"id": "run_0123456789abcdef", "status": "queued", "n_items": 1, "n_judgments": 2, "url": "/v1/runs/x"}
Step = Callable[[httpx.Request], httpx.Response]


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def cut(request: httpx.Request) -> httpx.Response:
    raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)


def answer(status: int, body: object = None, headers: dict[str, str] | None = None) -> Step:
    def step(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body if body is not None else {"detail": "x"}, headers=headers)

    return step


class Script:
    """A fake API that plays ``steps`` in order, one per request, and records what it was sent."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.steps.pop(0)(request)

    def client(self, **kwargs: object) -> ApiClient:
        options: dict[str, object] = {"backoff_base": 0.001, "backoff_max": 0.01, **kwargs}
        return ApiClient("http://api.test", transport=httpx.MockTransport(self), **options)  # type: ignore[arg-type]

    @property
    def keys(self) -> list[str | None]:
        return [r.headers.get("idempotency-key") for r in self.requests]


@pytest.mark.parametrize(
    "failures",
    [
        [refuse],
        [cut, cut],
        [answer(500), answer(502), answer(503, headers={"Retry-After": "0"})],
        [refuse, answer(504), cut],
    ],
)
def test_a_submission_is_retried_with_one_key(failures: list[Step]) -> None:
    script = Script(*failures, answer(202, CREATED))
    retries: list[tuple[int, float, str]] = []
    created = script.client(on_retry=lambda *a: retries.append(a)).create_run({"items": []})
    assert created == CREATED
    assert len(script.requests) == len(failures) + 1 and len(retries) == len(failures)
    assert len(set(script.keys)) == 1 and uuid.UUID(str(script.keys[0])).version == 4
    assert all(json.loads(r.content) == {"items": []} for r in script.requests)  # the same body each time
    assert [a for a, _, _ in retries] == list(range(1, len(failures) + 1))


def test_each_submission_has_its_own_key_and_a_given_key_is_used() -> None:
    script = Script(answer(202, CREATED), answer(202, CREATED), answer(202, CREATED))
    client = script.client()
    client.create_run({})
    client.create_run({})
    client.create_run({}, idempotency_key="ci-build-7")
    assert script.keys[0] != script.keys[1] and script.keys[2] == "ci-build-7"


def test_jsonl_submissions_carry_a_key_and_are_retried() -> None:
    script = Script(refuse, answer(202, CREATED))
    params = [("rubric", "rsum-single"), ("judge", "openai:gpt-4o")]
    assert script.client().create_run_jsonl(b'{"id": "i"}\n', params) == CREATED
    first, second = script.requests
    assert first.url.path == "/v1/runs/jsonl" and first.headers["content-type"] == "application/x-ndjson"
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert second.url.params.get_list("rubric") == ["rsum-single"] and second.content == b'{"id": "i"}\n'


@pytest.mark.parametrize("status", [400, 401, 404, 409, 413, 422, 429])
def test_4xx_is_not_retried(status: int) -> None:
    script = Script(answer(status, {"detail": f"no ({status})"}))
    with pytest.raises(ApiError) as caught:
        script.client().create_run({})
    assert caught.value.status_code == status and f"no ({status})" in caught.value.message
    assert len(script.requests) == 1


def test_giving_up_after_retry_for_says_how_often_it_tried() -> None:
    script = Script(*[refuse] * 1000)
    with pytest.raises(ApiError) as caught:
        script.client(retry_for=0.2, backoff_base=0.02, backoff_max=0.02).create_run({})
    assert caught.value.status_code == 0
    assert "cannot reach the API at http://api.test" in caught.value.message
    assert f"tried {len(script.requests)} times" in caught.value.message and len(script.requests) >= 5
    five_hundreds = Script(*[answer(503, {"detail": "database away"})] * 1000)
    with pytest.raises(ApiError) as caught:
        five_hundreds.client(retry_for=0.1).create_run({})
    assert caught.value.status_code == 503 and "database away" in caught.value.message


def test_retry_after_is_honoured_within_the_budget() -> None:
    script = Script(answer(503, headers={"Retry-After": "0.3"}), answer(202, CREATED))
    waits: list[float] = []
    script.client(on_retry=lambda _a, delay, _p: waits.append(delay)).create_run({})
    assert waits == [pytest.approx(0.3)]
    capped = Script(answer(503, headers={"Retry-After": "3600"}), answer(202, CREATED))
    capped.client(retry_for=0.2, on_retry=lambda _a, delay, _p: waits.append(delay)).create_run({})
    assert waits[1] <= 0.2  # never past the retry budget


def test_a_bad_url_is_not_retried() -> None:
    client = ApiClient("ftp://api.test", retry_for=5)
    with pytest.raises(ApiError, match="cannot reach the API") as caught:
        client.create_run({})
    assert "tried" not in caught.value.message


def test_a_timeout_is_retried() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    script = Script(slow, answer(202, CREATED))
    assert script.client().create_run({}) == CREATED and len(set(script.keys)) == 1


def test_retry_for_zero_and_other_calls_fail_at_once() -> None:
    script = Script(refuse)
    with pytest.raises(ApiError, match="cannot reach the API"):
        script.client(retry_for=0).create_run({})
    reads = Script(refuse, answer(503))
    client = reads.client()
    with pytest.raises(ApiError):
        client.run("run_x")
    with pytest.raises(ApiError):
        client.post("/v1/runs/run_x/retry", {})
    assert len(reads.requests) == 2
