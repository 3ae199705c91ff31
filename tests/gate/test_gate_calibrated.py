"""``calibrate: human``: the gate decides on the calibrated (PPI++) drop from the two runs' human labels.

Two runs judged by the simulator (it scores a reply by its ``<<q=..>>`` marker): the baseline's markers follow what
people think of its replies; a candidate's markers sit far from it (the judge overrates or underrates that build).
The judge-only gate then decides the wrong way and the calibrated gate decides as the humans do. Also: the summary
text and JSON, the paired and two-sample differences, too few labels (fail closed, or fall back when asked), sides
without runs, bad settings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.gate import GateConfig, GateResult, run_gate
from dialogue_judge.gate.standalone import InProcessRunner
from judge_api import repository
from judge_api.schemas import HumanRatingIn, RunCreate
from judge_api.stats.label_sampling import draw
from judge_simulator.process import SimulatorProcess

from .planting import context, judge_for

N = 120
MAX_DROP = 5.0  # judge points on 1-100: 0.101 on the humans' 0-2 scale


@dataclass
class Runs:
    database: Path
    judge: str
    baseline: str
    overrated_two_sample: str
    """Humans: the candidate is 0.4 worse; the judge puts it 20 points above the baseline. Labels on other items."""
    overrated_paired: str
    """The same build, labelled on the baseline's labelled items."""
    underrated_paired: str
    """Humans: no change; the judge puts the candidate 20 points below the baseline."""
    few_labels: str
    """The overrated build with 5 labels."""
    active: str
    """The overrated build labelled on the items an active label queue drew (every drawn item)."""
    active_unfinished: str
    """The same queue with one drawn item not labelled yet."""
    baseline_items: Path


def _markers(values: np.ndarray) -> np.ndarray:
    return np.clip(np.round(values), 1, 100).astype(int)


def _run(runner: InProcessRunner, judge: str, system: str, markers: np.ndarray) -> str:
    items = [
        {**context(i), "candidates": {system: f"Rex is your beagle ({system}). <<q={markers[i]}>>"}} for i in range(N)
    ]
    request = RunCreate.model_validate(
        {"items": items, "rubrics": ["rsum-single"], "judges": [judge], "aspects": ["consistency"]}
    )
    run_id = runner.create_run(request)
    runner.judge(run_id)
    return run_id


def _active_queue(runner: InProcessRunner, run_id: str) -> list[int]:
    """An active label queue of about 40 items, the first 30 items ten times as likely as the others."""
    items = [f"item-{i:03d}" for i in range(N)]
    queue = draw(items, 40, "active", seed=3, uncertainty=np.where(np.arange(N) < 30, 1.0, 0.1))
    with runner.session() as session:
        repository.store_label_queue(
            session,
            run_id,
            strategy="active",
            seed=3,
            n_requested=40,
            drawn=queue.item_ids,
            inclusion=queue.inclusion,
        )
        session.commit()
    return sorted(items.index(i) for i in queue.item_ids)


