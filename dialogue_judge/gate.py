"""``dialogue-judge gate``: fail a build when responses got less consistent, and not on judge noise.

Exit codes (``GateResult.exit_code``):

* **0** no regression: every gated aspect's confidence interval lies on the safe side of the tolerance;
* **1** a regression: some aspect's interval lies beyond the tolerance (stated with effect size, CI and p-value);
* **2** the gate could not decide or could not run: bad input, mismatched items, judge unreachable, too many
  unparseable or failed verdicts, budget exhausted before a decision, or an interval that still contains the
  tolerance when the items ran out. Never a silent pass.

Flow: read both sides (``gate_inputs``) -> one request with the systems ``baseline`` and ``candidate`` -> judge it
in a seeded random item order, in batches, in this process (``standalone.run_in_process``; SQLite, no Redis) or on
a running service (``--api``: one run per batch) -> after each batch ``GateDecider.look`` applies the sequential
procedure of ``gate_stats`` per aspect and stops when the verdict is settled -> ``GateResult`` -> Markdown, JUnit
XML and JSON (``gate_report``).

When both sides are run ids and those runs already hold single-mode verdicts for the rubric, judge and aspects, the
gate pairs them per item and runs the fixed-sample test at the full alpha without calling the judge.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dialogue_judge import gate_stats as gs
from dialogue_judge.gate_inputs import (
    BASELINE,
    CANDIDATE,
    GateInputError,
    Side,
    is_run_id,
    load_items,
    load_side,
    merge_sides,
    side_from_records,
    validate_items,
)

Status = Literal["pass", "regression", "undecided", "error"]
EXIT_CODES: dict[str, int] = {"pass": 0, "regression": 1, "undecided": 2, "error": 2}
DEFAULT_RUBRIC = {"single": "rsum-single", "pairwise": "rsum-pairwise"}
DEFAULT_MAX_LOSS_RATE = 0.6
DEFAULT_MAX_FAILED = 0.10
DONE, FAILED, UNPARSEABLE = "done", "failed", "unparseable"
ASKED = (DONE, FAILED, UNPARSEABLE)
UNREACHABLE_KINDS = ("connection_error", "timeout")


@dataclass
class GateConfig:
    """Everything the gate needs; the CLI options and ``assert_consistent`` arguments map onto these fields."""

    baseline: Any
    candidate: Any
    judge: str
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
class GateResult:
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

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["exit_code"] = self.exit_code
        return _jsonable(data)

    def markdown(self) -> str:
        from dialogue_judge.gate_report import to_markdown

        return to_markdown(self)

    def junit_xml(self) -> str:
        from dialogue_judge.gate_report import to_junit

        return to_junit(self)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


# -- formatting shared by the headline and the reports -----------------------------------------------------------


def fmt_num(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def fmt_p(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 0.001:
        return f"{value:.3f}"
    return f"{value:.1e}"


def fmt_level(level: float | None) -> str:
    if level is None:
        return ""
    text = f"{100 * level:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def describe(report: AspectReport, mode: str) -> str:
    """``mean drop 14.60 points, 98.75% CI [11.20, 18.00]`` / ``loss rate 0.920, 98.75% CI [0.800, 0.970]``."""
    digits = 2 if mode == "single" else 3
    what = "mean drop" if mode == "single" else "loss rate"
    unit = " points" if mode == "single" else ""
    ci = ""
    if report.ci_low is not None and report.ci_high is not None:
        ci = f", {fmt_level(report.ci_level)} CI [{fmt_num(report.ci_low, digits)}, {fmt_num(report.ci_high, digits)}]"
    return f"{what} {fmt_num(report.estimate, digits)}{unit}{ci}"


# -- backends ------------------------------------------------------------------------------------------------------


@dataclass
class RubricInfo:
    id: str
    kind: str
    aspects: list[str]
    scale: tuple[float, float] | None


@dataclass
class Look:
    rows: list[dict[str, Any]]
    item_ids: list[str]
    look: int
    n_looks: int
    final: bool
    budget_exhausted: bool = False


OnLook = Callable[[Look], bool]


class LocalBackend:
    """Standalone: an in-process runner on a SQLite file (the persistent judge cache) or a temporary one."""

    kind = "standalone"

    def __init__(self, config: GateConfig) -> None:
        from dialogue_judge.standalone import InProcessRunner, default_cache_db

        database = (config.database or default_cache_db()) if config.cache else None
        self.runner = InProcessRunner(database, workers=config.workers)
        self.config = config

    def close(self) -> None:
        self.runner.close()

    def rubric(self, rubric_id: str) -> RubricInfo:
        from judge_api.rubrics import RubricError, get_registry

        try:
            rubric = get_registry().get(rubric_id)
        except RubricError as exc:
            raise GateInputError(str(exc)) from None
        return RubricInfo(rubric.id, rubric.kind, rubric.aspect_names, rubric.scale)

    def run_items(self, run_id: str) -> list[dict[str, Any]]:
        if self.runner.summary(run_id) is None:
            raise GateInputError(
                f"run {run_id!r} is not in the standalone database {self.runner.url} "
                "(use --api URL for runs of a service)"
            )
        return self.runner.items(run_id)

    def run_judgments(self, run_id: str) -> list[dict[str, Any]]:
        return self.runner.judgments(run_id)

    def judge(self, request: Any, looks: list[int], on_look: OnLook, abort_after_failures: int) -> CallStats:
        from dialogue_judge.standalone import EARLY_STOP, run_in_process

        def look(context: Any) -> bool:
            return on_look(
                Look(
                    context.judgments(),
                    context.item_ids,
                    context.look,
                    context.n_looks,
                    context.final,
                    context.budget_exhausted,
                )
            )

        seen: dict[str, int] = {}

        def counting(context: Any) -> bool:
            seen["looks"] = context.look
            seen["items"] = len(context.item_ids)
            return look(context)

        run_id = run_in_process(
            request,
            runner=self.runner,
            order_seed=self.config.seed,
            looks=looks,
            on_look=counting,
            progress=self.config.progress,
            abort_after_failures=abort_after_failures,
        )
        summary = self.runner.summary(run_id)
        assert summary is not None
        rows = self.runner.judgments(run_id)
        counts = summary.counts
        return CallStats(
            planned=summary.n_judgments,
            judged=counts.done + counts.failed + counts.unparseable,
            saved=sum(1 for r in rows if r["status"] == "cancelled" and r["error"] == EARLY_STOP),
            provider_calls=summary.provider_calls,
            cached=summary.cached,
            cost_usd=summary.cost_usd,
            run_ids=[run_id],
            looks_done=seen.get("looks", 0),
            looks_planned=len(looks),
            items_judged=seen.get("items", 0),
            budget_exhausted=summary.budget_exhausted,
        )


class ApiBackend:
    """A running service: one run per batch (the API has no way to cancel part of a run)."""

    kind = "api"

    def __init__(self, config: GateConfig) -> None:
        from dialogue_judge.client import ApiClient

        assert config.api is not None
        self.config = config
        self.client = ApiClient(config.api, config.api_key or os.environ.get("DJ_API_KEY"))

    def close(self) -> None:
        self.client.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        from dialogue_judge.client import ApiError

        try:
            return fn()
        except ApiError as exc:
            raise GateInputError(f"the service at {self.config.api} answered: {exc.message}") from None

    def rubric(self, rubric_id: str) -> RubricInfo:
        rubrics = self._call(lambda: self.client.get("/v1/rubrics"))
        for rubric in rubrics:
            if rubric["id"] == rubric_id:
                scale = tuple(rubric["scale"]) if rubric.get("scale") else None
                return RubricInfo(rubric["id"], rubric["kind"], list(rubric["aspects"]), scale)
        known = ", ".join(sorted(r["id"] for r in rubrics))
        raise GateInputError(f"unknown rubric {rubric_id!r} on the service (known: {known})")

    def run_items(self, run_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self._call(functools.partial(self.client.get, f"/v1/runs/{run_id}/items", offset=offset, limit=1000))
            items.extend(page["items"])
            offset += 1000
            if offset >= page["total"]:
                return items

    def _wait(self, run_id: str, label: str) -> dict[str, Any]:
        from dialogue_judge.standalone import _progress

        deadline = time.monotonic() + self.config.timeout_s
        with _progress(self.config.progress) as bar:
            summary = self._call(lambda: self.client.run(run_id))
            task = bar.add_task(label, total=summary["n_judgments"], detail="")
            while True:
                summary = self._call(lambda: self.client.run(run_id))
                counts = summary["counts"]
                finished = sum(counts[k] for k in ("done", "failed", "unparseable", "cancelled"))
                bar.update(
                    task,
                    completed=finished,
                    detail=f"done {counts['done']} · failed {counts['failed'] + counts['unparseable']}",
                )
                if summary["status"] in ("done", "budget_exhausted"):
                    return dict(summary)
                if time.monotonic() > deadline:
                    raise GateInputError(
                        f"run {run_id} did not finish within {self.config.timeout_s:.0f}s "
                        f"({finished} of {summary['n_judgments']} judgments)"
                    )
                time.sleep(0.25)

    def run_judgments(self, run_id: str) -> list[dict[str, Any]]:
        self._wait(run_id, f"waiting for {run_id}")
        return list(self._call(lambda: self.client.all_judgments(run_id)))

    def judge(self, request: Any, looks: list[int], on_look: OnLook, abort_after_failures: int) -> CallStats:
        from dialogue_judge.standalone import seeded_order

        by_id = {item.id: item for item in request.items}
        order = seeded_order(list(by_id), self.config.seed)
        base = request.model_dump(mode="json", exclude={"items"})
        stats = CallStats(looks_planned=len(looks))
        rows: list[dict[str, Any]] = []
        start = 0
        failures = 0
        submitted_items = 0
        for index, end in enumerate(looks, start=1):
            body = dict(base)
            body["items"] = [by_id[i].model_dump(mode="json") for i in order[start:end]]
            body["name"] = f"{request.name or 'gate'} · batch {index}/{len(looks)}"
            if request.budget_usd is not None:
                remaining = request.budget_usd - stats.cost_usd
                if remaining <= 0:
                    stats.budget_exhausted = True
                    break
                body["budget_usd"] = remaining
            created = self._call(lambda: self.client.create_run(body))  # noqa: B023
            stats.run_ids.append(created["id"])
            summary = self._wait(created["id"], f"judging {created['id']} (batch {index}/{len(looks)})")
            batch_rows = list(self._call(lambda: self.client.all_judgments(created["id"])))  # noqa: B023
            rows.extend(batch_rows)
            submitted_items = end
            stats.planned += summary["n_judgments"]
            counts = summary["counts"]
            stats.judged += counts["done"] + counts["failed"] + counts["unparseable"]
            failures += counts["failed"] + counts["unparseable"]
            stats.provider_calls += summary["provider_calls"]
            stats.cached += summary["cached"]
            stats.cost_usd += summary["cost_usd"]
            stats.budget_exhausted = stats.budget_exhausted or bool(summary["budget_exhausted"])
            stats.looks_done = index
            stats.items_judged = end
            aborted = failures > abort_after_failures
            final = index == len(looks) or stats.budget_exhausted or aborted
            start = end
            if on_look(Look(rows, order[:end], index, len(looks), final, stats.budget_exhausted)) or final:
                break
        remaining_items = len(order) - submitted_items
        if remaining_items > 0 and submitted_items:
            per_item = stats.planned / submitted_items
            stats.saved = round(per_item * remaining_items)
            stats.planned += stats.saved
        return stats


# -- the decision over looks -----------------------------------------------------------------------------------


class GateDecider:
    """Turns the verdicts judged so far into per-aspect evidence after each look (see ``gate_stats``)."""

    def __init__(
        self,
        *,
        mode: str,
        aspects: list[str],
        threshold: float,
        alpha: float,
        scale: gs.Scale,
        sequential: bool,
        max_failed: float,
    ) -> None:
        self.mode = mode
        self.aspects = aspects
        self.threshold = threshold
        self.alpha = alpha
        self.scale = scale
        self.sequential = sequential
        self.max_failed = max_failed
        self.evidence: dict[str, gs.AspectEvidence] = {}
        self.decided_at: dict[str, int] = {}
        self.rows: list[dict[str, Any]] = []
        self.item_ids: list[str] = []
        self.failure_message: str | None = None
        self.budget_exhausted = False
        self.final_seen = False

    # values per aspect, aligned with the judged items
    def values(self, rows: list[dict[str, Any]], item_ids: list[str]) -> dict[str, np.ndarray]:
        if self.mode == "single":
            return {a: self.drops(rows, item_ids, a)[2] for a in self.aspects}
        outcomes = self.outcomes(rows)
        return {
            a: np.array([gs.loss_value(outcomes.get((a, i), {}).get("outcome")) for i in item_ids], dtype="float64")
            for a in self.aspects
        }

    @staticmethod
    def scores(rows: list[dict[str, Any]], aspect: str) -> dict[tuple[str, str], float]:
        sums: dict[tuple[str, str], list[float]] = defaultdict(list)
        for row in rows:
            if (
                row["mode"] == "single"
                and row["aspect"] == aspect
                and row["status"] == DONE
                and row.get("score") is not None
            ):
                sums[(row["item_id"], row["system_a"])].append(float(row["score"]))
        return {key: float(np.mean(values)) for key, values in sums.items()}

    def drops(
        self, rows: list[dict[str, Any]], item_ids: list[str], aspect: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scores = self.scores(rows, aspect)
        nan = float("nan")
        base = np.array([scores.get((i, BASELINE), nan) for i in item_ids], dtype="float64")
        cand = np.array([scores.get((i, CANDIDATE), nan) for i in item_ids], dtype="float64")
        return base, cand, base - cand

    @staticmethod
    def outcomes(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        """(aspect, item) -> the order-combined outcome for the candidate (``combine_orders``)."""
        import pandas as pd

        from judge_api.stats.preferences import combine_orders

        use = [r for r in rows if r["mode"] == "pairwise" and r["system_a"] == CANDIDATE and r["system_b"] == BASELINE]
        if not use:
            return {}
        frame = pd.DataFrame(
            [
                {
                    k: r.get(k)
                    for k in (
                        "item_id",
                        "mode",
                        "system_a",
                        "system_b",
                        "aspect",
                        "judge",
                        "order",
                        "sample_index",
                        "status",
                        "preference",
                        "outcome",
                    )
                }
                for r in use
            ]
        )
        combined = combine_orders(frame)
        return {(str(row["aspect"]), str(row["item_id"])): dict(row) for row in combined.to_dict("records")}

    def counts(self, rows: list[dict[str, Any]], aspect: str | None = None) -> tuple[int, int, int]:
        """(asked, failed, unparseable) among the gated judgments."""
        asked = failed = unparseable = 0
        for row in rows:
            if aspect is not None and row["aspect"] != aspect:
                continue
            status = row["status"]
            asked += status in ASKED
            failed += status == FAILED
            unparseable += status == UNPARSEABLE
        return asked, failed, unparseable

    def look(self, look: Look) -> bool:
        """Update the evidence; True when the gate should stop judging."""
        self.rows, self.item_ids = look.rows, look.item_ids
        self.budget_exhausted = look.budget_exhausted
        self.final_seen = look.final
        values = self.values(look.rows, look.item_ids)
        for aspect in self.aspects:
            if aspect in self.decided_at:
                continue
            evidence = gs.evaluate_aspect(
                values[aspect],
                scale=self.scale,
                threshold=self.threshold,
                alpha=self.alpha,
                n_aspects=len(self.aspects),
                final=look.final,
                sequential=self.sequential,
            )
            self.evidence[aspect] = evidence
            if evidence.decision != "undecided":
                self.decided_at[aspect] = look.look
        regression = any(e.decision == "regression" for e in self.evidence.values())
        settled = regression or len(self.decided_at) == len(self.aspects)
        if settled or look.final:
            asked, failed, unparseable = self.counts(look.rows)
            if asked and (failed + unparseable) / asked > self.max_failed:
                self.failure_message = self._failure_message(look.rows, asked, failed, unparseable)
            return True
        return False

    def _failure_message(self, rows: list[dict[str, Any]], asked: int, failed: int, unparseable: int) -> str:
        errors = [str(r.get("error") or "") for r in rows if r["status"] == FAILED]
        share = 100.0 * (failed + unparseable) / asked
        limit = f"{100 * self.max_failed:g}%"
        if errors and sum(e.startswith(UNREACHABLE_KINDS) for e in errors) * 2 > len(errors):
            example = next(e for e in errors if e.startswith(UNREACHABLE_KINDS))
            return f"the judge could not be reached: {failed} of {asked} judgments failed ({example})"
        if errors and sum(e.startswith("configuration") for e in errors) * 2 > len(errors):
            example = next(e for e in errors if e.startswith("configuration"))
            return f"the judge is not configured: {example}"
        detail = f"{unparseable} unparseable, {failed} failed"
        example = next(
            (str(r.get("error")) for r in rows if r["status"] in (FAILED, UNPARSEABLE) and r.get("error")), ""
        )
        return (
            f"too many unparseable or failed judgments: {failed + unparseable} of {asked} ({share:.1f}%; "
            f"{detail}) exceed the limit of {limit}" + (f"; e.g. {example[:200]}" if example else "")
        )


# -- building the result ---------------------------------------------------------------------------------------


_TRAILING_LABEL = re.compile(r"\s*(?:final\s+)?(?:rating|score|verdict)\s*:?\s*$", re.IGNORECASE)


def _excerpt(text: str | None, limit: int = 300) -> str:
    if not text:
        return ""
    flat = _TRAILING_LABEL.sub("", " ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _aspect_reports(decider: GateDecider, responses: dict[str, dict[str, str]], worst: int) -> list[AspectReport]:
    from judge_api.stats.scores import wilcoxon_p

    reports = []
    regression_seen = any(e.decision == "regression" for e in decider.evidence.values())
    for aspect in decider.aspects:
        evidence = decider.evidence.get(aspect)
        asked, failed, unparseable = decider.counts(decider.rows, aspect)
        report = AspectReport(
            aspect=aspect,
            verdict="undecided",
            threshold=decider.threshold,
            n_judgments=asked,
            n_failed=failed,
            n_unparseable=unparseable,
        )
        if evidence is not None:
            verdict: str = evidence.decision
            if verdict == "undecided" and not decider.final_seen and regression_seen:
                verdict = "not_decided"
            report.verdict = verdict
            report.decided_by = evidence.decided_by
            report.look = decider.decided_at.get(aspect)
            report.n = evidence.n
            report.estimate, report.ci_low, report.ci_high = evidence.estimate, evidence.ci_low, evidence.ci_high
            report.ci_level, report.ci_method, report.p_value = evidence.ci_level, evidence.ci_method, evidence.p_value
        if decider.mode == "single":
            base, cand, drops = decider.drops(decider.rows, decider.item_ids, aspect)
            ok = np.isfinite(drops)
            if ok.any():
                report.baseline_mean = float(base[ok].mean())
                report.candidate_mean = float(cand[ok].mean())
                sd = float(drops[ok].std(ddof=1)) if ok.sum() > 1 else 0.0
                report.effect_size = float(drops[ok].mean() / sd) if sd > 0 else None
                report.effect_size_name = "d_z"
                report.wilcoxon_p = wilcoxon_p(drops[ok])
            report.worst = _worst_single(decider, aspect, base, cand, drops, responses, worst)
        else:
            outcomes = decider.outcomes(decider.rows)
            mine = [outcomes[(aspect, i)] for i in decider.item_ids if (aspect, i) in outcomes]
            report.wins = sum(o["outcome"] == "win" for o in mine)
            report.ties = sum(o["outcome"] == "tie" for o in mine)
            report.losses = sum(o["outcome"] == "loss" for o in mine)
            if mine:
                report.effect_size = (report.losses - report.wins) / len(mine)
                report.effect_size_name = "net loss share"
            report.worst = _worst_pairwise(decider, aspect, mine, responses, worst)
        reports.append(report)
    return reports


def _explanations(rows: list[dict[str, Any]], aspect: str) -> dict[tuple[str, str, str | None], str]:
    return {
        (r["item_id"], r["system_a"], r.get("order")): str(r.get("explanation") or "")
        for r in rows
        if r["aspect"] == aspect and r["status"] == DONE
    }


def _worst_single(
    decider: GateDecider,
    aspect: str,
    base: np.ndarray,
    cand: np.ndarray,
    drops: np.ndarray,
    responses: dict[str, dict[str, str]],
    limit: int,
) -> list[dict[str, Any]]:
    explanations = _explanations(decider.rows, aspect)
    ranked = sorted(
        (i for i in range(len(drops)) if np.isfinite(drops[i]) and drops[i] > 0),
        key=lambda i: (-drops[i], decider.item_ids[i]),
    )
    out = []
    for index in ranked[:limit]:
        item_id = decider.item_ids[index]
        out.append(
            {
                "item_id": item_id,
                "baseline_score": float(base[index]),
                "candidate_score": float(cand[index]),
                "drop": float(drops[index]),
                "explanation": _excerpt(explanations.get((item_id, CANDIDATE, None)), 1000),
                "baseline_explanation": _excerpt(explanations.get((item_id, BASELINE, None)), 1000),
                "candidate_response": _excerpt(responses.get(item_id, {}).get(CANDIDATE)),
                "baseline_response": _excerpt(responses.get(item_id, {}).get(BASELINE)),
            }
        )
    return out


def _worst_pairwise(
    decider: GateDecider, aspect: str, combined: list[dict[str, Any]], responses: dict[str, dict[str, str]], limit: int
) -> list[dict[str, Any]]:
    explanations = _explanations(decider.rows, aspect)
    lost = [c for c in combined if c["outcome"] == "loss" or "loss" in (c.get("outcome_ab"), c.get("outcome_ba"))]
    lost.sort(key=lambda c: (c["outcome"] != "loss", float(c.get("preference") or 0.0), str(c["item_id"])))
    out = []
    for entry in lost[:limit]:
        item_id = str(entry["item_id"])
        order = "ab" if entry.get("outcome_ab") == "loss" else "ba"
        out.append(
            {
                "item_id": item_id,
                "outcome": entry["outcome"],
                "outcome_ab": entry.get("outcome_ab"),
                "outcome_ba": entry.get("outcome_ba"),
                "preference": entry.get("preference"),
                "explanation": _excerpt(explanations.get((item_id, CANDIDATE, order)), 1000),
                "candidate_response": _excerpt(responses.get(item_id, {}).get(CANDIDATE)),
                "baseline_response": _excerpt(responses.get(item_id, {}).get(BASELINE)),
            }
        )
    return out


def _finish(result: GateResult, decider: GateDecider, responses: dict[str, dict[str, str]], worst: int) -> None:
    result.aspects = _aspect_reports(decider, responses, worst)
    bound = "allowed " + (fmt_num(result.threshold, 2) if result.mode == "single" else fmt_num(result.threshold, 3))
    if decider.failure_message:
        result.status, result.headline = "error", f"ERROR: {decider.failure_message}"
        return
    regressed = [a for a in result.aspects if a.verdict == "regression"]
    undecided = [a for a in result.aspects if a.verdict in ("undecided", "not_decided")]
    if regressed:
        first = regressed[0]
        effect = ""
        if first.effect_size is not None:
            effect = f", {first.effect_size_name} = {fmt_num(first.effect_size, 2)}"
        if result.mode == "pairwise":
            effect = f", {first.losses} losses, {first.ties} ties, {first.wins} wins"
        names = ", ".join(a.aspect for a in regressed)
        result.status = "regression"
        result.headline = (
            f"FAIL: regression in {names}: {describe(first, result.mode)} above the {bound} "
            f"(p = {fmt_p(first.p_value)}{effect})"
        )
        return
    if undecided:
        first = undecided[0]
        knob = "--max-drop" if result.mode == "single" else "--max-loss-rate"
        if decider.budget_exhausted:
            why = (
                f"the budget of ${result.budget_usd:g} ran out after {result.calls.items_judged} of "
                f"{result.n_items} items (${result.calls.cost_usd:.4f} spent) before the gate could decide"
            )
        else:
            why = f"need more items or a larger {knob}"
        result.status = "undecided"
        result.headline = (
            f"UNDECIDED: {why}: {first.aspect}'s {describe(first, result.mode)} contains the {bound} ({first.n} items)"
        )
        return
    names = ", ".join(a.aspect for a in result.aspects)
    result.status = "pass"
    if len(result.aspects) == 1:
        evidence = describe(result.aspects[0], result.mode)
        result.headline = f"PASS: no regression in {names}: {evidence} below the {bound}"
    else:
        result.headline = f"PASS: no regression in {names} (every interval below the {bound})"


# -- the gate ------------------------------------------------------------------------------------------------------


def _check_config(config: GateConfig) -> None:
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
    if config.workers < 1:
        raise GateInputError("--workers must be at least 1")
    if not config.judge:
        raise GateInputError("--judge is required (e.g. openai:gpt-4o)")


def _side(spec: Any, label: str, system: str | None, backend: Any) -> Side:
    if is_run_id(spec):
        items = backend.run_items(spec)
        chosen = system or _only_system(items, spec, label)
        side = side_from_records(items, f"{label} run {spec}", chosen)
        side.run_id, side.system = spec, chosen
        return side
    return load_side(spec, label, system)


def _only_system(items: list[dict[str, Any]], run_id: str, label: str) -> str:
    systems = sorted({s for item in items for s in item.get("candidates", {})})
    if len(systems) != 1:
        raise GateInputError(
            f"{label} run {run_id} has the systems {', '.join(systems)}; name one with --{label}-system"
        )
    return systems[0]


def _reuse_rows(
    backend: Any, baseline: Side, candidate: Side, judge_key: str, rubric: str, aspects: list[str]
) -> list[dict[str, Any]] | None:
    """Existing single-mode verdicts of both runs, relabelled baseline/candidate; None when incomplete."""
    assert baseline.run_id and candidate.run_id
    out: list[dict[str, Any]] = []
    for side, label in ((baseline, BASELINE), (candidate, CANDIDATE)):
        rows = [
            dict(r)
            for r in backend.run_judgments(side.run_id)
            if r["mode"] == "single"
            and r["judge"] == judge_key
            and r["rubric_id"] == rubric
            and r["aspect"] in aspects
            and r["system_a"] == side.system
        ]
        if {(r["item_id"], r["aspect"]) for r in rows} != {(i, a) for i in side.responses for a in aspects}:
            return None
        for row in rows:
            row["system_a"] = label
        out.extend(rows)
    return out


def run_gate(config: GateConfig) -> GateResult:
    """Run the gate; never raises for bad input or judge trouble (those give ``status == "error"``)."""
    started = time.monotonic()
    result = GateResult(
        status="error",
        headline="",
        mode=config.mode,
        alpha=config.alpha,
        sequential=config.sequential,
        seed=config.seed,
        judge=config.judge,
        baseline=_label(config.baseline),
        candidate=_label(config.candidate),
        backend="api" if config.api else "standalone",
        budget_usd=config.budget_usd,
    )
    backend: Any = None
    try:
        _check_config(config)
        backend = ApiBackend(config) if config.api else LocalBackend(config)
        _run(config, backend, result)
    except GateInputError as exc:
        result.status, result.headline = "error", f"ERROR: {exc}"
    except Exception as exc:  # never a silent pass: anything unexpected is exit 2 with the reason
        result.status, result.headline = "error", f"ERROR: the gate could not run: {type(exc).__name__}: {exc}"
    finally:
        if backend is not None:
            backend.close()
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _label(spec: Any) -> str:
    if isinstance(spec, (str, Path)):
        return str(spec)
    return "<in-memory responses>"


def _run(config: GateConfig, backend: Any, result: GateResult) -> None:
    from judge_api.judges import JudgeSpecError, parse_judge
    from judge_api.planning import PlanError
    from judge_api.schemas import JudgeOptions, RunCreate

    try:
        judge_key = parse_judge(config.judge).key
    except JudgeSpecError as exc:
        raise GateInputError(str(exc)) from None
    result.judge = judge_key
    rubric = backend.rubric(config.rubric or DEFAULT_RUBRIC[config.mode])
    result.rubric = rubric.id
    if rubric.kind != config.mode:
        raise GateInputError(
            f"rubric {rubric.id!r} is a {rubric.kind} rubric; use --mode {rubric.kind} or a {config.mode} rubric"
        )
    aspects = list(
        dict.fromkeys(config.aspects or (["consistency"] if "consistency" in rubric.aspects else rubric.aspects))
    )
    unknown = [a for a in aspects if a not in rubric.aspects]
    if unknown:
        raise GateInputError(
            f"rubric {rubric.id!r} has no aspect {', '.join(map(repr, unknown))} (has: {', '.join(rubric.aspects)})"
        )
    if config.mode == "single":
        low, high = rubric.scale or (1.0, 100.0)
        scale = gs.Scale("single", float(low), float(high))
        threshold = config.max_drop if config.max_drop is not None else gs.default_max_drop(low, high)
        result.threshold_name = "max_drop"
    else:
        scale = gs.Scale("pairwise")
        threshold = config.max_loss_rate
        result.threshold_name = "max_loss_rate"
    result.threshold = threshold

    baseline = _side(config.baseline, "baseline", config.baseline_system, backend)
    candidate = _side(config.candidate, "candidate", config.candidate_system, backend)
    items = load_items(config.items) if config.items is not None else None
    merged = merge_sides(baseline, candidate, items)
    responses = {m["id"]: dict(m["candidates"]) for m in merged}
    result.n_items = len(merged)

    reused = None
    if config.mode == "single" and baseline.run_id and candidate.run_id:
        reused = _reuse_rows(backend, baseline, candidate, judge_key, rubric.id, aspects)
        if reused is None:
            result.notes.append(
                "the runs hold no complete single-mode verdicts for this rubric, judge and aspect: "
                "their responses were judged anew"
            )

    order_ids = sorted(responses)
    if reused is not None:
        from dialogue_judge.standalone import seeded_order

        decider = GateDecider(
            mode=config.mode,
            aspects=aspects,
            threshold=threshold,
            alpha=config.alpha,
            scale=scale,
            sequential=False,
            max_failed=config.max_failed,
        )
        decider.look(Look(reused, seeded_order(order_ids, config.seed), 1, 1, True))
        asked, _, _ = decider.counts(reused)
        result.sequential = False
        result.calls = CallStats(
            planned=len(reused),
            judged=asked,
            run_ids=[baseline.run_id or "", candidate.run_id or ""],
            looks_done=1,
            looks_planned=1,
            items_judged=len(order_ids),
            reused=True,
        )
        result.notes.append("verdicts reused from the two runs: no judge call; fixed-sample test at the full alpha")
        _finish(result, decider, responses, config.worst)
        return

    validated = validate_items(merged)
    try:
        request = RunCreate(
            name=config.name or f"gate: {result.candidate} vs {result.baseline}"[:200],
            items=validated,
            rubrics=[rubric.id],
            judges=[config.judge],
            mode=[config.mode],  # type: ignore[list-item]  # checked in _check_config
            aspects=aspects,
            pairing="baseline" if config.mode == "pairwise" else "all",
            baseline=BASELINE if config.mode == "pairwise" else None,
            orders="both",
            options=JudgeOptions(
                temperature=config.temperature,
                max_tokens=config.max_tokens,
                structured_output=config.structured_output,
                reask=config.reask,
            ),
            budget_usd=config.budget_usd,
            meta={"gate": {"baseline": result.baseline, "candidate": result.candidate, "seed": config.seed}},
        )
    except Exception as exc:
        raise GateInputError(f"the request is not valid: {exc}") from None
    looks = gs.look_schedule(len(validated), config.batch, sequential=config.sequential)
    decider = GateDecider(
        mode=config.mode,
        aspects=aspects,
        threshold=threshold,
        alpha=config.alpha,
        scale=scale,
        sequential=config.sequential,
        max_failed=config.max_failed,
    )
    per_item = 2 * len(aspects)  # two systems (single) or two presentation orders (pairwise) per aspect
    abort_after = math.floor(config.max_failed * per_item * len(validated))
    try:
        result.calls = backend.judge(request, looks, decider.look, abort_after)
    except PlanError as exc:
        raise GateInputError(f"{exc.field}: {exc.message}") from None
    _finish(result, decider, responses, config.worst)
    if result.calls.saved:
        share = 100.0 * result.calls.saved / max(result.calls.planned, 1)
        result.notes.append(
            f"the early stop saved {result.calls.saved} of {result.calls.planned} judge calls ({share:.0f}%)"
        )


# -- command-line helper -------------------------------------------------------------------------------------------


def write_outputs(
    result: GateResult,
    *,
    markdown: Path | None = None,
    junit: Path | None = None,
    json_path: Path | None = None,
    step_summary: bool = True,
) -> list[str]:
    """Write the requested report files (and append to ``$GITHUB_STEP_SUMMARY``); returns error messages."""
    import json

    problems = []
    text = result.markdown()
    targets: list[tuple[Path, str, str]] = []
    if markdown is not None:
        targets.append((markdown, text, "w"))
    if junit is not None:
        targets.append((junit, result.junit_xml(), "w"))
    if json_path is not None:
        targets.append((json_path, json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n", "w"))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and summary:
        targets.append((Path(summary), text + "\n", "a"))
    for path, content, mode in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open(mode, encoding="utf-8") as handle:
                handle.write(content)
        except OSError as exc:
            problems.append(f"could not write {path}: {exc}")
    return problems


def run_cli(
    config: GateConfig,
    *,
    markdown: Path | None = None,
    junit: Path | None = None,
    json_path: Path | None = None,
    echo: Callable[[str], None] = print,
    echo_err: Callable[[str], None] | None = None,
) -> int:
    """What ``dialogue-judge gate`` does: run, write the reports, print the Markdown summary; the exit code."""
    import sys

    result = run_gate(config)
    problems = write_outputs(result, markdown=markdown, junit=junit, json_path=json_path)
    echo(result.markdown())
    err = echo_err or (lambda text: print(text, file=sys.stderr))
    for problem in problems:
        err(f"warning: {problem}")
    err(result.headline)
    return result.exit_code


def parse_aspects(values: Sequence[str] | None) -> list[str] | None:
    """``--aspect a --aspect b`` or ``--aspect a,b``."""
    if not values:
        return None
    out = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return out or None
