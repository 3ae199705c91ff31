"""Adaptive pairing replayed on the MT-Bench GPT-4 pairwise verdicts (bench/bench_adaptive.py part b, one seed)."""

from __future__ import annotations

from pathlib import Path

from judge_api.adaptive.planner import PlannerConfig
from judge_api.adaptive.replay import full_ranking, oracle_from_judgments, run_adaptive
from judge_api.stats.mtbench import load_mtbench_gpt4_pair_judgments
from judge_api.stats.ranking import bradley_terry


def test_recovers_the_all_verdicts_ranking_with_a_fraction_of_the_calls(shared_dir: Path) -> None:
    judgments = load_mtbench_gpt4_pair_judgments(shared_dir / "data" / "mtbench_human_judgments" / "gpt4_pair.jsonl")
    oracle = oracle_from_judgments(judgments)
    assert len(oracle.systems) == 6 and len(oracle.items) == 160
    round_robin = 2 * sum(len(items) for items in oracle.pair_items.values())
    assert round_robin == 4800
    reference = full_ranking(oracle.systems, oracle.pair_items, oracle)
    # the oracle's reference is the report's own Bradley-Terry ranking of every verdict
    assert reference == bradley_terry(judgments, n_boot=0)["system"].tolist()

    result = run_adaptive(oracle.systems, oracle.pair_items, oracle, PlannerConfig(seed=0))
    assert result.stop == "separated"
    assert result.ranking == reference
    assert result.calls <= 0.2 * round_robin