def _label(runner: InProcessRunner, run_id: str, system: str, truth: np.ndarray, items: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ratings = [
        HumanRatingIn(
            item_id=f"item-{i:03d}",
            system=system,
            aspect="consistency",
            rater="ann",
            value=float(np.clip(np.round(truth[i] + rng.normal(0.0, 0.1), 1), 0.0, 2.0)),
            scale_min=0,
            scale_max=2,
        )
        for i in items
    ]
    with runner.session() as session:
        repository.upsert_ratings(session, run_id, ratings)
        session.commit()


@pytest.fixture(scope="module")
def runs(judge_simulator: SimulatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    judge_simulator.reset(restore_script=True)
    folder = tmp_path_factory.mktemp("calibrated-gate")
    database = folder / "gate.db"
    judge = judge_for(judge_simulator)
    rng = np.random.default_rng(37)
    truth = np.round(np.clip(rng.normal(1.0, 0.3, N), 0.4, 1.6), 1)
    on_judge_scale = 1 + 49.5 * truth
    worse = truth - 0.4
    labelled = rng.choice(N, 40, replace=False)
    others = rng.choice(np.setdiff1d(np.arange(N), labelled), 40, replace=False)
    with InProcessRunner(database) as runner:
        baseline = _run(runner, judge, "v1", _markers(on_judge_scale))
        _label(runner, baseline, "v1", truth, labelled, seed=1)
        overrated = _markers(on_judge_scale + 20)
        two_sample = _run(runner, judge, "v2", overrated)
        _label(runner, two_sample, "v2", worse, others, seed=2)
        paired = _run(runner, judge, "v2", overrated)
        _label(runner, paired, "v2", worse, labelled, seed=3)
        underrated = _run(runner, judge, "v2", _markers(on_judge_scale - 20))
        _label(runner, underrated, "v2", truth, labelled, seed=4)
        few = _run(runner, judge, "v2", overrated)
        _label(runner, few, "v2", worse, labelled[:5], seed=5)
        active = _run(runner, judge, "v2", overrated)
        drawn = np.array(_active_queue(runner, active))
        _label(runner, active, "v2", worse, drawn, seed=6)
        unfinished = _run(runner, judge, "v2", overrated)
        _active_queue(runner, unfinished)
        _label(runner, unfinished, "v2", worse, drawn[1:], seed=7)
        items_file = folder / "baseline.jsonl"
        items_file.write_text(
            "".join(
                json.dumps({**context(i), "candidates": {"v1": f"Rex. <<q={_markers(on_judge_scale)[i]}>>"}}) + "\n"
                for i in range(N)
            )
        )
    yield Runs(database, judge, baseline, two_sample, paired, underrated, few, active, unfinished, items_file)


def gate(runs: Runs, candidate: str, **options: object) -> GateResult:
    return run_gate(
        GateConfig(
            baseline=options.pop("baseline", runs.baseline),
            candidate=candidate,
            judge=runs.judge,
            max_drop=MAX_DROP,
            database=runs.database,
            progress=False,
            **options,  # type: ignore[arg-type]
        )
    )


@pytest.mark.usefixtures("gate_env")
def test_an_overrated_candidate_passes_the_judge_and_fails_the_humans(runs: Runs) -> None:
    judge_only = gate(runs, runs.overrated_two_sample)
    assert judge_only.status == "pass", judge_only.headline
    assert judge_only.calibration == []

    result = gate(runs, runs.overrated_two_sample, calibrate="human")
    assert result.status == "regression" and result.exit_code == 1, result.headline
    assert result.calls.reused and result.calls.provider_calls == 0
    (entry,) = result.calibration
    assert entry["method"] == "ppi++" and entry["paired"] is False and entry["design"] == "ppi++ two-sample"
    assert entry["n_labels_baseline"] == 40 and entry["n_labels_candidate"] == 40
    assert entry["n_labels_both"] < 40
    assert entry["human_scale"] == [0.0, 2.0]
    assert entry["threshold"] == pytest.approx(MAX_DROP * 2 / 99)
    assert entry["ci_level"] == pytest.approx(0.95)
    # humans: 0.4 worse; the interval excludes the tolerance and holds the humans' drop
    assert entry["threshold"] < entry["ci_low"] < 0.4 < entry["ci_high"]
    assert entry["judge_only"]["verdict"] == "no_regression"
    assert entry["judge_only"]["on_human_scale"]["estimate"] == pytest.approx(-20 * 2 / 99, abs=0.01)
    assert result.aspects[0].verdict == "regression"
    assert result.headline.startswith("FAIL: regression in consistency (calibrated on human labels): calibrated")
    assert "the judge alone: mean drop -0.404 on that scale, PASS" in result.headline
    text = result.markdown()
    assert "### Calibrated on human labels (PPI++)" in text
    assert "| consistency | regression | ppi++ two-sample | 40 / 40 (" in text
    assert "two-sample calibrated (PPI++) drop from 40 baseline and 40 candidate human labels" in text
    data = result.to_dict()
    assert data["calibrate"] == "human" and data["calibration"][0]["estimate"] == pytest.approx(entry["estimate"])
    assert data["exit_code"] == 1


@pytest.mark.usefixtures("gate_env")
def test_the_same_labelled_items_give_the_paired_difference(runs: Runs) -> None:
    two_sample = gate(runs, runs.overrated_two_sample, calibrate="human").calibration[0]
    result = gate(runs, runs.overrated_paired, calibrate="human")
    assert result.status == "regression", result.headline
    (entry,) = result.calibration
    assert entry["paired"] is True and entry["n_labels_both"] == 40
    assert entry["ci_low"] < 0.4 < entry["ci_high"]
    # pairing cancels the items' own quality in the humans' differences: a narrower human-only interval
    paired_human, two_sample_human = entry["human_only"], two_sample["human_only"]
    assert (paired_human["ci_high"] - paired_human["ci_low"]) < 0.6 * (
        two_sample_human["ci_high"] - two_sample_human["ci_low"]
    )
    # the judge's per-item differences are a constant shift here: they carry nothing, and cost at most the degree
    # of freedom of the fitted lambda (one lambda on the differences)
    assert entry["lambda_baseline"] == entry["lambda_candidate"]
    width = entry["ci_high"] - entry["ci_low"]
    assert width <= 1.05 * (paired_human["ci_high"] - paired_human["ci_low"])
    assert "ppi++ paired" in result.markdown()


@pytest.mark.usefixtures("gate_env")
def test_an_underrated_candidate_fails_the_judge_and_passes_the_humans(runs: Runs) -> None:
    judge_only = gate(runs, runs.underrated_paired)
    assert judge_only.status == "regression", judge_only.headline
    result = gate(runs, runs.underrated_paired, calibrate="human")
    assert result.status == "pass" and result.exit_code == 0, result.headline
    (entry,) = result.calibration
    assert entry["ci_high"] < entry["threshold"] and entry["ci_low"] < 0.0
    assert entry["judge_only"]["verdict"] == "regression"
    assert result.headline.startswith("PASS: no regression in consistency (calibrated on human labels)")
    assert "the judge alone: mean drop 0.404 on that scale, FAIL" in result.headline


@pytest.mark.usefixtures("gate_env")
def test_too_few_labels_fail_closed_by_default(runs: Runs) -> None:
    result = gate(runs, runs.few_labels, calibrate="human")
    assert result.status == "error" and result.exit_code == 2
    assert "the candidate has 5 labelled item(s) among the judged ones; calibration needs at least 10" in (
        result.headline
    )
    assert "calibrate_missing: judge" in result.headline
    (entry,) = result.calibration
    assert entry["verdict"] == "missing_labels" and entry["estimate"] is None
    assert entry["n_labels_baseline"] == 40 and entry["n_labels_candidate"] == 5
    assert "the candidate has 5 labelled" in result.markdown()
    # a lower minimum is a choice the user makes explicitly
    lowered = gate(runs, runs.few_labels, calibrate="human", calibrate_min_labels=5)
    assert lowered.status != "error" and lowered.calibration[0]["estimate"] is not None


@pytest.mark.usefixtures("gate_env")
def test_too_few_labels_fall_back_to_the_judge_when_asked(runs: Runs) -> None:
    result = gate(runs, runs.few_labels, calibrate="human", calibrate_missing="judge")
    assert result.status == "pass", result.headline  # the judge's (biased) decision, said so
    assert result.headline.endswith("[judge only: too few human labels]")
    assert any("fell back to the judge alone" in note and "has 5 labelled" in note for note in result.notes)
    assert result.calibration[0]["verdict"] == "missing_labels"


@pytest.mark.usefixtures("gate_env")
def test_a_side_that_is_a_file_has_no_labels(runs: Runs) -> None:
    result = gate(runs, runs.overrated_paired, baseline=str(runs.baseline_items), calibrate="human")
    assert result.status == "error", result.headline
    assert "the baseline has no usable labels: it is a file, not a run" in result.headline


@pytest.mark.usefixtures("gate_env")
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calibrate": "robots"}, "calibrate must be human (or absent for the judge alone), got 'robots'"),
        ({"calibrate": "human", "calibrate_missing": "maybe"}, "calibrate_missing must be fail (exit 2) or judge"),
        ({"calibrate": "human", "calibrate_min_labels": 1}, "calibrate_min_labels must be at least 2, got 1"),
        ({"calibrate": "human", "mode": "pairwise"}, "use it with --mode single and a judge"),
    ],
)
def test_bad_calibrate_settings_stop_before_anything_runs(runs: Runs, options: dict[str, object], message: str) -> None:
    result = gate(runs, runs.overrated_paired, **options)
    assert result.status == "error" and result.exit_code == 2
    assert message in result.headline
    assert result.calibration == [] and result.calls.judged == 0


