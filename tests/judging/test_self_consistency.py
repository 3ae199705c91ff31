"""Self-consistency: n samples per judgment at temperature > 0, each its own row (``sample_index``) with its own
seed and its own cache entry; temperature 0 with several samples is refused."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from pydantic import ValidationError

from judge_api.schemas import JudgeOptions, RunCreate

from .harness import Harness, dialogue_item

PLANTED = {"good": 80, "bad": 30}


def items(n: int) -> list[dict]:
    return [dialogue_item(f"i{k}", {s: f"Reply {k} from {s}. <<q={q}>>" for s, q in PLANTED.items()}) for k in range(n)]


def test_samples_are_rows_with_their_own_seeds(harness: Harness) -> None:
    harness.sim.set_script({"sample_jitter": 6})
    request: dict[str, Any] = {
        "items": items(3),
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
        "options": {"samples": 3, "temperature": 0.7, "seed": 11},
    }
    run_id = harness.run(**request)
    rows = harness.rows(run_id)
    assert len(rows) == 3 * 2 * 3 and harness.calls() == 18
    samples: dict[tuple[str, str], list] = defaultdict(list)
    for row in rows:
        samples[row.item_key, row.system_a].append(row)
    for (_, system), group in samples.items():
        assert sorted(r.sample_index for r in group) == [0, 1, 2]
        assert all(r.status == "done" and r.judge_params["temperature"] == 0.7 for r in group)
        assert all(abs(r.score - PLANTED[system]) <= 6 for r in group)
    # each sample was sent with its own seed ...
    bodies = [r["body"] for r in harness.sim.requests(18)]
    assert sorted({b["seed"] for b in bodies}) == [11, 12, 13] and all(b["temperature"] == 0.7 for b in bodies)
    # ... so the samples really differ (the simulator's jitter depends on the seed)
    assert any(len({r.score for r in group}) > 1 for group in samples.values())

    # re-running is served from the cache sample by sample (the sample index is part of the key)
    harness.sim.reset()
    rerun = harness.run(**request)
    assert harness.calls() == 0
    assert [(r.sample_index, r.score) for r in harness.rows(rerun)] == [(r.sample_index, r.score) for r in rows]


def test_samples_without_a_seed_are_still_separate_calls(harness: Harness) -> None:
    """No seed (or a provider without seeds): the requests are identical, only the sample index tells them apart."""
    run_id = harness.run(
        items=items(1),
        rubrics=["rsum-single"],
        judges=[harness.judge("anthropic")],
        aspects=["consistency"],
        options={"samples": 4, "temperature": 1.0, "seed": None},
    )
    rows = harness.rows(run_id)
    assert len(rows) == 8 and harness.calls() == 8 and not any(r.cached for r in rows)
    assert all("seed" not in r["body"] for r in harness.sim.requests(8))


def test_pairwise_samples_per_order(harness: Harness) -> None:
    run_id = harness.run(
        items=[dialogue_item("p", {"a": "Rex! <<q=90>>", "b": "Cat. <<q=10>>"})],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        options={"samples": 3, "temperature": 0.5},
    )
    rows = harness.rows(run_id)
    assert sorted((r.order, r.sample_index) for r in rows) == [(o, s) for o in ("ab", "ba") for s in range(3)]
    assert all(r.outcome == "win" for r in rows)


@pytest.mark.parametrize("options", [{"samples": 3}, {"samples": 2, "temperature": 0}])
def test_several_samples_at_temperature_zero_are_refused(options: dict) -> None:
    with pytest.raises(ValidationError) as error:
        RunCreate.model_validate(
            {"items": items(1), "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"], "options": options}
        )
    (detail,) = error.value.errors()
    assert detail["loc"] == ("options",)
    assert "samples > 1 needs temperature > 0" in detail["msg"]
    assert JudgeOptions(samples=3, temperature=0.2).samples == 3
