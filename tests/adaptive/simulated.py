"""A Bradley-Terry judge with ties for the adaptive tests: each (item, pair) comparison has one fixed outcome,
drawn from the planted strengths, so a replay is reproducible and re-asking a comparison gives the same answer."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from judge_api.adaptive.planner import Pair
from judge_api.adaptive.replay import pair_items_of


class BTJudge:
    def __init__(self, theta: dict[str, float], n_items: int, seed: int, tie_share: float = 0.2) -> None:
        self.theta = theta
        self.systems = sorted(theta)
        self.seed = seed
        self.tie_share = tie_share
        self.items = [f"item-{k:04d}" for k in range(n_items)]
        self.pair_items: dict[Pair, list[str]] = pair_items_of({i: self.systems for i in self.items})
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, item: str, a: str, b: str) -> float:
        self.asked.append((item, a, b))
        x, y = sorted((a, b))
        digest = hashlib.sha256(f"{self.seed}|{item}|{x}|{y}".encode()).digest()
        u = np.random.default_rng(int.from_bytes(digest[:8], "little")).random()
        p = 1.0 / (1.0 + math.exp(-(self.theta[x] - self.theta[y])))
        score = 0.5 if u < self.tie_share else (1.0 if u < self.tie_share + (1 - self.tie_share) * p else 0.0)
        return score if a == x else 1.0 - score
