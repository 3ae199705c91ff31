"""Review r57b: the order-combined outcomes as categoricals (``preferences.combine_orders``), the sorted categories of
an encoded frame (``frames._as_str``), the batch saving's noise line (``report._batch_saved``) and the report of a
run read in parts (``stats.parts``)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from dialogue_judge.gate.decision import GateDecider
from judge_api.adaptive.replay import oracle_from_judgments
from judge_api.adaptive.steps import _outcomes
from judge_api.stats import frames as F
from judge_api.stats.parts import RunParts, report_from_parts
from judge_api.stats.preferences import combine_orders, orient_combined, summarise_combined
from judge_api.stats.report import build_report, cost_section
from judge_api.stats.synthetic import synthetic_judgments


def _pairwise(rows: list[tuple[str, str, str, str, str, str]]) -> pd.DataFrame:
    """(item, system_a, system_b, order, outcome, judge) rows, done, aspect "overall"."""
    code = {"win": 1.0, "tie": 0.0, "loss": -1.0}
    return pd.DataFrame(
        [
            {
                "item_id": i,
                "mode": "pairwise",
                "system_a": a,
                "system_b": b,
                "aspect": "overall",
                "judge": j,
                "order": o,
                "status": "done",
                "outcome": out,
                "preference": code[out],
            }
            for i, a, b, o, out, j in rows
        ]
    )


SMALL = [
    ("i1", "x", "y", "ab", "win", "j1"),
    ("i1", "x", "y", "ba", "win", "j1"),
    ("i2", "x", "y", "ab", "win", "j1"),
    ("i2", "x", "y", "ba", "loss", "j1"),
    ("i3", "x", "y", "ab", "tie", "j1"),
    ("i4", "y", "x", "ba", "loss", "j1"),
    ("i1", "x", "y", "ab", "win", "j2"),
    ("i2", "x", "y", "ab", "win", "j2"),
]


def _text(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def test_combine_orders_consumers_outside_the_report_give_the_previous_values() -> None:
    """HELD (review r57b): with ``outcome`` / ``outcome_ab`` / ``outcome_ba`` categoricals, the consumers of
    ``combine_orders`` outside the report give what they gave on 46b962b (Arrow strings; values taken from that
    commit): ``orient_combined`` (``.map`` + ``.where`` on the categorical), ``summarise_combined`` (no 0-count rows
    of unobserved categories, no extra groups), the gate's panel outcomes (``to_dict`` records compared with
    Python strings; missing orders NaN as before), the adaptive step's comparisons and the replay's oracle."""
    frame = _pairwise(SMALL)
    oriented = orient_combined(combine_orders(frame), "y")
    got = [
        (r["item_id"], r["judge"], r["outcome"], _text(r["outcome_ab"]), _text(r["outcome_ba"]))
        for r in oriented.to_dict("records")
    ]
    assert got == [
        ("i1", "j1", "loss", "loss", "loss"),
        ("i2", "j1", "tie", "win", "loss"),
        ("i3", "j1", "tie", None, "tie"),
        ("i4", "j1", "loss", None, "loss"),
        ("i1", "j2", "loss", None, "loss"),
        ("i2", "j2", "loss", None, "loss"),
    ]
    only_wins = summarise_combined(combine_orders(frame[frame["outcome"] == "win"]))
    assert [(r["judge"], r["wins"], r["ties"], r["losses"]) for r in only_wins.to_dict("records")] == [
        ("j1", 2, 0, 0),
        ("j2", 2, 0, 0),
    ]
    summary = summarise_combined(combine_orders(frame))
    assert [
        (r["system_a"], r["judge"], r["wins"], r["ties"], r["ties_inconsistent"]) for r in summary.to_dict("records")
    ] == [("x", "j1", 1, 2, 1), ("x", "j2", 2, 0, 0), ("y", "j1", 0, 0, 0)]
    gate = frame.replace(
        {"system_a": {"x": "candidate", "y": "baseline"}, "system_b": {"x": "candidate", "y": "baseline"}}
    )
    records = [{k: _text(v) for k, v in r.items()} for r in gate.to_dict("records")]
    outcomes = GateDecider.outcomes(records, 2)
    assert {k: (v["outcome"], v["outcome_ab"], v["outcome_ba"], v["judges"]) for k, v in outcomes.items()} == {
        ("overall", "i1"): ("win", "win", "win", {"j1": "win", "j2": "win"}),
        ("overall", "i2"): ("win", "win", None, {"j1": "tie", "j2": "win"}),
    }
    single = GateDecider.outcomes([r for r in records if r["item_id"] == "i3"])
    assert single[("overall", "i3")]["outcome"] == "tie" and _text(single[("overall", "i3")]["outcome_ba"]) is None
    steps = _outcomes(frame[frame["judge"] == "j1"].rename(columns={"item_id": "item_key"}))
    assert [(c.item, c.a, c.b, c.score) for c in steps] == [
        ("i1", "x", "y", 1.0),
        ("i2", "x", "y", 0.5),
        ("i3", "x", "y", 0.5),
        ("i4", "y", "x", 0.0),
    ]
    oracle = oracle_from_judgments(frame[frame["judge"] == "j1"])
    assert sorted(oracle.verdicts.items()) == [
        (("i1", "x", "y"), 1.0),
        (("i1", "y", "x"), 0.0),
        (("i2", "x", "y"), 0.5),
        (("i2", "y", "x"), 0.5),
        (("i3", "x", "y"), 0.5),
        (("i3", "y", "x"), 0.5),
        (("i4", "x", "y"), 1.0),
        (("i4", "y", "x"), 0.0),
    ]


def _unsorted(frame: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
    out = frame.copy()
    out.attrs = {F.ENCODED: True}  # not the synthetic frame's VALIDATED marker: validated again
    for col in (F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.JUDGE, F.ASPECT, F.STATUS, F.MODE, F.ORDER, F.OUTCOME):
        categories = sorted(set(out[col].dropna()), reverse=True) + extra
        out[col] = pd.Categorical(out[col], categories=categories)
    return out


def test_unsorted_categories_with_unused_ones_give_the_plain_frames_report_and_leave_the_frame() -> None:
    """HELD (review r57b): an ENCODED frame whose categoricals have reversed categories plus unused ones (sorting
    before and after the used ones) gives the report of the plain string frame, and the caller's categoricals keep
    their order; a categorical of mixed types (ints and strings) and one with no categories at all validate without
    error."""
    plain = synthetic_judgments(240, seed=5)
    expected = json.dumps(build_report(plain, n_boot=5, seed=1), sort_keys=True)
    frame = _unsorted(plain, ["zz-unused", "0-unused"])
    before = {
        c: list(frame[c].cat.categories) for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)
    }
    assert json.dumps(build_report(frame, n_boot=5, seed=1), sort_keys=True) == expected
    after = {c: list(frame[c].cat.categories) for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)}
    assert after == before
    mixed = plain.copy()
    mixed.attrs = {F.ENCODED: True}
    mixed[F.ITEM_ID] = pd.Categorical(mixed[F.ITEM_ID].where(mixed.index % 2 == 0, 7).astype(object))
    mixed[F.SOURCE] = pd.Categorical([None] * len(mixed), categories=pd.Index([], dtype="str"))
    validated = F.validate_judgments(mixed)
    assert set(validated[F.ITEM_ID].astype(str)) >= {"7"} and validated[F.SOURCE].isna().all()


def _real_time_rows(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "item_id": np.arange(n).astype(str),
            "mode": "single",
            "system_a": "s",
            "aspect": "a",
            "judge": "j",
            "status": "done",
            "score": 1.0,
            "cost_usd": np.full(n, 0.01),
            "list_cost_usd": np.full(n, 0.01),
            "cache_saved_usd": np.zeros(n),
        }
    )


def test_one_batched_row_among_a_million_real_time_rows_is_a_batch_saving() -> None:
    """FIXED (review r57b): promise C, "a real batch saving (even small, one batched row among a million real-time
    rows) is still reported". A million rows billed at list price ($0.01 each, $10,000 listed) and one small batched
    row (list $1e-5, paid $5e-6): the saving is $5e-6, ~1e7 times the three totals' rounding (~1e-13 here), but
    below 1e-9 of the list price ($1e-5), so ``_batch_saved`` reported 0 (46b962b: 4.99999987e-06). Each row's saving
    is now summed, 0 below a billionth of that row's list price: 5e-6."""
    frame = _real_time_rows(1_000_000)
    frame.loc[0, ["cost_usd", "list_cost_usd"]] = [5e-6, 1e-5]
    cost = cost_section(frame)
    assert math.isclose(cost["saved_usd"]["batch"], 5e-6, rel_tol=1e-6), cost["saved_usd"]


