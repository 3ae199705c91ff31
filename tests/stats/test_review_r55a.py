"""Review r55a of af41a16 + b596a37 (``build_report``, issue 39): the real judges' rows a row-slice view when the
pseudo-judges' rows are the tail, the panel's synthetic rows narrowed to ``PANEL_ROW_COLUMNS``, the paper table's
items made just before its section. PROMISE: every figure of every section is what it was (byte-equal JSON).

Method: the base code (eb702f6's ``judge_api``, extracted with ``git archive`` into a temporary directory) and the
current code each build the report of the same pickled inputs in their own subprocess; the outputs are compared as
``json.dumps(report, sort_keys=True)``, along with the report's key order, an exception's type if one is raised, and
a digest of the caller's frame before and after (nothing may mutate it).

Findings (each a test below):

1. HELD (no finding) -- ``test_reports_equal_the_base_code``: 26 cases, byte-equal JSON and the same key order:
   panel default/disabled/explicit members/quorum/median, no quorum anywhere, the panel's quorum reached on some units
   only, ratings with and without ``human_prefix``, a stored judge literally named "panel" (with and without ratings),
   the "reference" pseudo-judge's rows at the tail / at the head / in the middle / the tail of an index-shuffled
   frame, imported verdicts (``source``), empty and all-failed frames, frames already encoded (``F.encode_strings``)
   vs plain, a categorical judge column with unused categories (including an unused "panel" category), single-only and
   pairwise-only frames, ``reference_metrics``, and a frame with a non-RangeIndex.
2. HELD -- ``test_build_report_does_not_mutate_the_callers_frame``: an already validated and encoded frame (which
   ``build_report`` uses without a copy, so ``_without_pseudo_judges`` returns a view of the caller's own rows) is
   equal before and after, with the reference rows at the tail (the view path) and with ratings (the stacked path).
3. HELD -- ``test_a_write_to_the_view_does_not_reach_the_stacked_frame``: under pandas copy-on-write, a column set on
   the view, a ``.loc`` write to it, and a write through ``to_numpy()`` (read-only: it raises) leave the stacked
   frame as it was.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import frames as F
from judge_api.stats.report import _panel_frames, _without_pseudo_judges, build_report, panel_config
from judge_api.stats.synthetic import synthetic_judgments
from tests.stats.report_golden_cases import _imported_and_reference, _ratings_for, _sampled, _small

REPO = Path(__file__).resolve().parents[2]
BASE = "eb702f6"

RUNNER = r"""
import hashlib, json, pickle, sys, traceback
import pandas as pd
from judge_api.stats.report import build_report

def digest(frame):
    if frame is None:
        return None
    return hashlib.sha256(pickle.dumps((frame.copy(deep=True), list(frame.columns), [str(t) for t in frame.dtypes]))
                          ).hexdigest()

cases = pickle.load(open(sys.argv[1], "rb"))
out = {}
for name, judgments, ratings, kwargs in cases:
    before = digest(judgments), digest(ratings)
    try:
        report = build_report(judgments, ratings, **kwargs)
        text, keys = json.dumps(report, sort_keys=True, default=repr), list(report)
    except Exception as exc:  # noqa: BLE001
        text, keys = "ERROR " + type(exc).__name__ + ": " + str(exc)[:300], None
    out[name] = {"json": text, "keys": keys, "mutated": (digest(judgments), digest(ratings)) != before}
pickle.dump(out, open(sys.argv[2], "wb"))
"""


def _base_code(tmp: Path) -> Path:
    """eb702f6's ``judge_api`` package, extracted into ``tmp``."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", BASE, "judge_api"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    return tmp


