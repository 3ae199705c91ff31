"""Adaptive self-consistency: draw another sample of a judgment only while its samples leave the verdict in doubt.

Pure. With ``options.samples = "adaptive"`` every judgment (item, systems, presentation order, rubric, aspect,
judge) starts with ``min_samples`` samples; each time all of its samples are finished, ``more_samples`` says
whether to draw the next, up to ``max_samples``. The verdict is what it is with a fixed count: the mean score or
the majority outcome of the samples (``stats.scores`` / ``stats.preferences``).

Pairwise (one sample's verdict is a preference level, mapped to win / tie / loss by the run's outcome map):

* one sample: draw another when the verdict is *hedged* (its preference is not the rubric's strongest, e.g.
  "Response 1 is slightly better", or a tie when the rubric offers clear wins) - it sits next to the boundary
  between two outcomes;
* two or more: draw another until the leading outcome is ahead of the runner-up by two samples (two agreeing
  samples settle it; one dissenting sample asks for two more agreeing ones).

Single (scores on the rubric's scale; ``margin`` defaults to 5 % of the scale's width, ``boundaries`` are the
scores that decide something for the caller, e.g. a pass mark; none by default):

* one sample: draw another when the score lies within ``margin`` of a boundary;
* two or more: draw another while the standard error of the mean exceeds ``margin / 2`` (two samples agreeing
  within ``margin`` settle it) or a boundary lies within two standard errors, or within ``margin / sqrt(n)``, of
  the mean of the ``n`` samples.

A failed or unparseable sample counts against ``max_samples`` but carries no verdict.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["single", "pairwise"]

DEFAULT_MAX_SAMPLES = 5
DEFAULT_MARGIN_SHARE = 0.05
"""Single mode: the default ``margin`` as a share of the rubric scale's width."""


@dataclass(frozen=True)
class SamplingRule:
    kind: Kind
    max_samples: int = DEFAULT_MAX_SAMPLES
    min_samples: int = 1
    margin: float = 5.0
    """Single: score points. Unused in pairwise mode."""
    boundaries: tuple[float, ...] = ()
    """Single: decisive scores."""
    strongest: float = 2.0
    """Pairwise: the largest |preference| the rubric's verdicts express."""
    outcome_map: Mapping[str, str] = field(default_factory=dict)
    """Pairwise: preference level (as a string: "2", "-1", ...) -> win / tie / loss."""


def rule_for(
    kind: Kind,
    *,
    max_samples: int = DEFAULT_MAX_SAMPLES,
    min_samples: int | None = None,
    margin: float | None = None,
    boundaries: Sequence[float] = (),
    scale: tuple[float, float] | None = None,
    verdict_levels: Sequence[int] = (),
    outcome_map: Mapping[str, str] | None = None,
) -> SamplingRule:
    """The rule of one rubric: single mode needs ``scale``, pairwise mode the rubric's ``verdict_levels`` and the
    run's outcome map. ``min_samples`` defaults to 2 in single mode (one score cannot disagree with itself) and 1
    in pairwise mode (a hedged verdict asks for the second)."""
    if kind == "single":
        width = (scale[1] - scale[0]) if scale else 100.0
        return SamplingRule(
            "single",
            max_samples,
            2 if min_samples is None else min_samples,
            DEFAULT_MARGIN_SHARE * width if margin is None else margin,
            tuple(boundaries),
        )
    strongest = max((abs(level) for level in verdict_levels), default=2)
    return SamplingRule(
        "pairwise",
        max_samples,
        1 if min_samples is None else min_samples,
        strongest=float(strongest),
        outcome_map=dict(outcome_map or {}),
    )


def more_samples(rule: SamplingRule, n_rows: int, values: Sequence[float]) -> bool:
    """Whether to draw another sample of a judgment that has ``n_rows`` finished samples, ``values`` of which
    carry a verdict (single: the scores; pairwise: the preferences for system_a)."""
    if n_rows >= rule.max_samples:
        return False
    if n_rows < rule.min_samples or not values:
        return True
    if rule.kind == "pairwise":
        return _pairwise_more(rule, values)
    return _single_more(rule, values)


def _pairwise_more(rule: SamplingRule, preferences: Sequence[float]) -> bool:
    if len(preferences) == 1:
        return abs(preferences[0]) < rule.strongest
    outcomes = Counter(_outcome(rule, p) for p in preferences)
    counts = [*sorted(outcomes.values(), reverse=True), 0]
    return counts[0] - counts[1] < 2


def _outcome(rule: SamplingRule, preference: float) -> str:
    key = str(int(preference)) if float(preference).is_integer() else str(preference)
    if key in rule.outcome_map:
        return rule.outcome_map[key]
    return "win" if preference > 0 else "loss" if preference < 0 else "tie"


def _single_more(rule: SamplingRule, scores: Sequence[float]) -> bool:
    n = len(scores)
    mean = sum(scores) / n
    if n == 1:
        return any(abs(mean - b) < rule.margin for b in rule.boundaries)
    sd = math.sqrt(sum((x - mean) ** 2 for x in scores) / (n - 1))
    sem = sd / math.sqrt(n)
    near = max(2 * sem, rule.margin / math.sqrt(n))
    return sem > rule.margin / 2 or any(abs(mean - b) < near for b in rule.boundaries)


@dataclass(frozen=True)
class SampleUsage:
    """How many samples the judgments took, against drawing ``fixed`` for each."""

    judgments: int
    samples: int
    fixed: int
    histogram: dict[int, int]
    """samples taken -> judgments."""

    @property
    def saving(self) -> float:
        """Share of the fixed count's samples not drawn."""
        total = self.judgments * self.fixed
        return 1.0 - self.samples / total if total else 0.0


def usage(samples_per_judgment: Sequence[int], fixed: int) -> SampleUsage:
    histogram = Counter(int(n) for n in samples_per_judgment)
    return SampleUsage(
        len(samples_per_judgment), int(sum(samples_per_judgment)), fixed, dict(sorted(histogram.items()))
    )
