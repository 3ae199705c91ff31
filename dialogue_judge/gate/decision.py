"""The decision over looks: ``GateDecider`` turns the verdicts judged so far into per-aspect evidence after each
``Look`` (the sequential procedure of ``dialogue_judge.gate.stats``) and says when to stop judging; ``conclude``
turns its evidence into the result's per-aspect reports (estimate, interval, effect size, worst items), status
and headline."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dialogue_judge.gate import stats as gs
from dialogue_judge.gate.inputs import BASELINE, CANDIDATE
from dialogue_judge.gate.reports import describe, fmt_num, fmt_p
from dialogue_judge.gate.result import AspectReport, GateResult

DONE, FAILED, UNPARSEABLE = "done", "failed", "unparseable"
ASKED = (DONE, FAILED, UNPARSEABLE)
UNREACHABLE_KINDS = ("connection_error", "timeout")


@dataclass
class Look:
    """The verdicts after one batch: every judged row so far, the items judged so far in judging order."""

    rows: list[dict[str, Any]]
    item_ids: list[str]
    look: int
    n_looks: int
    final: bool
    budget_exhausted: bool = False


class GateDecider:
    """Turns the verdicts judged so far into per-aspect evidence after each look (see ``dialogue_judge.gate.stats``)."""

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
        panel_aggregate: str = "mean",
        higher_is_worse: bool = False,
        n_judges: int = 1,
    ) -> None:
        self.mode = mode
        self.n_judges = max(int(n_judges), 1)
        self.quorum = self.n_judges // 2 + 1 if self.n_judges > 1 else 1
        """Several judges: a unit needs a verdict of a majority of them to have the panel's (``stats.panel``)."""
        self.higher_is_worse = higher_is_worse
        """Single mode: the values are figures where higher is worse (a contradiction rate), so the gated change is
        candidate - baseline (an increase) instead of baseline - candidate (a drop)."""
        self.panel_aggregate = panel_aggregate
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
        outcomes = self.outcomes(rows, self.n_judges)
        return {
            a: np.array([gs.loss_value(outcomes.get((a, i), {}).get("outcome")) for i in item_ids], dtype="float64")
            for a in self.aspects
        }

    def scores(self, rows: list[dict[str, Any]], aspect: str) -> dict[tuple[str, str], float]:
        """(item, system) -> score: each judge's samples averaged, then the judges' scores aggregated with the
        panel aggregate (mean or median) when several judges form a panel."""
        sums: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for row in rows:
            if (
                row["mode"] == "single"
                and row["aspect"] == aspect
                and row["status"] == DONE
                and row.get("score") is not None
            ):
                sums[(row["item_id"], row["system_a"], str(row.get("judge") or ""))].append(float(row["score"]))
        per_judge: dict[tuple[str, str], list[float]] = defaultdict(list)
        for (item_id, system, _), values in sums.items():
            per_judge[(item_id, system)].append(float(np.mean(values)))
        combine = np.median if self.panel_aggregate == "median" else np.mean
        return {key: float(combine(values)) for key, values in per_judge.items() if len(values) >= self.quorum}

    def drops(
        self, rows: list[dict[str, Any]], item_ids: list[str], aspect: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scores = self.scores(rows, aspect)
        nan = float("nan")
        base = np.array([scores.get((i, BASELINE), nan) for i in item_ids], dtype="float64")
        cand = np.array([scores.get((i, CANDIDATE), nan) for i in item_ids], dtype="float64")
        return base, cand, (cand - base) if self.higher_is_worse else (base - cand)

    @staticmethod
    def outcomes(rows: list[dict[str, Any]], n_judges: int = 0) -> dict[tuple[str, str], dict[str, Any]]:
        """(aspect, item) -> the order-combined outcome for the candidate (``combine_orders``). With ``n_judges``
        (a panel of that many): only where a majority of them has one, and not an even split while a judge is
        missing (the missing judge would have decided it)."""
        quorum = n_judges // 2 + 1 if n_judges > 1 else 1
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
        by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for row in combined.to_dict("records"):
            by_key[(str(row["aspect"]), str(row["item_id"]))].append(dict(row))
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for key, judged in by_key.items():
            if len(judged) < quorum:
                continue
            if len(judged) == 1:
                out[key] = judged[0]
                continue
            # a panel: the majority of the judges' order-combined outcomes (an even split of all of them is a tie)
            codes = [{"win": 1, "tie": 0, "loss": -1}[j["outcome"]] for j in judged]
            if len(judged) < n_judges and codes.count(1) == codes.count(-1) > 0:
                continue
            vote = int(np.sign(sum(codes)))
            outcome = {1: "win", 0: "tie", -1: "loss"}[vote]
            out[key] = {
                **judged[0],
                "judge": "panel",
                "outcome": outcome,
                "preference": float(np.mean([float(j.get("preference") or 0.0) for j in judged])),
                "outcome_ab": outcome if any(j.get("outcome_ab") == outcome for j in judged) else None,
                "outcome_ba": outcome if any(j.get("outcome_ba") == outcome for j in judged) else None,
                "judges": {str(j["judge"]): j["outcome"] for j in judged},
            }
        return out

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


def aspect_reports(decider: GateDecider, responses: dict[str, dict[str, str]], worst: int) -> list[AspectReport]:
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
            change="increase" if decider.higher_is_worse else "drop",
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
            outcomes = decider.outcomes(decider.rows, decider.n_judges)
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


def conclude(result: GateResult, decider: GateDecider, responses: dict[str, dict[str, str]], worst: int) -> None:
    """Fill in the result's aspects, status and headline from the decider's evidence."""
    result.aspects = aspect_reports(decider, responses, worst)
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
