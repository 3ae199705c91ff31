"""Expand a validated run request into the judgments it needs (items × rubrics × aspects × judges × systems).

Pure: no database. Pairwise pairs are all unordered pairs, or each system against a named baseline; each pair is
judged in both presentation orders by default, or in one seeded-random order (AlpacaEval's convention).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

from judge_api.config import get_settings
from judge_api.judges import parse_judge
from judge_api.rubrics import PREFERENCE_LEVELS, Rubric, RubricRegistry
from judge_api.schemas import Item, RunCreate


class PlanError(ValueError):
    """The run cannot be planned; ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class PlannedJudgment:
    item_id: str
    mode: str
    system_a: str
    system_b: str | None
    order: str | None
    rubric_id: str
    rubric_version: str
    aspect: str
    judge: str
    sample_index: int
    identical: bool = False

    def dedup_key(self, run_id: str) -> str:
        parts = [
            run_id,
            self.item_id,
            self.mode,
            self.system_a,
            self.system_b or "",
            self.order or "",
            self.rubric_id,
            self.aspect,
            self.judge,
            str(self.sample_index),
        ]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def _pairs(item: Item, request: RunCreate) -> list[tuple[str, str]]:
    systems = list(item.candidates)
    if request.pairing == "baseline":
        assert request.baseline is not None
        return [(s, request.baseline) for s in systems if s != request.baseline]
    return list(itertools.combinations(systems, 2))


def _random_order(seed: int, item_id: str, a: str, b: str, rubric_id: str, aspect: str) -> str:
    digest = hashlib.sha256(f"{seed}|{item_id}|{a}|{b}|{rubric_id}|{aspect}".encode()).digest()
    return "ab" if digest[0] % 2 == 0 else "ba"


def resolve_rubrics(request: RunCreate, registry: RubricRegistry) -> list[Rubric]:
    rubrics: list[Rubric] = []
    for index, rubric_id in enumerate(request.rubrics):
        if rubric_id not in registry:
            known = ", ".join(r.id for r in registry.all())
            raise PlanError(f"rubrics[{index}]", f"unknown rubric {rubric_id!r} (known: {known})")
        rubric = registry.get(rubric_id)
        if rubric.kind not in request.mode:
            raise PlanError(
                f"rubrics[{index}]",
                f"rubric {rubric_id!r} is a {rubric.kind} rubric but mode is {request.mode}",
            )
        rubrics.append(rubric)
    for mode in request.mode:
        if not any(r.kind == mode for r in rubrics):
            raise PlanError("mode", f"mode {mode!r} needs at least one {mode} rubric")
    if request.aspects:
        for index, aspect in enumerate(request.aspects):
            if not any(aspect in r.aspect_names for r in rubrics):
                raise PlanError(f"aspects[{index}]", f"no chosen rubric has the aspect {aspect!r}")
    if request.options.structured_output:
        lacking = [r.id for r in rubrics if r.structured_output is None]
        if lacking:
            supported = ", ".join(r.id for r in registry.all() if r.structured_output is not None) or "none"
            raise PlanError(
                "options.structured_output",
                f"rubric(s) {', '.join(lacking)} define no structured output (rubrics that do: {supported})",
            )
    if request.outcome_map:
        unknown = sorted(set(request.outcome_map) - set(PREFERENCE_LEVELS))
        if unknown:
            raise PlanError(
                "outcome_map",
                f"keys {unknown} are not preference levels; use {', '.join(repr(k) for k in PREFERENCE_LEVELS)}",
            )
    return rubrics


def plan_run(request: RunCreate, registry: RubricRegistry, max_judgments: int) -> list[PlannedJudgment]:
    """Every judgment the run needs, in a stable order. Raises PlanError naming the field at fault."""
    settings = get_settings()
    for index, judge in enumerate(request.judges):
        try:
            spec = parse_judge(judge)
        except ValueError as exc:
            raise PlanError(f"judges[{index}]", str(exc)) from None
        if spec.base_url is not None and not settings.judge_url_allowed(spec.base_url):
            raise PlanError(
                f"judges[{index}]",
                f"base URL {spec.base_url!r} is not in DJ_JUDGE_URL_ALLOWLIST (openai-compatible judges must be "
                "allow-listed by the operator when auth is on)",
            )
    judges = [parse_judge(j).key for j in request.judges]
    rubrics = resolve_rubrics(request, registry)
    samples = request.options.samples
    planned: list[PlannedJudgment] = []
    for item in request.items:
        for rubric in rubrics:
            aspects = [a for a in rubric.aspect_names if not request.aspects or a in request.aspects]
            for aspect, judge in itertools.product(aspects, judges):
                if rubric.kind == "single":
                    for system in item.candidates:
                        for sample in range(samples):
                            planned.append(
                                PlannedJudgment(
                                    item.id,
                                    "single",
                                    system,
                                    None,
                                    None,
                                    rubric.id,
                                    rubric.version,
                                    aspect,
                                    judge,
                                    sample,
                                )
                            )
                else:
                    for a, b in _pairs(item, request):
                        identical = item.candidates[a].strip() == item.candidates[b].strip()
                        if request.orders == "both":
                            orders = ["ab", "ba"]
                        else:
                            orders = [_random_order(request.order_seed, item.id, a, b, rubric.id, aspect)]
                        for order in orders:
                            for sample in range(1 if identical else samples):
                                planned.append(
                                    PlannedJudgment(
                                        item.id,
                                        "pairwise",
                                        a,
                                        b,
                                        order,
                                        rubric.id,
                                        rubric.version,
                                        aspect,
                                        judge,
                                        sample,
                                        identical,
                                    )
                                )
                if len(planned) > max_judgments:
                    raise PlanError(
                        "items",
                        f"the run would need more than {max_judgments} judgments; split it into smaller runs",
                    )
    if not planned:
        raise PlanError("items", "the run plans no judgment (pairwise items need two or more candidates)")
    return planned


def run_config(request: RunCreate) -> dict[str, Any]:
    """What is stored as the run's config (everything but the items)."""
    return request.model_dump(mode="json", exclude={"items"})
