"""Issue 39: the report's dictionary-encoded path gives what the row path on plain strings gives.

``build_report`` encodes the frame's strings as categoricals once and reuses the stored item scores for the panel;
the public section functions, called on the plain frame, are the row path. On random frames (hypothesis) both give
the same means and intervals, win rates, paired differences, rankings and agreement with humans, exactly. The paper
table's shared items (now counted on integer codes) are checked against the set-based rule they replace, and the
Bradley-Terry bootstrap's dense product against the sparse one."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge_api.stats import frames as F
from judge_api.stats import ranking
from judge_api.stats.agreement import preference_agreement, score_agreement
from judge_api.stats.preferences import preference_summary
from judge_api.stats.ranking import bradley_terry
from judge_api.stats.report import build_report
from judge_api.stats.scores import PAPER_ITEM_COLUMNS, item_scores, paired_comparisons, paper_items, score_summary

SYSTEMS = ("alpha", "beta", "gamma")
N_BOOT = 25


@st.composite
def frames(draw: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    seed = draw(st.integers(0, 2**31 - 1))
    n_items = draw(st.integers(2, 9))
    judges = draw(st.sampled_from([("j1",), ("j1", "j2")]))
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n_items):
        item = f"it{i}"
        for judge in judges:
            for system in SYSTEMS:
                for aspect in ("coherence", "engagingness"):
                    for sample in range(int(rng.integers(1, 3))):
                        if rng.random() < 0.15:
                            continue
                        status = str(rng.choice(["done", "done", "done", "failed", "pending"]))
                        rows.append(
                            {
                                "item_id": item,
                                "mode": "single",
                                "system_a": system,
                                "aspect": aspect,
                                "judge": judge,
                                "sample_index": sample,
                                "status": status,
                                "score": float(rng.integers(1, 6)) if status == "done" else np.nan,
                                "scale_min": 1.0,
                                "scale_max": 5.0,
                                "len_a": float(rng.integers(10, 99)),
                            }
                        )
            for a, b in combinations(SYSTEMS, 2):
                for order in ("ab", "ba"):
                    if rng.random() < 0.2:
                        continue
                    status = "done" if rng.random() < 0.9 else "unparseable"
                    rows.append(
                        {
                            "item_id": item,
                            "mode": "pairwise",
                            "system_a": a,
                            "system_b": b,
                            "aspect": "overall",
                            "judge": judge,
                            "order": order,
                            "status": status,
                            "preference": float(rng.choice([-2, -1, 0, 1, 2])) if status == "done" else np.nan,
                            "len_a": float(rng.integers(10, 99)),
                            "len_b": float(rng.integers(10, 99)),
                        }
                    )
    frame = pd.DataFrame(rows)
    done = frame[(frame["status"] == "done") & (frame["mode"] == "single")].drop_duplicates(
        ["item_id", "system_a", "aspect"]
    )
    pairs = frame[(frame["status"] == "done") & (frame["mode"] == "pairwise")].drop_duplicates(
        ["item_id", "system_a", "system_b"]
    )
    ratings = pd.concat(
        [
            pd.DataFrame(
                {
                    "item_id": done["item_id"],
                    "system": done["system_a"],
                    "aspect": done["aspect"],
                    "rater": "h1",
                    "kind": "score",
                    "value": np.clip(done["score"] + rng.integers(-1, 2, len(done)), 1, 5),
                    "scale_min": 1.0,
                    "scale_max": 5.0,
                }
            ),
            pd.DataFrame(
                {
                    "item_id": pairs["item_id"],
                    "system": pairs["system_a"],
                    "system_b": pairs["system_b"],
                    "aspect": "overall",
                    "rater": "h1",
                    "kind": "preference",
                    "value": np.sign(pairs["preference"].to_numpy()),
                }
            ),
        ],
        ignore_index=True,
    )
    return frame, ratings


def _same(got: Any, expected: pd.DataFrame | Any) -> None:
    assert got == F.jsonable(expected)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_the_encoded_report_equals_the_row_path(case: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    frame, ratings = case
    report = build_report(frame, ratings, n_boot=N_BOOT, seed=3, panel={"enabled": False})
    plain = F.validate_judgments(frame)
    assert not any(isinstance(plain[c].dtype, pd.CategoricalDtype) for c in plain.columns)
    _same(report["scores"], score_summary(plain, n_boot=N_BOOT, seed=3))
    _same(report["paired"], paired_comparisons(plain, n_boot=N_BOOT, seed=3))
    _same(report["preferences"], preference_summary(plain))
    _same(report["ranking"], bradley_terry(plain, n_boot=N_BOOT, seed=3))
    humans = F.validate_ratings(ratings)
    agreement = report["agreement"]
    for row in [*agreement["scores"], *agreement["preferences"]["judge_vs_human"]]:
        assert row.pop("imported") is False  # the report's mark of imported verdicts; none here
    _same(agreement["scores"], score_agreement(plain, humans))
    expected_prefs = F.jsonable(preference_agreement(plain, humans))
    assert agreement["preferences"] == expected_prefs


def _paper_items_by_sets(items: pd.DataFrame) -> tuple[pd.DataFrame, dict[tuple[str, str], bool]]:
    """The rule as it was written before issue 39: Python sets of item ids per system."""
    kept = []
    shared: dict[tuple[str, str], bool] = {}
    for (judge, aspect), block in items.groupby([F.JUDGE, F.ASPECT], sort=False):
        per_system = [set(g[F.ITEM_ID]) for _, g in block.groupby("system", sort=False)]
        common = set.intersection(*per_system)
        shared[(str(judge), str(aspect))] = bool(common)
        kept.append(block[block[F.ITEM_ID].isin(common)] if common else block)
    return pd.concat(kept, ignore_index=True)[PAPER_ITEM_COLUMNS], shared


@settings(max_examples=15, deadline=None)
@given(frames())
def test_the_paper_tables_shared_items_are_those_of_the_set_rule(case: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    items = item_scores(case[0])
    if items.empty:
        return
    got, shared = paper_items(items)
    expected, expected_shared = _paper_items_by_sets(items)
    assert shared == expected_shared
    pd.testing.assert_frame_equal(got, expected)


@settings(max_examples=6, deadline=None)
@given(frames())
def test_the_dense_bootstrap_product_equals_the_sparse_one(
    case: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    plain = F.validate_judgments(case[0])
    dense = bradley_terry(plain, n_boot=N_BOOT, seed=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranking, "DENSE_LIMIT", -1)
        sparse = bradley_terry(plain, n_boot=N_BOOT, seed=1)
    pd.testing.assert_frame_equal(dense, sparse)
