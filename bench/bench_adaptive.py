"""Adaptive pairwise ranking against full round robin: how many judge calls it takes, and whether it ends with the
same ranking.

Part ``simulated`` - 6 systems x 80 items, 20 seeded replications per scenario. Each system has a known strength
``theta`` (Bradley-Terry log-odds); each item gives each system a quality ``50 + 8.31 * theta + N(0, 10^2)`` (the
item-level noise: a system can do badly on one item and well on the next), planted in the response as the project
simulator's ``<<q=NN>>`` marker. A comparison is judged the service's way, minus the queue and the database: the
``mtbench-pair-v2`` rubric renders the prompt in both presentation orders, the judge simulator
(``judge_simulator.behaviour``) answers it ([[A]]/[[B]], [[C]] when the qualities are within 2 points, and a
position bias: 10 % of prompts get "the first one wins" whatever the qualities), the project's parser reads the
verdict and the orders are combined as the report does (disagreeing orders are a tie). ``8.31 = 10 * sqrt(2) /
1.702`` makes ``P(a beats b)`` about ``logistic(theta_a - theta_b)`` before ties and position bias.

Round robin judges every pair on every item in both orders (2,400 calls); its Bradley-Terry ranking is the
reference. Adaptive pairing (``judge_api.adaptive.planner``, the service's defaults: confidence 0.95, batches of
16 comparisons) runs on the same judge until it stops; a replication *agrees* when its ranking equals round
robin's. Also shown: adaptive pairing with a call budget of 30 % of round robin (``--budget-share``).

Scenarios (strength gaps between adjacent systems): evenly spaced 0.5, 1.0 and 1.5 apart, and the six MT-Bench
models at the strengths their 2,400 GPT-4 pairwise verdicts give (fitted from the data file at run time).

Part ``mtbench`` - the MT-Bench GPT-4 pairwise verdicts (``gpt4_pair.jsonl``: 80 questions x 2 turns x 15 pairs,
each verdict already combining both presentation orders) as an oracle judge: a comparison of a pair on an item
(question, turn) is answered by looking its verdict up (``tie (inconsistent)`` is the disagreeing-orders tie) and
costs two calls. The reference is the ranking all 2,400 verdicts (4,800 calls) give. Adaptive pairing is run with
20 planner seeds (the seed orders each pair's items), with and without budgets, and the places where its ranking
differs from the reference are listed.

Usage::

    python bench/bench_adaptive.py                          # both parts
    python bench/bench_adaptive.py --part simulated --replications 20
    python bench/bench_adaptive.py --part mtbench --data ../shared/data/mtbench_human_judgments
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from judge_api.adaptive.planner import PlannerConfig  # noqa: E402
from judge_api.adaptive.ranking import Comparison, RankingState  # noqa: E402
from judge_api.adaptive.replay import (  # noqa: E402
    AdaptiveResult,
    full_ranking,
    oracle_from_judgments,
    pair_items_of,
    run_adaptive,
)
from judge_api.adaptive.sampling import more_samples, rule_for, usage  # noqa: E402
from judge_api.rubrics import get_registry  # noqa: E402
from judge_api.stats.mtbench import load_mtbench_gpt4_pair_judgments  # noqa: E402
from judge_simulator.behaviour import JudgeRequest as SimRequest  # noqa: E402
from judge_simulator.behaviour import judge as simulate  # noqa: E402
from judge_simulator.script import Rule, Script  # noqa: E402
from workers.parsing import parse_reply  # noqa: E402
from workers.prompting import render  # noqa: E402
from workers.verdicts import verdict_values  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "mtbench_human_judgments"
N_SYSTEMS, N_ITEMS = 6, 80
QUALITY_PER_THETA = 10.0 * math.sqrt(2.0) / 1.702
ITEM_NOISE = 10.0
TIE_MARGIN = 2.0
POSITION_BIAS = 0.1
RUBRIC = "mtbench-pair-v2"
SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


# -- part (a): the simulator as the judge ----------------------------------------------------------------------


def mtbench_strengths(data: Path) -> dict[str, float]:
    """Bradley-Terry strengths of the six MT-Bench models from all GPT-4 pairwise verdicts."""
    oracle = oracle_from_judgments(load_mtbench_gpt4_pair_judgments(data / "gpt4_pair.jsonl"))
    outcomes = [Comparison(i, a, b, s) for (i, a, b), s in oracle.verdicts.items() if a < b]
    state = RankingState(oracle.systems, outcomes)
    return {name: float(state.theta[i]) for i, name in enumerate(oracle.systems)}


def measured_gaps(judge: SimulatedJudge, pair_items: dict[tuple[str, str], list[str]]) -> list[float]:
    """Adjacent gaps of the Bradley-Terry strengths round robin measures (ties and position bias included)."""
    outcomes = [
        Comparison(i, a, b, score)
        for (a, b), items in pair_items.items()
        for i in items
        if (score := judge(i, a, b)) is not None
    ]
    theta = sorted(RankingState(judge.systems, outcomes).theta, reverse=True)
    return [float(x - y) for x, y in itertools.pairwise(theta)]


def calibrated_mtbench(data: Path, rounds: int = 3, n_items: int = 400) -> tuple[dict[str, float], float]:
    """Latent strengths proportional to the MT-Bench ones, scaled so that the simulated judge's round robin (on
    ``n_items`` items, seed 10_000) measures the same mean adjacent gap as GPT-4's verdicts do: ties and position
    bias shrink what a judge measures, so planting the measured strengths as latent ones would make the scenario
    harder than MT-Bench was."""
    target_theta = mtbench_strengths(data)
    ordered = sorted(target_theta.values(), reverse=True)
    target = (ordered[0] - ordered[-1]) / (len(ordered) - 1)
    scale = 1.0
    for _ in range(rounds):
        theta = {name: scale * value for name, value in target_theta.items()}
        judge = SimulatedJudge(theta, 10_000, n_items=n_items)
        pair_items = pair_items_of({i: list(item["candidates"]) for i, item in judge.items.items()})
        gaps = measured_gaps(judge, pair_items)
        scale *= target / (sum(gaps) / len(gaps))
    return {name: scale * value for name, value in target_theta.items()}, scale


def scenarios(data: Path) -> dict[str, dict[str, float]]:
    """Latent strengths per scenario (what the judge's pairwise win probabilities follow before ties and position
    bias; the figures print what round robin measures)."""
    out = {
        f"latent gaps {gap}": {f"sys{k + 1}": gap * ((N_SYSTEMS - 1) / 2 - k) for k in range(N_SYSTEMS)}
        for gap in (0.5, 1.0, 1.5, 2.0)
    }
    if (data / "gpt4_pair.jsonl").exists():
        theta, scale = calibrated_mtbench(data)
        out[f"MT-Bench models (GPT-4 strengths x {scale:.2f} latent)"] = theta
    return out


class SimulatedJudge:
    """One replication: planted qualities per (item, system), the simulator answering the rendered prompts."""

    def __init__(self, theta: dict[str, float], seed: int, n_items: int = N_ITEMS, sample_jitter: float = 0.0) -> None:
        rng = np.random.default_rng(seed)
        self.systems = list(theta)
        self.items: dict[str, dict[str, Any]] = {}
        for k in range(n_items):
            quality = {s: 200.0 + QUALITY_PER_THETA * theta[s] + rng.normal(0.0, ITEM_NOISE) for s in self.systems}
            candidates = {s: f"Answer of {s} to question {k}. <<q={q:.2f}>>" for s, q in quality.items()}
            self.items[f"item-{k:03d}"] = {
                "id": f"item-{k:03d}",
                "dialogue": [{"speaker": "user", "text": f"Question {k}: what would you recommend, and why?"}],
                "candidates": candidates,
            }
        self.rubric = get_registry().get(RUBRIC)
        rule = Rule(name="pairwise-fastchat", match=r"\[\[A\]\]", kind="pairwise", pairwise_format="fastchat")
        rule = rule.model_copy(update={"tie_margin": TIE_MARGIN})
        self.script = Script(seed=seed, rules=[rule], position_bias=POSITION_BIAS, sample_jitter=sample_jitter)
        self.calls = 0
        self._memo: dict[tuple[str, str, str], float | None] = {}

    def _order(self, item: dict[str, Any], a: str, b: str, order: str) -> str | None:
        values = self.verdict(item, a, b, order)
        return None if values is None else str(values["outcome"])

    def verdict(
        self, item: dict[str, Any], a: str, b: str, order: str, sample: int | None = None
    ) -> dict[str, Any] | None:
        """The stored verdict values (outcome and preference for ``a``) of one presentation order; ``sample``: a
        self-consistency sample (temperature 0.7, seed = sample index, as the service sends them)."""
        first, second = (a, b) if order == "ab" else (b, a)
        prompt = render(self.rubric, item, "overall", item["candidates"][first], item["candidates"][second])
        text = "\n\n".join(m["content"] for m in prompt.messages)
        request = (
            SimRequest(model="sim-judge", prompt=text, temperature=0.0)
            if sample is None
            else SimRequest(model="sim-judge", prompt=text, temperature=0.7, request_seed=sample)
        )
        parsed = parse_reply(simulate(self.script, request).text, self.rubric)
        if not parsed.ok:
            return None
        return verdict_values(self.rubric, _Task(order), parsed)  # type: ignore[arg-type]

    def __call__(self, item_id: str, a: str, b: str) -> float | None:
        key = (item_id, a, b)
        if key not in self._memo:
            self.calls += 2
            item = self.items[item_id]
            ab, ba = self._order(item, a, b, "ab"), self._order(item, a, b, "ba")
            self._memo[key] = _combine(ab, ba)
        return self._memo[key]


class _Task:
    """The two fields of a stored judgment ``verdict_values`` reads."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.judge_params: dict[str, Any] = {}


