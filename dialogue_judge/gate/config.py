"""What the gate is asked to do: ``GateConfig`` (the ``dialogue-judge gate`` options and the ``assert_consistent``
arguments map onto its fields), its defaults, and ``check_config``, which turns a value out of range into
``GateInputError`` (exit 2) before anything is read or judged."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dialogue_judge.gate.inputs import GateInputError

DEFAULT_RUBRIC = {"single": "rsum-single", "pairwise": "rsum-pairwise"}
DEFAULT_MAX_LOSS_RATE = 0.6
DEFAULT_MAX_FAILED = 0.10
FACT_METRICS = ("contradiction_rate",)
"""Per-response figures of a fact-check rubric (kind ``facts``, docs/facts.md) the gate can gate on with a judge;
higher is worse."""
FACT_RUBRIC = "fact-check"
DEFAULT_MAX_INCREASE = 0.05


@dataclass
class GateConfig:
    """Everything the gate needs; the CLI options and ``assert_consistent`` arguments map onto these fields."""

    baseline: Any
    candidate: Any
    judge: str | list[str] = ""
    """One judge, or several: their panel decides (scores: ``panel_aggregate`` of the judges'; pairwise: the
    majority of their order-combined outcomes)."""
    items: Any = None
    rubric: str | None = None
    aspects: list[str] | None = None
    mode: str = "single"
    max_drop: float | None = None
    max_loss_rate: float = DEFAULT_MAX_LOSS_RATE
    alpha: float = 0.05
    budget_usd: float | None = None
    seed: int = 0
    batch: int | None = None
    sequential: bool = True
    workers: int = 8
    api: str | None = None
    api_key: str | None = None
    cache: bool = True
    database: str | Path | None = None
    """Standalone database (= judge cache); default ``standalone.default_cache_db()``."""
    max_failed: float = DEFAULT_MAX_FAILED
    baseline_system: str | None = None
    candidate_system: str | None = None
    name: str | None = None
    worst: int = 5
    progress: bool | None = None
    timeout_s: float = 3600.0
    temperature: float = 0.0
    structured_output: bool = False
    reask: int = 0
    max_tokens: int = 512
    metrics: list[str] | None = None
    """Gate on these reference metrics (``f1``, ``bleu-1``, ``bleu-2``, ``bertscore``) of each side's responses
    against the items' references instead of a judge: computed here, no judge call. Or, with a judge and a
    fact-check rubric, on ``contradiction_rate`` (``FACT_METRICS``): the judge labels each response's facts and the
    gate tests the increase of the per-response contradiction rate (``max_drop`` is then the allowed increase)."""
    panel_aggregate: str = "mean"
    calibrate: str | None = None
    """``human``: decide on the calibrated (PPI++) drop from the two runs' human labels and the judge's scores
    (``gate.calibrate``); None: on the judge's scores alone."""
    calibrate_missing: str = "fail"
    """With ``calibrate``, when a side has fewer than ``calibrate_min_labels`` labels: ``fail`` (exit 2, say which
    side lacks how many) or ``judge`` (decide on the judge alone and say so)."""
    calibrate_min_labels: int = 10


def judges_of(config: GateConfig) -> list[str]:
    """The judges named (``--judge`` once or repeated), in order, without duplicates."""
    judges = [config.judge] if isinstance(config.judge, str) else list(config.judge or [])
    return list(dict.fromkeys(j for j in judges if j))


def check_budget_priced(judges: list[str]) -> None:
    """Standalone: ``GateInputError`` when --budget is given with a judge the price table does not list (its calls
    would count $0 and the budget would never stop them); on a service (--api) the service refuses it."""
    from judge_api.pricing import load_prices, unpriced_budget_refusal

    refusal = unpriced_budget_refusal(judges, load_prices(os.environ.get("DJ_PRICES_FILE") or None), "--budget")
    if refusal is not None:
        raise GateInputError(refusal)


