"""The Disagreements page's frames: each pairwise key's outcome in both presentation orders, judge vs human preference
votes that differ, order flips, and which tab to open on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from dashboard.analysis.frames import frame, pair_label

OUTCOME_VALUE = {"win": 1.0, "tie": 0.0, "loss": -1.0}
ORDER_COLUMNS = [
    "item_id",
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "outcome_ab",
    "outcome_ba",
    "preference_ab",
    "preference_ba",
    "flipped",
]


def order_outcomes(judgments: pd.DataFrame) -> pd.DataFrame:
    """Pairwise keys with the outcome of each presentation order (samples: majority) and whether they flip.

    Vectorised (one groupby), so a run of 100,000 judgments takes well under a second."""
    if judgments.empty or "mode" not in judgments:
        return frame([], ORDER_COLUMNS)
    df = judgments[(judgments["mode"] == "pairwise") & (judgments["status"] == "done") & judgments["outcome"].notna()]
    if df.empty:
        return frame([], ORDER_COLUMNS)
    keys = ["item_id", "system_a", "system_b", "aspect", "judge"]
    df = df.assign(coded=df["outcome"].map(OUTCOME_VALUE), preference=pd.to_numeric(df["preference"]))
    per_order = df.groupby([*keys, "order"], sort=True)[["coded", "preference"]].mean()
    sign = np.sign(per_order["coded"].to_numpy())
    per_order["outcome"] = np.where(sign > 0, "win", np.where(sign < 0, "loss", "tie"))
    per_order.loc[per_order["coded"].isna(), "outcome"] = None
    wide = per_order[["outcome", "preference"]].unstack("order")
    wide.columns = [f"{a}_{b}" for a, b in wide.columns]
    wide = wide.reset_index()
    for column in ("outcome_ab", "outcome_ba", "preference_ab", "preference_ba"):
        if column not in wide:
            wide[column] = None
    wide["flipped"] = (
        wide["outcome_ab"].notna() & wide["outcome_ba"].notna() & (wide["outcome_ab"] != wide["outcome_ba"])
    )
    return wide[ORDER_COLUMNS]


def preference_disagreements(orders: pd.DataFrame, ratings: pd.DataFrame) -> pd.DataFrame:
    """Judge (orders combined) vs human preference votes that differ; ``severity`` 2 = opposite winners."""
    columns = [
        "item_id",
        "system_a",
        "system_b",
        "aspect",
        "judge",
        "judge_vote",
        "human_vote",
        "n_votes",
        "severity",
    ]
    if orders.empty or ratings.empty or "kind" not in ratings:
        return frame([], columns)
    votes = ratings[(ratings["kind"] == "preference") & ratings["system_b"].notna()]
    if votes.empty:
        return frame([], columns)
    judge = orders.copy()
    ab, ba = judge["outcome_ab"].map(OUTCOME_VALUE), judge["outcome_ba"].map(OUTCOME_VALUE)
    both = ab.notna() & ba.notna()
    judge["judge_vote"] = np.where(both, np.where(ab == ba, ab, 0.0), ab.fillna(ba))
    same = votes.rename(columns={"system": "system_a"})[["item_id", "system_a", "system_b", "aspect", "value"]]
    swapped = votes.rename(columns={"system": "system_b", "system_b": "system_a"})[
        ["item_id", "system_a", "system_b", "aspect", "value"]
    ].assign(value=lambda d: -d["value"])
    human = (
        pd.concat([same, swapped])
        .groupby(["item_id", "system_a", "system_b", "aspect"])
        .agg(human_vote=("value", "mean"), n_votes=("value", "size"))
        .reset_index()
    )
    df = judge.merge(human, on=["item_id", "system_a", "system_b", "aspect"], how="inner")
    df["severity"] = (df["judge_vote"] - df["human_vote"]).abs()
    df = df[df["severity"] > 0].sort_values("severity", ascending=False)
    return df[columns].reset_index(drop=True)


def first_with_content(run: Mapping[str, Any], ratings: pd.DataFrame | None, orders: pd.DataFrame | int | None) -> int:
    """The tab to open on: the first with rows to review (judge vs human, order flips, unparseable / failed), so a
    run whose only problems are unparseable replies does not open on an empty tab. ``orders``: the order outcomes'
    frame, or how many keys were judged in both orders (``/order-outcomes``' ``n_both``)."""
    counts = run.get("counts") or {}
    if isinstance(orders, pd.DataFrame):
        both = bool(not orders.empty and (orders["outcome_ab"].notna() & orders["outcome_ba"].notna()).any())
    else:
        both = bool(orders)
    has = [
        ratings is not None and not ratings.empty,
        both,
        int(counts.get("unparseable") or 0) + int(counts.get("failed") or 0) > 0,
    ]
    return has.index(True) if any(has) else 0


def flip_summary(orders: pd.DataFrame) -> pd.DataFrame:
    """Per pair x aspect: keys judged in both orders, how many flipped, the flip rate."""
    columns = ["pair", "aspect", "n", "flips", "flip_rate"]
    both = orders[orders["outcome_ab"].notna() & orders["outcome_ba"].notna()] if not orders.empty else orders
    if both.empty:
        return frame([], columns)
    both = both.assign(pair=[pair_label(a, b) for a, b in zip(both["system_a"], both["system_b"], strict=True)])
    out = both.groupby(["pair", "aspect"]).agg(n=("flipped", "size"), flips=("flipped", "sum")).reset_index()
    out["flip_rate"] = out["flips"] / out["n"]
    return out[columns]


def flip_summary_from_counts(by_pair: list[dict[str, Any]]) -> pd.DataFrame:
    """``flip_summary`` from the API's per (system_a, system_b, aspect) counts (``/order-outcomes``' ``by_pair``):
    the same rows without the keys."""
    columns = ["pair", "aspect", "n", "flips", "flip_rate"]
    counts = pd.DataFrame(by_pair, columns=["system_a", "system_b", "aspect", "n", "flips"])
    counts = counts[counts["n"] > 0]
    if counts.empty:
        return frame([], columns)
    counts = counts.assign(pair=[pair_label(a, b) for a, b in zip(counts["system_a"], counts["system_b"], strict=True)])
    out = counts.groupby(["pair", "aspect"]).agg(n=("n", "sum"), flips=("flips", "sum")).reset_index()
    out["flip_rate"] = out["flips"] / out["n"]
    return out[columns]