def _combine(ab: str | None, ba: str | None) -> float | None:
    """The report's rule (``preferences.combine_orders``): orders agree -> that outcome, disagree -> tie."""
    present = [o for o in (ab, ba) if o is not None]
    if not present:
        return None
    if len(present) == 2 and present[0] != present[1]:
        return 0.5
    return SCORE[present[0]]


def run_simulated(replications: int, budget_share: float, data: Path, batch: int = 16) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, theta in scenarios(data).items():
        truth = sorted(theta, key=lambda s: -theta[s])
        rows = []
        started = time.perf_counter()
        for seed in range(replications):
            judge = SimulatedJudge(theta, seed)
            pair_items = pair_items_of({i: list(item["candidates"]) for i, item in judge.items.items()})
            reference = full_ranking(judge.systems, pair_items, judge)
            round_robin = judge.calls
            gaps = measured_gaps(judge, pair_items)
            adaptive = run_adaptive(judge.systems, pair_items, judge, PlannerConfig(batch=batch))
            budget = int(budget_share * round_robin)
            capped = run_adaptive(judge.systems, pair_items, judge, PlannerConfig(batch=batch, max_calls=budget))
            rows.append(
                {
                    "seed": seed,
                    "round_robin_calls": round_robin,
                    "round_robin_is_true_order": reference == truth,
                    "agree": adaptive.ranking == reference,
                    "calls": adaptive.calls,
                    "share": adaptive.calls / round_robin,
                    "stop": adaptive.stop,
                    "budget_calls": capped.calls,
                    "budget_agree": capped.ranking == reference,
                    "budget_stop": capped.stop,
                    "differs": _differences(adaptive.ranking, reference),
                    "measured_gaps": gaps,
                }
            )
        results[name] = {"theta": theta, "rows": rows, "seconds": time.perf_counter() - started}
        _print_scenario(name, theta, rows, budget, budget_share)
    return results


