"""Acceptance: the MT-Bench agreement figures of Zheng et al. (2023), reproduced exactly.

Reads ``../shared/data/mtbench_human_judgments/`` next to the repository (read-only reference data).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from judge_api.stats import frames as F
from judge_api.stats.agreement import votes_from_judgments
from judge_api.stats.mtbench import (
    load_mtbench_folder,
    load_mtbench_gpt4_pair,
    load_mtbench_human,
    mtbench_agreement,
    mtbench_item_id,
)
from judge_api.stats.preferences import combine_orders
from judge_api.stats.report import build_report

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = REPO_ROOT / ".." / "shared" / "data" / "mtbench_human_judgments"

pytestmark = pytest.mark.skipif(
    not (DATA / "human.jsonl").is_file() or not (DATA / "gpt4_pair.jsonl").is_file(),
    reason=f"MT-Bench reference data not found at {DATA.resolve()} (shared/ folder absent)",
)

# (turn, comparison, S1 agree/total, S2 agree/total), published in Zheng et al. 2023 / FastChat.
Table = dict[int, dict[str, Any]]

PUBLISHED = [
    (1, "judge_vs_human", (886, 1343), (727, 859)),
    (1, "human_vs_human", (454, 721), (388, 479)),
    (2, "judge_vs_human", (871, 1325), (731, 864)),
    (2, "human_vs_human", (471, 707), (388, 474)),
]


@pytest.fixture(scope="module")
def human() -> pd.DataFrame:
    return load_mtbench_human(DATA / "human.jsonl")


@pytest.fixture(scope="module")
def table_from_ratings(human: pd.DataFrame) -> Table:
    gpt4 = load_mtbench_gpt4_pair(DATA / "gpt4_pair.jsonl")
    return mtbench_agreement(human, gpt4)


@pytest.fixture(scope="module")
def table_from_judgments(human: pd.DataFrame) -> Table:
    _, judgments = load_mtbench_folder(DATA)
    return mtbench_agreement(human, votes_from_judgments(judgments))


@pytest.mark.parametrize(("turn", "who", "s1", "s2"), PUBLISHED)
def test_exact_published_counts(
    table_from_ratings: Table,
    turn: int,
    who: str,
    s1: tuple[int, int],
    s2: tuple[int, int],
) -> None:
    res = table_from_ratings[turn][who]
    assert (res["s1"]["agree"], res["s1"]["total"]) == s1
    assert (res["s2"]["agree"], res["s2"]["total"]) == s2


@pytest.mark.parametrize(("turn", "who", "s1", "s2"), [p for p in PUBLISHED if p[1] == "judge_vs_human"])
def test_same_counts_through_the_judgments_frame(
    table_from_judgments: Table,
    turn: int,
    who: str,
    s1: tuple[int, int],
    s2: tuple[int, int],
) -> None:
    res = table_from_judgments[turn][who]
    assert (res["s1"]["agree"], res["s1"]["total"]) == s1
    assert (res["s2"]["agree"], res["s2"]["total"]) == s2


def test_loaders_keep_every_vote_and_the_inconsistent_ties(human: pd.DataFrame) -> None:
    assert len(human) == 3355
    gpt4 = load_mtbench_gpt4_pair(DATA / "gpt4_pair.jsonl")
    assert len(gpt4) == 2400
    raw = [json.loads(line) for line in (DATA / "gpt4_pair.jsonl").read_text().splitlines()]
    n_inconsistent = sum(r["winner"] == "tie (inconsistent)" for r in raw)
    assert int(gpt4[F.TIE_INCONSISTENT].sum()) == n_inconsistent
    _, judgments = load_mtbench_folder(DATA)
    combined = combine_orders(judgments)
    assert len(combined) == 2400
    assert int(combined["inconsistent"].sum()) == n_inconsistent
    first = raw[0]
    assert combined.iloc[0]["item_id"] == mtbench_item_id(first["question_id"], first["turn"])


def test_human_vs_human_is_the_same_with_distinct_raters_required(human: pd.DataFrame) -> None:
    from judge_api.stats.agreement import human_human_agreement, preference_votes

    h = preference_votes(human, "expert_")
    for turn, who, s1, s2 in PUBLISHED:
        if who != "human_vs_human":
            continue
        res = human_human_agreement(h[h[F.TURN] == turn], distinct_raters=True)
        assert (res["s1"]["agree"], res["s1"]["total"]) == s1
        assert (res["s2"]["agree"], res["s2"]["total"]) == s2


def test_report_agreement_section_on_mtbench(human: pd.DataFrame) -> None:
    _, judgments = load_mtbench_folder(DATA)
    t1 = judgments[judgments["item_id"].str.endswith("-t1")]
    report = build_report(t1, human, human_prefix="expert_", n_boot=20)
    prefs = report["agreement"]["preferences"]
    jv = prefs["judge_vs_human"][0]
    hv = prefs["human_vs_human"][0]
    assert (jv["s1"]["agree"], jv["s1"]["total"], jv["s2"]["agree"], jv["s2"]["total"]) == (886, 1343, 727, 859)
    # Human vs human in the report spans both turns (the ratings frame holds both).
    assert (hv["s1"]["agree"], hv["s1"]["total"]) == (454 + 471, 721 + 707)
    json.dumps(report, allow_nan=False)
