"""What came out of the gate, as data: ``GateOutcome`` (status, headline, the per-aspect ``AspectReport`` rows, the
``CallStats`` of judging) and the exit code of each status.

The bottom of the gate's result layer: ``reports`` renders an outcome and ``result`` adds the renderings to it as
methods (``GateResult``), so the arrows run ``result -> reports -> outcome`` and never back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "regression", "undecided", "error"]
EXIT_CODES: dict[str, int] = {"pass": 0, "regression": 1, "undecided": 2, "error": 2}


@dataclass
class AspectReport:
    aspect: str
    verdict: str
    """``regression``, ``no_regression``, ``undecided`` or ``not_decided`` (the gate stopped before it mattered)."""
    threshold: float
    decided_by: str = ""
    look: int | None = None
    n: int = 0
    """Items with a usable verdict for both systems (single) or at least one order (pairwise)."""
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_level: float | None = None
    ci_method: str = ""
    p_value: float | None = None
    effect_size: float | None = None
    effect_size_name: str = ""
    baseline_mean: float | None = None
    candidate_mean: float | None = None
    wins: int | None = None
    ties: int | None = None
    losses: int | None = None
    wilcoxon_p: float | None = None
    n_judgments: int = 0
    n_failed: int = 0
    n_unparseable: int = 0
    worst: list[dict[str, Any]] = field(default_factory=list)
    change: str = "drop"
    """Single mode: what the estimate measures, ``drop`` (baseline - candidate, higher is better) or ``increase``
    (candidate - baseline of a figure where higher is worse, e.g. ``contradiction_rate``)."""


@dataclass
class CallStats:
    planned: int = 0
    """Judgments the gate would make without an early stop."""
    judged: int = 0
    """Judgments the judge was asked about (done, failed or unparseable)."""
    saved: int = 0
    """Judgments never made because the gate stopped early."""
    provider_calls: int = 0
    cached: int = 0
    cost_usd: float = 0.0
    run_ids: list[str] = field(default_factory=list)
    looks_done: int = 0
    looks_planned: int = 0
    items_judged: int = 0
    budget_exhausted: bool = False
    reused: bool = False
    """The verdicts came from existing runs (no judging)."""


@dataclass
class GateOutcome:
    """Everything the gate decided; ``GateResult`` adds the renderings."""

    status: Status
    headline: str
    mode: str = "single"
    judge: str = ""
    rubric: str = ""
    alpha: float = 0.05
    threshold_name: str = "max_drop"
    threshold: float | None = None
    budget_usd: float | None = None
    sequential: bool = True
    seed: int = 0
    baseline: str = ""
    candidate: str = ""
    backend: str = "standalone"
    n_items: int = 0
    aspects: list[AspectReport] = field(default_factory=list)
    calls: CallStats = field(default_factory=CallStats)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    calibrate: str | None = None
    """``human``: the decision is the calibrated (PPI++) drop on the humans' scale (``gate.calibrate``)."""
    calibration: list[dict[str, Any]] = field(default_factory=list)
    """Per aspect, with ``calibrate``: method, labels on each side, estimate, interval, the judge-only figure."""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]
