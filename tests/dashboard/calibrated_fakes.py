"""The fake API's ``calibrated`` state (dashboard_fakes.FakeApi): runs for the Calibrated page.

``RUN_C``: 24 items x 2 systems scored 1-100 by a judge that overrates v1 by 45 points; people rated the first 12
items of both systems on 0-2 (v2 better), and a uniform label queue drew 16 items, of which the 12 rated ones
come first. ``RUN_N``: the same judgments, only 5 items rated (every calibrated row is null, with its note), no
queue. ``RUN_E``: the same judgments, no ratings, no queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

RUN_C, RUN_N, RUN_E = "run_cccc", "run_nnnn", "run_eeee"
N_ITEMS, N_RATED, N_QUEUE = 24, 12, 16
CENTRE = {"v1": 0.6, "v2": 1.4}
OVERRATED = {"v1": 45, "v2": 0}


def truth() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {s: np.round(np.clip(rng.normal(c, 0.3, N_ITEMS), 0.0, 2.0), 1) for s, c in CENTRE.items()}


def judge_score(system: str, i: int) -> float:
    return float(np.clip(np.round(1 + 49.5 * truth()[system][i] + OVERRATED[system]), 1, 100))


def item_id(i: int) -> str:
    return f"cal-{i}"


def make_items() -> list[dict[str, Any]]:
    return [
        {
            "id": item_id(i),
            "dialogue": [{"speaker": "user", "text": f"Do you remember my dog Rex? ({i})", "session": 1}],
            "persona": None,
            "memory": None,
            "reference": None,
            "candidates": {s: f"Answer from {s} about Rex {i}. <<q={judge_score(s, i):g}>>" for s in CENTRE},
            "meta": {},
        }
        for i in range(N_ITEMS)
    ]


def make_judgments(run_id: str, row: Callable[..., dict[str, Any]], first_id: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(N_ITEMS):
        for k, system in enumerate(CENTRE):
            rows.append(
                row(
                    run_id,
                    first_id + 2 * i + k,
                    item_id=item_id(i),
                    mode="single",
                    system_a=system,
                    rubric_id="rsum-single",
                    aspect="consistency",
                    score=judge_score(system, i),
                    status="done",
                    explanation=f"{system}: fine.",
                )
            )
    return rows


def rating(i: int, system: str, value: float, rater: str = "h1") -> dict[str, Any]:
    return {
        "item_id": item_id(i),
        "system": system,
        "system_b": None,
        "aspect": "consistency",
        "rater": rater,
        "kind": "score",
        "value": value,
        "scale_min": 0.0,
        "scale_max": 2.0,
        "turn": None,
        "tie_inconsistent": False,
    }


def make_ratings(n_rated: int) -> list[dict[str, Any]]:
    values = truth()
    return [rating(i, s, float(values[s][i])) for i in range(n_rated) for s in CENTRE]


def label_queue(run_id: str, ratings: list[dict[str, Any]]) -> dict[str, Any]:
    """``GET /label-queue`` of RUN_C as the API answers it, with what is labeled now."""
    labeled = {str(r["item_id"]) for r in ratings if r.get("kind", "score") == "score"}
    items = [
        {
            "position": p,
            "item_id": item_id(p),
            "inclusion_probability": N_QUEUE / N_ITEMS,
            "labeled": item_id(p) in labeled,
        }
        for p in range(N_QUEUE)
    ]
    return {
        "run_id": run_id,
        "strategy": "uniform",
        "seed": 3,
        "n_requested": N_QUEUE,
        "n_drawn": N_QUEUE,
        "n_eligible": N_ITEMS,
        "n_labeled": sum(1 for i in items if i["labeled"]),
        "items": items,
    }
