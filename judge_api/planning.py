"""Expand a validated run request into the judgments it needs (items × rubrics × aspects × judges × systems).

Pure: no database. Pairwise pairs are all unordered pairs, or each system against a named baseline; each pair is
judged in both presentation orders by default, or in one seeded-random order (AlpacaEval's convention). With
``pairing: "adaptive"`` only the first batch of comparisons is planned here; ``judge_api.adaptive.steps`` plans the
next ones as the verdicts come in. With ``samples: "adaptive"`` each judgment starts with its first samples and the
same steps add more where they disagree.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judge_api import reach
from judge_api.adaptive.planner import Pair, PlannerConfig, plan_step
from judge_api.adaptive.replay import pair_items_of
from judge_api.config import get_settings
from judge_api.judges import parse_judge
from judge_api.reference_metrics import (
    LEXICAL_METRICS,
    REFERENCE_JUDGE,
    REFERENCE_RUBRIC,
    REFERENCE_VERSION,
    reference_rubric,
    reference_version,
)
from judge_api.rubrics import PREFERENCE_LEVELS, Rubric, RubricRegistry
from judge_api.schemas import AdaptiveOptions, Item, JudgeOptions, PanelOptions, RunCreate


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
        if request.baseline not in item.candidates:  # runs with systems: the baseline failed to generate here
            return []
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
        if rubric.mode not in request.mode:
            raise PlanError(
                f"rubrics[{index}]",
                f"rubric {rubric_id!r} is a {rubric.kind} rubric but mode is {request.mode}",
            )
        rubrics.append(rubric)
    for mode in request.mode if request.rubrics else []:  # no rubric: reference metrics only
        if not any(r.mode == mode for r in rubrics):
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


@dataclass(frozen=True)
class Target:
    """One pairwise (rubric version, aspect, judge): what a comparison is judged on."""

    rubric_id: str
    rubric_version: str
    aspect: str
    judge: str


def comparison_judgments(
    item_id: str,
    candidates: Mapping[str, str],
    a: str,
    b: str,
    target: Target,
    orders: Sequence[str],
    samples: int,
    first_sample: int = 0,
) -> list[PlannedJudgment]:
    """The judgments of comparing ``a`` with ``b`` on one item: each order x sample (one sample when the two
    responses are identical: a tie without a judge call)."""
    identical = candidates[a].strip() == candidates[b].strip()
    out = []
    for order in orders:
        for sample in range(first_sample, first_sample + (1 if identical else samples)):
            out.append(
                PlannedJudgment(
                    item_id,
                    "pairwise",
                    a,
                    b,
                    order,
                    target.rubric_id,
                    target.rubric_version,
                    target.aspect,
                    target.judge,
                    sample,
                    identical,
                )
            )
    return out


def planner_config(options: AdaptiveOptions) -> PlannerConfig:
    return PlannerConfig(
        confidence=options.confidence,
        top_k=options.top_k,
        max_calls=options.max_calls,
        batch=options.batch,
        warmup=options.warmup,
        seed=options.seed,
    )


def adaptive_pair_items(candidates: Mapping[str, Mapping[str, str]]) -> dict[Pair, list[str]]:
    """Per canonical pair of systems, the items (``item -> its candidates``) holding both."""
    return pair_items_of({item: list(c) for item, c in candidates.items()})


def round_robin_calls(pair_items: Mapping[Pair, Sequence[str]], candidates: Mapping[str, Mapping[str, str]]) -> int:
    """Judge calls of one target's comparisons in full round robin (both orders, one sample; identical responses
    cost none)."""
    return sum(
        2
        for (a, b), items in pair_items.items()
        for item in items
        if candidates[item][a].strip() != candidates[item][b].strip()
    )


def judge_refusal(judge: str) -> str | None:
    """Why this service's workers may not call ``judge`` (None: they may): a judge string that names no judge, or
    ``reach.judge_refusal``'s rule (the workers apply it again before they ask). The one check of a judge string, for
    a submitted run and for an imported bundle's rows alike (judge_api/admission.py)."""
    if judge == REFERENCE_JUDGE:  # reference metrics only (RunCreate checks it stands alone)
        return None
    try:
        spec = parse_judge(judge)
    except ValueError as exc:
        return str(exc)
    return reach.judge_refusal(spec, get_settings())


def _check_judges(request: RunCreate) -> list[str]:
    for index, judge in enumerate(request.judges):
        refusal = judge_refusal(judge)
        if refusal is not None:
            raise PlanError(f"judges[{index}]", refusal)
    return [parse_judge(j).key for j in request.judges if j != REFERENCE_JUDGE]


def _aspects(request: RunCreate, rubric: Rubric) -> list[str]:
    return [a for a in rubric.aspect_names if not request.aspects or a in request.aspects]