@pytest.mark.usefixtures("gate_env")
def test_the_cli_gate_decides_on_the_calibrated_drop(runs: Runs, tmp_path: Path) -> None:
    base = ["gate", "-b", runs.baseline, "--judge", runs.judge, "--cache-dir", str(runs.database.parent)]
    base += ["--max-drop", str(MAX_DROP), "--no-progress"]
    out = tmp_path / "gate.json"
    done = CliRunner().invoke(app, [*base, "-c", runs.overrated_paired, "--calibrate", "human", "--json", str(out)])
    assert done.exit_code == 1, done.stdout + done.stderr
    assert "Calibrated on human labels (PPI++)" in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("FAIL: regression in consistency (calibrated")
    data = json.loads(out.read_text())
    entry = data["calibration"][0]
    assert entry["method"] == "ppi++" and entry["paired"] is True
    assert {"estimate", "ci_low", "ci_high", "n_labels_baseline", "n_labels_candidate", "judge_only"} <= set(entry)
    bad = CliRunner().invoke(app, [*base, "-c", runs.overrated_paired, "--calibrate", "humans"])
    assert bad.exit_code == 2
    assert "calibrate must be human" in bad.stderr


@pytest.mark.usefixtures("gate_env")
def test_labels_from_an_active_queue_are_weighted_by_their_inclusion_probabilities(runs: Runs) -> None:
    result = gate(runs, runs.active, calibrate="human")
    assert result.status == "regression", result.headline
    (entry,) = result.calibration
    assert entry["design"] == "ppi++ active (inverse-probability weighted)"
    assert entry["threshold"] < entry["ci_low"] < 0.4 < entry["ci_high"]
    assert any("weighted by its item's inclusion probability" in note for note in result.notes)
    assert "ppi++ active (inverse-probability weighted)" in result.markdown()
    # an active queue with a drawn item still unlabelled: its weights do not hold yet
    waiting = gate(runs, runs.active_unfinished, calibrate="human")
    assert waiting.status == "error" and waiting.exit_code == 2
    assert "1 item(s) drawn by the candidate run's active label queue are not labelled yet" in waiting.headline