def _run(code_root: Path, cases_file: Path, out_file: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    runner = out_file.with_suffix(".py")
    runner.write_text(RUNNER)
    subprocess.run([sys.executable, str(runner), str(cases_file), str(out_file)], check=True, env=env, cwd=code_root)
    with out_file.open("rb") as fh:
        result: dict[str, Any] = pickle.load(fh)
    return result


def _named_panel() -> pd.DataFrame:
    plain = F.validate_judgments(synthetic_judgments(2000, seed=2))
    named = plain.head(60).assign(judge="panel", judgment_id=np.arange(10_000, 10_060))
    return pd.concat([plain, named], ignore_index=True)


def _reference_at(where: str, seed: int = 8) -> pd.DataFrame:
    frame = _imported_and_reference(seed)
    ref = (frame["judge"] == "reference").to_numpy()
    if where == "head":
        frame = pd.concat([frame[ref], frame[~ref]], ignore_index=True)
    elif where == "middle":
        half = int((~ref).sum() // 2)
        real = frame[~ref]
        frame = pd.concat([real.iloc[:half], frame[ref], real.iloc[half:]], ignore_index=True)
    elif where == "shuffled_index_tail":
        rng = np.random.default_rng(seed)
        frame = frame.set_axis(rng.permutation(len(frame)) + 1000)
    return frame


def _all_failed() -> pd.DataFrame:
    frame = synthetic_judgments(800, seed=9)
    return frame.assign(status="failed", score=np.nan, preference=np.nan, outcome=None)


def _no_quorum() -> pd.DataFrame:
    """Two judges that never judged the same unit: the panel (quorum 2) has no row."""
    frame = synthetic_judgments(1500, seed=12)
    one = frame["judge"] == "openai:gpt-4o"
    items = frame["item_id"].astype(str)
    codes = pd.factorize(items)[0]
    keep = (one & (codes % 2 == 0)) | (~one & (codes % 2 == 1))
    return frame[keep.to_numpy()].reset_index(drop=True)


def _categorical_unused() -> pd.DataFrame:
    frame = synthetic_judgments(1500, seed=13)
    judges = sorted({*frame["judge"].astype(str), "panel", "unused-judge", "reference"})
    return frame.assign(judge=pd.Categorical(frame["judge"].astype(str), categories=judges))


def _encoded(frame: pd.DataFrame) -> pd.DataFrame:
    return F.encode_strings(F.validate_judgments(frame))


def _cases() -> list[tuple[str, pd.DataFrame, pd.DataFrame | None, dict[str, Any]]]:
    nb = {"n_boot": 30, "seed": 1}
    sampled2 = _sampled(25, 5, ("openai:gpt-4o", "anthropic:claude-3-5-sonnet"))
    sampled3 = _sampled(20, 6, ("openai:gpt-4o", "anthropic:claude-3-5-sonnet", "llama-judge"))
    ref = _imported_and_reference(8)
    named = _named_panel()
    cases: list[tuple[str, pd.DataFrame, pd.DataFrame | None, dict[str, Any]]] = [
        ("synthetic_default", synthetic_judgments(3000, seed=1), None, nb),
        ("synthetic_encoded", _encoded(synthetic_judgments(3000, seed=1)), None, nb),
        ("synthetic_disabled", synthetic_judgments(2000, seed=2), None, {**nb, "panel": {"enabled": False}}),
        ("synthetic_median_q2", synthetic_judgments(2000, seed=3), None, {**nb, "panel": {"aggregate": "median"}}),
        ("pairwise_only", synthetic_judgments(2000, seed=4, single_fraction=0.0), None, nb),
        ("single_only", synthetic_judgments(2000, seed=4, single_fraction=1.0), None, nb),
        ("sampled3_members", sampled3, None, {**nb, "panel": {"judges": ["openai:gpt-4o", "llama-judge"]}}),
        ("sampled3_quorum3", sampled3, None, {**nb, "panel": {"quorum": 3, "aggregate": "median"}}),
        ("sampled2_ratings", sampled2, _ratings_for(sampled2, 5, 150), nb),
        ("sampled2_ratings_prefix", sampled2, _ratings_for(sampled2, 5, 150), {**nb, "human_prefix": "expert_"}),
        ("sampled3_ratings_encoded", _encoded(sampled3), _ratings_for(sampled3, 6, 150), nb),
        ("named_panel", named, None, nb),
        ("named_panel_ratings", named, _ratings_for(named, 2, 150), nb),
        ("reference_tail", ref, None, nb),
        ("reference_tail_encoded", _encoded(ref), None, nb),
        ("reference_tail_ratings", ref, _ratings_for(ref, 8, 150), {**nb, "human_prefix": "expert_"}),
        ("reference_head", _reference_at("head"), None, nb),
        ("reference_middle", _reference_at("middle"), None, nb),
        ("reference_shuffled_index", _reference_at("shuffled_index_tail"), None, nb),
        ("reference_metrics", ref, None, {**nb, "reference_metrics": {"tokeniser": "parlai", "warning": None}}),
        ("empty", synthetic_judgments(200, seed=1).iloc[:0], None, nb),
        ("all_failed", _all_failed(), None, nb),
        ("no_quorum", _no_quorum(), None, {**nb, "panel": {"quorum": 2}}),
        ("categorical_unused", _categorical_unused(), None, nb),
        ("small_groups", _small(), None, nb),
        ("imported_named_member", ref, None, {**nb, "panel": {"judges": ["ext-judge", "openai:gpt-4o"]}}),
    ]
    return cases


@pytest.fixture(scope="module")
def both_reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("r55a")
    base = _base_code(tmp / "base")
    cases_file = tmp / "cases.pkl"
    with cases_file.open("wb") as fh:
        pickle.dump(_cases(), fh)
    return _run(base, cases_file, tmp / "base_out.pkl"), _run(REPO, cases_file, tmp / "new_out.pkl")


def test_reports_equal_the_base_code(both_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Every case's report is byte-equal JSON to the base code's, in the same key order, the input left alone."""
    base, new = both_reports
    assert set(base) == set(new)
    differ = []
    for name in base:
        b, n = base[name], new[name]
        if b["json"] != n["json"]:
            at = next((i for i, (x, y) in enumerate(zip(b["json"], n["json"], strict=False)) if x != y), None)
            lo = max(0, (at or 0) - 200)
            differ.append((name, "json", b["json"][lo : lo + 400], n["json"][lo : lo + 400]))
        if b["keys"] != n["keys"]:
            differ.append((name, "keys", b["keys"], n["keys"]))
        if n["mutated"] and not b["mutated"]:
            differ.append((name, "mutated the caller's frame", None, None))
    errors = [name for name in new if new[name]["json"].startswith("ERROR")]
    assert not differ, differ
    assert len(errors) <= 2, errors  # only the degenerate frames may raise, and then as the base code did


def _digest(frame: pd.DataFrame) -> str:
    return hashlib.sha256(pickle.dumps(frame.copy(deep=True))).hexdigest()


@pytest.mark.parametrize("with_ratings", [False, True])
def test_build_report_does_not_mutate_the_callers_frame(with_ratings: bool) -> None:
    """HELD: an encoded, validated frame (used by ``build_report`` without a copy) is left as it was."""
    raw = _imported_and_reference(8)
    frame = _encoded(raw)
    assert F.encode_strings(F.validate_judgments(frame))["score"].to_numpy().base is not None
    ratings = _ratings_for(raw, 8, 150) if with_ratings else None
    before, columns, index = _digest(frame), list(frame.columns), frame.index.copy()
    build_report(frame, ratings, n_boot=20, seed=0)
    assert list(frame.columns) == columns and frame.index.equals(index)
    assert _digest(frame) == before


def test_a_write_to_the_view_does_not_reach_the_stacked_frame() -> None:
    """HELD: copy-on-write keeps every write to ``_without_pseudo_judges``'s view off the stacked frame."""
    stored = _encoded(synthetic_judgments(2000, seed=5))
    _, _, _, items, _ = _panel_frames(stored, panel_config(None), {}, stack=False)
    before = _digest(items)
    view = _without_pseudo_judges(items)
    assert len(view) < len(items)
    assert np.shares_memory(view["score"].to_numpy(), items["score"].to_numpy())
    view["score"] = -1.0
    view.loc[view.index[:5], "n_samples"] = -7
    arr = _without_pseudo_judges(items)["length"].to_numpy()
    with pytest.raises(ValueError, match="read-only"):
        arr[:3] = -5.0
    assert _digest(items) == before
    assert json.dumps(build_report(stored, n_boot=10)["bias"], sort_keys=True)  # still builds