def plan_run(request: RunCreate, registry: RubricRegistry, max_judgments: int) -> list[PlannedJudgment]:
    """Every judgment the run needs up front, in a stable order (with adaptive pairing: the first batch of
    comparisons). Raises PlanError naming the field at fault."""
    judges = _check_judges(request)
    check_panel(request, judges)
    check_metrics(request, get_settings().bertscore_model)
    rubrics = resolve_rubrics(request, registry)
    first = request.options.first_samples
    planned: list[PlannedJudgment] = []

    def check_size() -> None:
        if len(planned) > max_judgments:
            raise PlanError(
                "items", f"the run would need more than {max_judgments} judgments; split it into smaller runs"
            )

    for item in request.items:
        for rubric in rubrics:
            for aspect, judge in itertools.product(_aspects(request, rubric), judges):
                if rubric.mode == "single":
                    for system in item.candidates:
                        for sample in range(first["single"]):
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
                elif request.pairing != "adaptive":
                    target = Target(rubric.id, rubric.version, aspect, judge)
                    for a, b in _pairs(item, request):
                        if request.orders == "both":
                            orders = ["ab", "ba"]
                        else:
                            orders = [_random_order(request.order_seed, item.id, a, b, rubric.id, aspect)]
                        planned += comparison_judgments(
                            item.id, item.candidates, a, b, target, orders, first["pairwise"]
                        )
                check_size()
    if request.pairing == "adaptive":
        planned += _first_adaptive_batch(request, rubrics, judges, max_judgments)
        check_size()
    if request.options.samples == "adaptive":
        # every judgment may grow to max_samples: the run must fit the limit then too
        most = math.ceil(
            sum(1 if p.identical else request.options.max_sample_count / max(first[p.mode], 1) for p in planned)
        )
        if most > max_judgments:
            raise PlanError(
                "options.max_samples",
                f"with up to {request.options.max_sample_count} samples per judgment the run could need {most} "
                f"judgments, more than {max_judgments}; lower max_samples or split the run",
            )
    if not planned and request.rubrics:  # no rubric: reference metrics only (RunCreate checks an item has one)
        raise PlanError("items", "the run plans no judgment (pairwise items need two or more candidates)")
    planned += plan_reference_metrics(request)
    if len(planned) > max_judgments:
        raise PlanError("items", f"the run would need more than {max_judgments} judgments; split it into smaller runs")
    return planned


def _first_adaptive_batch(
    request: RunCreate, rubrics: list[Rubric], judges: list[str], max_judgments: int
) -> list[PlannedJudgment]:
    assert request.adaptive is not None
    targets = [
        Target(r.id, r.version, aspect, judge)
        for r in rubrics
        if r.kind == "pairwise"
        for aspect, judge in itertools.product(_aspects(request, r), judges)
    ]
    if len(targets) != 1:
        named = ", ".join(f"{t.rubric_id}/{t.aspect}/{t.judge}" for t in targets)
        raise PlanError(
            "pairing",
            f"adaptive pairing ranks the systems by one pairwise rubric, aspect and judge; this run has {len(targets)} "
            f"({named}): narrow it with 'aspects', one pairwise rubric or one judge",
        )
    (target,) = targets
    candidates = {item.id: item.candidates for item in request.items}
    pair_items = adaptive_pair_items(candidates)
    if not pair_items:
        raise PlanError("items", "adaptive pairing needs items with two or more candidates")
    systems = sorted({s for pair in pair_items for s in pair})
    options = request.adaptive
    if options.top_k is not None and options.top_k >= len(systems):
        raise PlanError("adaptive.top_k", f"top_k must be below the number of systems ({len(systems)})")
    per_comparison = 2 * request.options.first_samples["pairwise"]
    if options.max_calls is not None and options.max_calls < per_comparison:
        raise PlanError(
            "adaptive.max_calls",
            f"a comparison takes {per_comparison} calls (both orders x samples); max_calls={options.max_calls} "
            "allows none",
        )
    most = round_robin_calls(pair_items, candidates) // 2 * per_comparison
    if min(most, options.max_calls or most) > max_judgments:
        raise PlanError(
            "items", f"the run could need more than {max_judgments} judgments; split it or set adaptive.max_calls"
        )
    plan = plan_step(systems, pair_items, [], [], planner_config(options), calls_per_comparison=per_comparison)
    out: list[PlannedJudgment] = []
    for item, a, b in plan.comparisons:
        out += comparison_judgments(
            item, candidates[item], a, b, target, ["ab", "ba"], request.options.first_samples["pairwise"]
        )
    return out


def is_adaptive(config: Mapping[str, Any]) -> bool:
    """The run (its stored config) plans as it goes: adaptive pairing or adaptive samples."""
    return config.get("pairing") == "adaptive" or (config.get("options") or {}).get("samples") == "adaptive"


