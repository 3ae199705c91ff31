"""A run judged by the simulator whose judge overrates some systems: the fixture of the calibrated API and CLI tests.

The simulator scores each candidate by its ``<<q=..>>`` marker; a system's markers sit ``overrated[system]`` points
above what people think of its replies (the truth, on the seed paper's 0-2 scale)."""

from __future__ import annotations

import numpy as np

from judge_api.db import session_scope
from judge_api.repository import claims
from judge_simulator.process import SimulatorProcess
from workers.runtime import build_engine

from .conftest import Api


def judge_overrated_run(
    api: Api,
    sim: SimulatorProcess,
    n_items: int,
    centres: dict[str, float],
    overrated: dict[str, int],
    seed: int,
) -> tuple[str, dict[str, np.ndarray]]:
    """Submit the run, judge every judgment in process, and give its id and each system's true item scores."""
    sim.reset(restore_script=True)
    rng = np.random.default_rng(seed)
    truth = {s: np.round(np.clip(rng.normal(c, 0.3, n_items), 0.0, 2.0), 1) for s, c in centres.items()}
    quality = {s: np.clip(np.round(1 + 49.5 * truth[s] + overrated[s]), 1, 100).astype(int) for s in truth}
    body = {
        "items": [
            {
                "id": f"it{i}",
                "dialogue": [{"speaker": "user", "text": "Remember my sister Ann?"}],
                "candidates": {s: f"reply {s} {i} <<q={quality[s][i]}>>" for s in truth},
            }
            for i in range(n_items)
        ],
        "rubrics": ["rsum-single"],
        "judges": [f"openai-compatible:sim@{sim.base_url}"],
        "aspects": ["consistency"],
    }
    run_id = api.submit(None, body)["id"]
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, run_id)
    assert {engine.judge(i) for i in ids} == {"done"}
    return run_id, truth