def test_negative_rounding_never_becomes_a_negative_batch_saving() -> None:
    """HELD (review r57b): rows at real-time prices with a cache discount (``list = cost + cache_saved`` per row,
    the three totals' rounding negative or positive by the order of the rows) give a batch saving of exactly 0, over
    the whole frame and over parts of any size, overall and per judge; never negative."""
    rng = np.random.default_rng(3)
    n = 200
    cost = np.round(rng.random(n) * 1e-3, 9)
    saved = np.round(rng.random(n) * 1e-3, 9)
    frame = _real_time_rows(n).assign(
        cost_usd=cost, cache_saved_usd=saved, list_cost_usd=cost + saved, judge=np.where(np.arange(n) % 2, "j", "k")
    )
    for part in (3, 7, n):
        run = RunParts()
        for a in range(0, n, part):
            run.add(frame.iloc[a : a + part])
        got = cost_section(frame, sums=run.sums.cost_sums())  # what build_report(sums=...) makes of the parts' sums
        batches = [got["saved_usd"]["batch"], *(j["saved_usd"]["batch"] for j in got["per_judge"])]
        assert batches == [0.0, 0.0, 0.0], (part, batches)
    assert cost_section(frame)["saved_usd"]["batch"] == 0.0


def test_a_small_real_batch_saving_summed_over_parts_stays_within_the_cost_bound() -> None:
    """FIXED (review r57b): promise D (the report of a run read in parts, what the API serves: the cost floats within
    1e-12 of the whole frame's report). ``saved_usd.batch`` is ``list - cost - cache_saved``: with a real but small
    batch saving (one batched row, list $2e-6, paid $1e-6, among 399 real-time rows of up to a cent; the saving is
    ~5e-7 of the list price, above the 1e-9 noise line) the parts' sums round apart from one sum over every row by a
    few 1e-19 dollars, and the difference of the two totals carries that: the saving read 3 rows a part differs from
    the whole frame's by ~4e-10 relative (1.000000000139778e-06 vs 9.999999996956888e-07). The rows' savings are now
    summed (0 below a billionth of a row's list price): only the batched rows add to it."""
    rng = np.random.default_rng(0)
    n = 400
    frame = _real_time_rows(n)
    frame["cost_usd"] = np.round(rng.random(n) * 1e-2, 9)
    frame["list_cost_usd"] = frame["cost_usd"]
    frame.loc[0, ["cost_usd", "list_cost_usd"]] = [1e-6, 2e-6]
    whole = build_report(frame, n_boot=5)["cost"]["saved_usd"]["batch"]
    parts = report_from_parts([frame.iloc[a : a + 3] for a in range(0, n, 3)], n_boot=5)["cost"]["saved_usd"]["batch"]
    assert whole > 0
    assert math.isclose(parts, whole, rel_tol=1e-12), (parts, whole)
