"""The fixed inputs on which the PPI++ estimator is checked against ppi-python (``make_ppi_reference.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

CASES: list[dict[str, Any]] = [
    {"seed": 0, "n": 50, "big_n": 400, "bias": 0.3, "noise": 0.2, "ci": 0.95},
    {"seed": 1, "n": 20, "big_n": 1000, "bias": -0.5, "noise": 0.6, "ci": 0.90},
    {"seed": 2, "n": 100, "big_n": 100, "bias": 0.0, "noise": 1.5, "ci": 0.99},
    {"seed": 3, "n": 12, "big_n": 30, "bias": 2.0, "noise": 0.05, "ci": 0.95},
    {"seed": 4, "n": 40, "big_n": 300, "bias": 0.2, "noise": 0.3, "ci": 0.95},
]
FIXED_LAMBDAS = (0.0, 0.4, 1.0)


def case_inputs(case: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Humans' labels, the judge's predictions on them, and the judge's predictions on the unlabeled items."""
    rng = np.random.default_rng(case["seed"])
    n, big_n = case["n"], case["big_n"]
    truth = rng.normal(1.0, 0.5, n + big_n)
    judge = truth + case["bias"] + rng.normal(0.0, case["noise"], n + big_n)
    return truth[:n], judge[:n], judge[n:]
