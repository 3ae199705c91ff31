"""Labels with no spread through every weighted or two-run path (issue 37 review).

``ppi_mean`` already reaches the scale's worst case when every label is the same score and the judge adds nothing
(docs/calibration.md, *Small samples*). The other paths did not: a run with a label queue (``ppi_mean_active``, the
report's weighted rows) and the gate's calibrated drop (``ppi_mean_difference`` paired or two-sample, and
``ppi_mean_difference_active``) answered a zero-width interval there. A population in which a tenth of the items
differ leaves that tenth out of 10 labels about a third of the time, so those intervals covered about 0.65, and the
gate passed a real regression with certainty.
"""

from __future__ import annotations

import numpy as np
import pytest

from dialogue_judge.gate.calibrate import SideLabels, calibrate_aspect
from dialogue_judge.gate.inputs import BASELINE, CANDIDATE
from dialogue_judge.gate.outcome import AspectReport
from judge_api.stats.calibrated import Design, _estimate
from judge_api.stats.label_sampling import draw
from judge_api.stats.ppi import ppi_mean

N_ITEMS, N_LABELS, REPS = 200, 10, 300


@pytest.mark.parametrize("strategy", ["uniform", "active"])
def test_a_queue_of_labels_all_alike_still_covers(strategy: str) -> None:
    """Nine in ten items are rated 5 on 1-5, one in ten 4; the judge says 5 everywhere; 10 labels from a queue."""
    ids = np.array([f"it{i}" for i in range(N_ITEMS)])
    human = np.where(np.arange(N_ITEMS) % 10 == 0, 4.0, 5.0)
    judge = np.full(N_ITEMS, 5.0)
    truth = float(human.mean())
    covered = flat = done = on_scale = 0
    for seed in range(REPS):
        queue = draw(list(ids), N_LABELS, strategy, seed, np.full(N_ITEMS, 1.0) if strategy == "active" else None)
        labeled = np.isin(ids, queue.item_ids)
        design = Design(strategy, frozenset(queue.item_ids), queue.inclusion)
        est, _ = _estimate(
            human[labeled],
            judge[labeled],
            judge[~labeled],
            0.95,
            design=design,
            labeled_ids=ids[labeled],
            unlabeled_ids=ids[~labeled],
            bounds=(1.0, 5.0),
        )
        if est is None:  # an active draw of fewer than 10 items
            continue
        done += 1
        c = est.calibrated
        flat += bool(np.all(human[labeled] == 5.0))
        covered += c.ci_low <= truth <= c.ci_high
        on_scale += 1.0 <= c.ci_low <= c.ci_high <= 5.0
    assert flat > done // 5  # the case happens
    assert covered / done >= 0.93
    assert on_scale == done  # cut to the scale: a mean of 1-5 scores lies in it


def _report(threshold: float) -> AspectReport:
    return AspectReport(aspect="consistency", verdict="no_regression", threshold=threshold)


@pytest.mark.parametrize("design", ["paired", "two-sample", "active"])
@pytest.mark.parametrize("decimals", [False, True], ids=["whole", "decimal"])
def test_the_gate_does_not_pass_a_regression_its_labels_missed(design: str, decimals: bool) -> None:
    """The candidate drops from 2 to 0 (humans' 0-2 scale) on a tenth of the items: a mean drop of 0.2, twice the
    tolerance (5 points on the judge's 1-100). The judge scores both runs alike. 10 labels per run.

    ``decimal``: the baseline's labels are tenths (0.4-1.6) and the candidate's 0.4 lower, rounded to tenths, on
    nine items in ten: every labelled difference is 0.4 but for the last bit (1.4 - 1.0 against 1.2 - 0.8), which
    an exact zero-spread test took for spread."""
    rng = np.random.default_rng(0)
    items = [f"it{i}" for i in range(N_ITEMS)]
    if decimals:
        tenths = np.round(rng.uniform(0.4, 1.6, N_ITEMS), 1)
        base = {item: float(tenths[i]) for i, item in enumerate(items)}
        cand = {item: 0.0 if i % 10 == 0 else float(np.round(tenths[i] - 0.4, 1)) for i, item in enumerate(items)}
    else:
        base = dict.fromkeys(items, 2.0)
        cand = {item: 0.0 if i % 10 == 0 else 2.0 for i, item in enumerate(items)}
    truth = float(np.mean(list(base.values())) - np.mean(list(cand.values())))
    scores = {(i, side): 80.0 for i in items for side in (BASELINE, CANDIDATE)}
    missed = passed = 0
    for _ in range(REPS):
        pick_b = rng.choice(N_ITEMS, N_LABELS, replace=False)
        pick_c = pick_b if design != "two-sample" else rng.choice(N_ITEMS, N_LABELS, replace=False)
        active = {items[i]: N_LABELS / N_ITEMS for i in pick_b} if design == "active" else None
        entry = calibrate_aspect(
            "consistency",
            scores,
            SideLabels({items[i]: base[items[i]] for i in pick_b}, (0.0, 2.0), active=active),
            SideLabels({items[i]: cand[items[i]] for i in pick_c}, (0.0, 2.0), active=active),
            judge_scale=(1.0, 100.0),
            threshold=5.0,
            level=0.95,
            min_labels=10,
            judge_only=_report(5.0),
        )
        assert entry["verdict"] != "missing_labels", entry["reason"]
        missed += not entry["ci_low"] <= truth <= entry["ci_high"]
        passed += entry["verdict"] == "no_regression"
    assert missed / REPS <= 0.07
    assert passed / REPS <= 0.05


def test_labels_equal_but_for_rounding_are_flat() -> None:
    """Ten labels 0.4 apart from their pair, computed from tenths (``ppi_mean`` of the differences, a judge that
    says the same of both): their spread is rounding, not information, so the interval is the worst case's."""
    tenths = np.round(np.linspace(0.5, 1.6, 10), 1)
    differences = tenths - np.round(tenths - 0.4, 1)
    assert 0.0 < float(np.ptp(differences)) < 1e-12
    est = ppi_mean(differences, np.zeros(10), np.zeros(190), bounds=(-2.0, 2.0))
    for interval in (est.calibrated, est.human_only):
        assert interval.ci_high - interval.ci_low > 0.3