def _print_scenario(
    name: str, theta: dict[str, float], rows: list[dict[str, Any]], budget: int, budget_share: float
) -> None:
    n = len(rows)
    shares = sorted(r["share"] for r in rows)
    latent = sorted(theta.values(), reverse=True)
    measured = np.mean([r["measured_gaps"] for r in rows], axis=0)
    print(f"\n== {name}")
    print(f"  latent adjacent gaps {', '.join(f'{x - y:.2f}' for x, y in itertools.pairwise(latent))}")
    print(f"  gaps round robin measures (mean of {n}): {', '.join(f'{g:.2f}' for g in measured)}")
    print(
        f"  round robin: {rows[0]['round_robin_calls']} calls; its ranking is the true order in "
        f"{sum(r['round_robin_is_true_order'] for r in rows)}/{n}"
    )
    agree = sum(r["agree"] for r in rows)
    print(
        f"  adaptive (confidence 0.95): same ranking as round robin in {agree}/{n} ({100 * agree / n:.0f} %); "
        f"calls used {_quantiles(shares)}"
    )
    print(f"    calls per replication: {[r['calls'] for r in rows]}")
    print(f"    stop reasons: {dict(Counter(r['stop'] for r in rows))}")
    within = sum(r["agree"] and r["share"] <= 0.30 for r in rows)
    print(f"    agree AND <= 30 % of round robin's calls: {within}/{n} ({100 * within / n:.0f} %)")
    for r in rows:
        if not r["agree"]:
            print(f"    seed {r['seed']}: differs {r['differs']}")
    budget_agree = sum(r["budget_agree"] for r in rows)
    print(
        f"  adaptive with a budget of {100 * budget_share:.0f} % of round robin ({budget} calls max): "
        f"same ranking in {budget_agree}/{n} ({100 * budget_agree / n:.0f} %); "
        f"stops {dict(Counter(r['budget_stop'] for r in rows))}"
    )