def fact_metric(config: GateConfig) -> str | None:
    """The fact-check figure the gate is asked to gate on (``--metric contradiction_rate``), if any."""
    named = [m for m in config.metrics or [] if m in FACT_METRICS]
    return named[0] if named else None


def check_calibrate(config: GateConfig) -> None:
    """``GateInputError`` for a ``calibrate`` setting the gate cannot honour."""
    if config.calibrate is None:
        return
    if config.calibrate not in ("human",):
        raise GateInputError(f"calibrate must be human (or absent for the judge alone), got {config.calibrate!r}")
    if config.calibrate_missing not in ("fail", "judge"):
        raise GateInputError(
            f"calibrate_missing must be fail (exit 2) or judge (fall back to the judge alone), got "
            f"{config.calibrate_missing!r}"
        )
    if config.calibrate_min_labels < 2:
        raise GateInputError(f"calibrate_min_labels must be at least 2, got {config.calibrate_min_labels}")
    if config.mode != "single" or config.metrics:
        raise GateInputError(
            "calibrate: human calibrates a judge's scores against human score labels: use it with --mode single and "
            "a judge (not with --metric or pairwise mode)"
        )


def check_config(config: GateConfig) -> None:
    """Raise ``GateInputError`` naming the option and the reason when a value is out of range."""
    if config.mode not in ("single", "pairwise"):
        raise GateInputError(f"--mode must be single or pairwise (got {config.mode!r})")
    if not 0 < config.alpha < 1:
        raise GateInputError(f"--alpha must lie strictly between 0 and 1 (got {config.alpha})")
    if config.mode == "pairwise" and not 0 < config.max_loss_rate < 1:
        raise GateInputError(f"--max-loss-rate must lie strictly between 0 and 1 (got {config.max_loss_rate})")
    if not 0 <= config.max_failed <= 1:
        raise GateInputError(f"--max-failed must lie between 0 and 1 (got {config.max_failed})")
    if config.batch is not None and config.batch < 1:
        raise GateInputError("--batch must be at least 1")
    if config.budget_usd is not None and config.budget_usd <= 0:
        raise GateInputError("--budget must be positive")
    if config.budget_usd is not None and config.api is None:
        check_budget_priced(judges_of(config))
    check_calibrate(config)
    if config.workers < 1:
        raise GateInputError("--workers must be at least 1")
    if config.panel_aggregate not in ("mean", "median"):
        raise GateInputError(f"--panel-aggregate must be mean or median (got {config.panel_aggregate!r})")
    if fact_metric(config):
        others = [m for m in dict.fromkeys(config.metrics or []) if m not in FACT_METRICS]
        if others or len(set(config.metrics or [])) > 1:
            raise GateInputError(
                f"--metric {fact_metric(config)} is judged by a fact-check rubric: give it alone (not with "
                f"{', '.join(map(repr, others)) or 'another metric'})"
            )
        if config.mode != "single":
            raise GateInputError(f"--metric {fact_metric(config)} compares responses one by one: use --mode single")
        if not judges_of(config):
            raise GateInputError(
                f"--metric {fact_metric(config)} needs a judge to label the facts (e.g. --judge openai:gpt-4o)"
            )
        if config.max_drop is not None and not 0 < config.max_drop < 1:
            raise GateInputError(
                f"--max-drop is the allowed increase of the contradiction rate: between 0 and 1 (got {config.max_drop})"
            )
        return
    if config.metrics:
        from judge_api.reference_metrics import METRICS

        unknown = [m for m in config.metrics if m not in METRICS]
        if unknown:
            known = ", ".join([*METRICS, *FACT_METRICS])
            raise GateInputError(f"--metric {unknown[0]!r} is not a reference metric or fact figure (known: {known})")
        if judges_of(config):
            raise GateInputError(
                "--metric gates on reference metrics without a judge: give --judge or --metric, not both"
            )
        return
    if not judges_of(config):
        raise GateInputError("--judge is required (e.g. openai:gpt-4o), or --metric f1 to gate on a reference metric")