def plan_reference_metrics(request: RunCreate) -> list[PlannedJudgment]:
    """One judgment of the ``reference`` pseudo-judge per metric and candidate of every item with a reference. Its
    version names the tokenisation of the lexical metrics (``tokenize``: ``auto`` is resolved here, per item, from
    the reference); BERTScore has its own tokenizer and keeps the base version."""
    planned: list[PlannedJudgment] = []
    for item in request.items:
        if not (item.reference and item.reference.strip()):
            continue
        lexical = reference_version(request.tokenize, item.reference)
        for system in item.candidates:
            for metric in request.metrics:
                version = lexical if metric in LEXICAL_METRICS else REFERENCE_VERSION
                planned.append(
                    PlannedJudgment(
                        item.id, "single", system, None, None, REFERENCE_RUBRIC, version, metric, REFERENCE_JUDGE, 0
                    )
                )
    return planned


def run_rubrics(request: RunCreate, registry: RubricRegistry) -> list[Rubric]:
    """The rubrics a run is planned with, to be stored with it: the named ones, and the reference metrics'
    pseudo-rubric (each version its items use) when the run computes reference metrics."""
    rubrics = [registry.get(r) for r in sorted(set(request.rubrics))]
    versions = sorted({p.rubric_version for p in plan_reference_metrics(request)})
    return rubrics + [reference_rubric(v) for v in versions]


def check_panel(request: RunCreate, judges: list[str]) -> None:
    for index, judge in enumerate(request.panel.judges or []):
        try:
            key = parse_judge(judge).key
        except ValueError as exc:
            raise PlanError(f"panel.judges[{index}]", str(exc)) from None
        if key not in judges:
            raise PlanError(f"panel.judges[{index}]", f"{judge!r} is not one of the run's judges")
    quorum = request.panel.quorum
    n_members = len(dict.fromkeys(request.panel.judges)) if request.panel.judges else len(judges)
    if quorum is not None and quorum > n_members:
        raise PlanError("panel.quorum", f"{quorum} is more than the panel's members ({n_members})")


def check_metrics(request: RunCreate, bertscore_model: str | None) -> None:
    if "bertscore" in request.metrics and not bertscore_model:
        raise PlanError(
            f"metrics[{request.metrics.index('bertscore')}]",
            "bertscore needs DJ_BERTSCORE_MODEL=<local model directory> on the service and its workers, and "
            "pip install 'dialogue-judge[bertscore]' (BERTScore never downloads a model)",
        )


def run_config(request: RunCreate) -> dict[str, Any]:
    """What is stored as the run's config (everything but the items and the webhook, kept in the run's columns)."""
    return request.model_dump(mode="json", exclude={"items", "callback_url", "callback_secret"})


def panel_settings(
    config: dict[str, Any] | None,
    judges: list[str] | None = None,
    aggregate: str | None = None,
    quorum: int | None = None,
) -> dict[str, Any]:
    """The panel settings of a stored run config (``panel``), with ``judges`` / ``aggregate`` / ``quorum``
    overriding them, the judges as canonical judge keys (what the judgments store)."""
    panel = dict((config or {}).get("panel") or {})
    if judges:
        panel["judges"] = judges
    if aggregate:
        panel["aggregate"] = aggregate
    if quorum is not None:
        panel["quorum"] = quorum
    if panel.get("judges"):
        canonical = []
        for judge in panel["judges"]:
            try:
                canonical.append(parse_judge(judge).key)
            except ValueError:
                canonical.append(judge)  # not a judge string (an imported rater's name): matched as written
        panel["judges"] = canonical
    return panel


PLACEHOLDER = "(generated by {system})"


def with_placeholders(request: RunCreate) -> RunCreate:
    """Runs with ``systems``: the request with a placeholder response of every system in every item, which is what
    the run can need at most (validated and counted at submit; the judgments are planned item by item once the
    responses exist, :func:`plan_generated_item`)."""
    systems = request.systems or {}
    items = [
        item.model_copy(
            update={"candidates": {**item.candidates, **{s: PLACEHOLDER.format(system=s) for s in systems}}}
        )
        for item in request.items
    ]
    return request.model_copy(update={"items": items})


def plan_generated_item(
    config: Mapping[str, Any], item_payload: Mapping[str, Any], registry: RubricRegistry
) -> tuple[RunCreate, list[PlannedJudgment]]:
    """A run with ``systems``: the judgments of one item once its responses are generated (its candidates hold the
    given responses and the generated ones; a system that failed is absent and gets no judgment). The run's config
    was validated at submit; an item left with nothing to judge plans nothing."""
    fields = {k: v for k, v in config.items() if k in RunCreate.model_fields}
    fields["options"] = JudgeOptions.model_validate(config.get("options") or {})
    fields["panel"] = PanelOptions.model_validate(config.get("panel") or {})
    fields["adaptive"] = None
    fields["items"] = [Item.model_validate(dict(item_payload))]
    request = RunCreate.model_construct(**fields)
    if not request.items[0].candidates:
        return request, []
    try:
        return request, plan_run(request, registry, 10**9)
    except PlanError as exc:
        if "plans no judgment" in exc.message:  # e.g. pairwise only, one response left
            return request, []
        raise