def _quantiles(shares: Sequence[float]) -> str:
    q = np.quantile(shares, [0.0, 0.25, 0.5, 0.75, 1.0])
    return "min {:.1%} / p25 {:.1%} / median {:.1%} / p75 {:.1%} / max {:.1%} of round robin".format(*q)


def _differences(ranking: list[str], reference: list[str]) -> list[str]:
    return [
        f"#{k + 1}: {got} (reference {want})"
        for k, (got, want) in enumerate(zip(ranking, reference, strict=True))
        if got != want
    ]


# -- adaptive self-consistency on the simulated judge ------------------------------------------------------------


def run_samples(replications: int, fixed: int, jitter: float) -> dict[str, Any]:
    """Every judgment (item x pair x order) of the 1.0-gap scenario sampled ``fixed`` times at temperature 0.7 by
    the simulator with a sample jitter of +-``jitter`` quality points; adaptive sampling (``sampling.more_samples``:
    the service's default first sample count 1, and 2) takes a prefix of the same samples."""
    theta = {f"sys{k + 1}": 1.0 * ((N_SYSTEMS - 1) / 2 - k) for k in range(N_SYSTEMS)}
    rubric = get_registry().get(RUBRIC)
    rules = {
        first: rule_for(
            "pairwise",
            max_samples=fixed,
            min_samples=first,
            verdict_levels=list(rubric.verdicts.values()),
            outcome_map=rubric.outcome_map,
        )
        for first in (1, 2)
    }
    taken: dict[int, list[int]] = {first: [] for first in rules}
    agree = dict.fromkeys(rules, 0)
    ranking_agree = dict.fromkeys(rules, 0)
    total = 0
    for seed in range(replications):
        judge = SimulatedJudge(theta, seed, sample_jitter=jitter)
        fixed_rows: list[tuple[str, str, str, str, str | None]] = []
        adaptive_rows: dict[int, list[tuple[str, str, str, str, str | None]]] = {first: [] for first in rules}
        for (a, b), items in pair_items_of({i: list(v["candidates"]) for i, v in judge.items.items()}).items():
            for item_id in items:
                for order in ("ab", "ba"):
                    verdicts = [judge.verdict(judge.items[item_id], a, b, order, k) for k in range(fixed)]
                    prefs = [float(v["preference"]) for v in verdicts if v is not None]
                    full = _majority(rubric.outcome_map, prefs)
                    fixed_rows.append((item_id, a, b, order, full))
                    total += 1
                    for first, rule in rules.items():
                        n = 1
                        while more_samples(rule, n, prefs[:n]):
                            n += 1
                        taken[first].append(n)
                        short = _majority(rubric.outcome_map, prefs[:n])
                        agree[first] += full == short
                        adaptive_rows[first].append((item_id, a, b, order, short))
        reference = _ranking(judge.systems, fixed_rows)
        for first in rules:
            ranking_agree[first] += _ranking(judge.systems, adaptive_rows[first]) == reference
    print(f"\n== adaptive self-consistency: 1.0-gap scenario, {replications} replications, sample jitter +-{jitter:g}")
    out: dict[str, Any] = {}
    for first in rules:
        use = usage(taken[first], fixed)
        print(
            f"  first samples {first}: {use.samples} samples for {use.judgments} judgments instead of "
            f"{use.judgments * fixed} ({fixed} each): {100 * use.saving:.1f} % fewer; samples per judgment "
            f"{use.histogram}; majority verdict = the {fixed}-sample one for {100 * agree[first] / total:.1f} %; "
            f"same Bradley-Terry ranking in {ranking_agree[first]}/{replications}"
        )
        out[str(first)] = {"histogram": use.histogram, "saving": use.saving, "verdict_agreement": agree[first] / total}
    return out


def _majority(outcome_map: Mapping[str, str], prefs: Sequence[float]) -> str | None:
    """The service's rule (``preferences.combine_orders``): the sign of the mean outcome code of the samples."""
    if not prefs:
        return None
    codes = [{"win": 1, "tie": 0, "loss": -1}[outcome_map[str(int(p))]] for p in prefs]
    mean = sum(codes) / len(codes)
    return "win" if mean > 0 else "loss" if mean < 0 else "tie"


def _ranking(systems: list[str], rows: list[tuple[str, str, str, str, str | None]]) -> list[str]:
    by_key: dict[tuple[str, str, str], list[str]] = {}
    for item_id, a, b, _, outcome in rows:
        if outcome is not None:
            by_key.setdefault((item_id, a, b), []).append(outcome)
    outcomes = []
    for (item_id, a, b), found in by_key.items():
        combined = found[0] if len(set(found)) == 1 else "tie"
        outcomes.append(Comparison(item_id, a, b, SCORE[combined]))
    return RankingState(systems, outcomes).ranking()


