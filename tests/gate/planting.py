"""Planted fixture data for the gate tests: ``<<q=NN>>`` markers that the loopback judge simulator turns into
exactly that score (single mode) or quality (pairwise mode)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from judge_simulator.process import SimulatorProcess


@dataclass
class Planted:
    """Fixture files for one planted comparison."""

    baseline: Path
    """Full items file, one system ``v1``."""
    candidate: Path
    """Full items file, one system ``v2``."""
    items: Path
    """The shared contexts (no candidates)."""
    responses: Path
    """The candidate as a responses file (``{"id", "response"}`` per line)."""
    baseline_scores: np.ndarray
    candidate_scores: np.ndarray

    @property
    def true_drop(self) -> float:
        return float((self.baseline_scores - self.candidate_scores).mean())


def context(i: int) -> dict[str, object]:
    return {
        "id": f"item-{i:03d}",
        "dialogue": [
            {"speaker": "user", "text": f"I adopted a dog called Rex {i % 7 + 1} years ago.", "session": 1},
            {"speaker": "bot", "text": "How lovely! What breed is he?", "session": 1},
            {"speaker": "user", "text": f"A beagle. Do you remember his name? (conversation {i})", "session": 2},
        ],
        "persona": {"user": ["I have a beagle called Rex."], "bot": ["I like animals."]},
    }


def plant(folder: Path, n: int, shift: float, *, seed: int = 0, noise: float = 5.0) -> Planted:
    """Baseline scores ~ N(75, 8); candidate = baseline + shift + N(0, noise) (judge-noise-like), clipped to 1-100."""
    rng = np.random.default_rng(seed)
    base = np.clip(np.round(rng.normal(75, 8, n)), 1, 100).astype(int)
    cand = np.clip(np.round(base + shift + rng.normal(0, noise, n)), 1, 100).astype(int)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.jsonl" for name in ("baseline", "candidate", "items", "responses")}
    with (
        paths["baseline"].open("w") as fb,
        paths["candidate"].open("w") as fc,
        paths["items"].open("w") as fi,
        paths["responses"].open("w") as fr,
    ):
        for i in range(n):
            ctx = context(i)
            old = f"Of course, your beagle is called Rex. <<q={base[i]}>>"
            new = f"Sure, I remember: your beagle's name is Rex! <<q={cand[i]}>>"
            fb.write(json.dumps({**ctx, "candidates": {"v1": old}}) + "\n")
            fc.write(json.dumps({**ctx, "candidates": {"v2": new}}) + "\n")
            fi.write(json.dumps({**ctx, "candidates": {}}) + "\n")
            fr.write(json.dumps({"id": ctx["id"], "response": new}) + "\n")
    return Planted(paths["baseline"], paths["candidate"], paths["items"], paths["responses"], base, cand)


def judge_for(sim: SimulatorProcess) -> str:
    return f"openai-compatible:sim-judge@{sim.base_url}"