# -- part (b): the MT-Bench GPT-4 verdicts as an oracle ------------------------------------------------------------


def run_mtbench(data: Path, seeds: int, budgets: Sequence[float], batch: int = 16) -> dict[str, Any]:
    oracle = oracle_from_judgments(load_mtbench_gpt4_pair_judgments(data / "gpt4_pair.jsonl"))
    systems, items, pair_items = oracle.systems, oracle.items, oracle.pair_items
    total = 2 * sum(len(v) for v in pair_items.values())
    reference = full_ranking(systems, pair_items, oracle)
    full = RankingState(
        systems,
        [
            Comparison(i, a, b, s)
            for (a, b), its in pair_items.items()
            for i in its
            if (s := oracle(i, a, b)) is not None
        ],
    )
    print(f"\n== MT-Bench GPT-4 pairwise verdicts as the oracle: {len(items)} items (question x turn)")
    print(f"  all verdicts: {total} calls; ranking {' > '.join(reference)}")
    print(
        "  adjacent gaps with every verdict in: "
        + "; ".join(
            f"{g.upper}>{g.lower} diff {g.diff:.2f} z {g.z:.1f} needs {g.z_needed:.2f}{'' if g.separated else ' OPEN'}"
            for g in full.gaps(0.95)
        )
    )
    runs: dict[str, list[AdaptiveResult]] = {}
    configs: list[tuple[str, float | None]] = [("confidence 0.95", None)] + [(f"budget {b:.1%}", b) for b in budgets]
    out: dict[str, Any] = {"reference": reference, "round_robin_calls": total, "configs": {}}
    for label, share in configs:
        results = [
            run_adaptive(
                systems,
                pair_items,
                oracle,
                PlannerConfig(seed=seed, batch=batch, max_calls=None if share is None else int(share * total)),
            )
            for seed in range(seeds)
        ]
        runs[label] = results
        agree = sum(r.ranking == reference for r in results)
        shares = [r.calls / total for r in results]
        print(
            f"  {label}: same ranking as all verdicts in {agree}/{seeds}; calls {_quantiles(shares)}; "
            f"stops {dict(Counter(r.stop for r in results))}"
        )
        diffs = Counter(tuple(_differences(r.ranking, reference)) for r in results if r.ranking != reference)
        for diff, count in diffs.most_common():
            print(f"      {count}x differs at {'; '.join(diff)}")
        if share is None:
            for r in results[:1]:
                print(
                    "    seed 0 stopped with: "
                    + "; ".join(
                        f"{g.upper}>{g.lower} z {g.z:.1f}/{g.z_needed:.2f}{'' if g.separated else ' open'}"
                        for g in r.last_plan.gaps
                    )
                )
        out["configs"][label] = [
            {"seed": k, "calls": r.calls, "share": r.calls / total, "stop": r.stop, "ranking": r.ranking}
            for k, r in enumerate(results)
        ]
    needed = _share_needed(out["configs"], configs, reference)
    print(f"  smallest budget tried at which every seed recovers the ranking: {needed}")
    return out


def _share_needed(results: dict[str, Any], configs: list[tuple[str, float | None]], reference: list[str]) -> str:
    for label, share in configs:
        if share is not None and all(r["ranking"] == reference for r in results[label]):
            return label
    return "none of the budgets tried"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["simulated", "mtbench", "samples", "all"], default="all")
    parser.add_argument("--sample-jitter", type=float, default=10.0, help="samples: +- quality points per sample")
    parser.add_argument("--fixed-samples", type=int, default=5, help="samples: the fixed count adaptive replaces")
    parser.add_argument("--replications", type=int, default=20)
    parser.add_argument("--budget-share", type=float, default=0.30)
    parser.add_argument("--batch", type=int, default=16, help="comparisons per planning step (the service default)")
    parser.add_argument("--seeds", type=int, default=20, help="mtbench: planner seeds")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out: dict[str, Any] = {}
    if args.part in ("simulated", "all"):
        out["simulated"] = run_simulated(args.replications, args.budget_share, args.data, args.batch)
    if args.part in ("samples", "all"):
        out["samples"] = run_samples(min(args.replications, 5), args.fixed_samples, args.sample_jitter)
    if args.part in ("mtbench", "all"):
        if not (args.data / "gpt4_pair.jsonl").exists():
            print(f"no gpt4_pair.jsonl in {args.data}", file=sys.stderr)
            return 2
        out["mtbench"] = run_mtbench(args.data, args.seeds, [0.03, 0.05, 0.075, 0.1, 0.2, 0.3], args.batch)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
