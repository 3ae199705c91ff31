"""Item-level frames from the judgments and the ratings frames: judge and human scores per item, both on a 0-1 scale
side by side, binned, ranked, and their gaps; one item's score bars."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dashboard.analysis.frames import frame

JUDGE_ITEM_COLUMNS = ["item_id", "system", "aspect", "judge", "score", "scale_min", "scale_max", "n_samples"]


def judge_item_scores(judgments: pd.DataFrame) -> pd.DataFrame:
    """Single-mode done judgments averaged over samples: one row per (item, system, aspect, judge)."""
    if judgments.empty or "mode" not in judgments:
        return frame([], JUDGE_ITEM_COLUMNS)
    df = judgments[(judgments["mode"] == "single") & (judgments["status"] == "done") & judgments["score"].notna()]
    if df.empty:
        return frame([], JUDGE_ITEM_COLUMNS)
    for column in ("scale_min", "scale_max"):
        if column not in df:
            df = df.assign(**{column: np.nan})
    grouped = df.groupby(["item_id", "system_a", "aspect", "judge"], sort=True, dropna=False)
    out = (
        grouped.agg(
            score=("score", "mean"),
            scale_min=("scale_min", "first"),
            scale_max=("scale_max", "first"),
            n_samples=("score", "size"),
        )
        .reset_index()
        .rename(columns={"system_a": "system"})
    )
    return out[JUDGE_ITEM_COLUMNS]


def human_item_scores(ratings: pd.DataFrame) -> pd.DataFrame:
    """Human score ratings averaged over raters: one row per (item, system, aspect)."""
    columns = ["item_id", "system", "aspect", "human", "human_min", "human_max", "n_raters"]
    if ratings.empty or "kind" not in ratings:
        return frame([], columns)
    df = ratings[ratings["kind"] == "score"]
    if df.empty:
        return frame([], columns)
    out = (
        df.groupby(["item_id", "system", "aspect"], sort=True)
        .agg(
            human=("value", "mean"),
            human_min=("scale_min", "first"),
            human_max=("scale_max", "first"),
            n_raters=("rater", "nunique"),
        )
        .reset_index()
    )
    return out[columns]


def to_unit(values: pd.Series, lo: pd.Series, hi: pd.Series) -> pd.Series:
    lo_f, hi_f = pd.to_numeric(lo, errors="coerce"), pd.to_numeric(hi, errors="coerce")
    span = (hi_f - lo_f).where(lambda s: s > 0)
    return ((pd.to_numeric(values, errors="coerce") - lo_f) / span).clip(0, 1)


def scatter_frame(judge_items: pd.DataFrame, human_items: pd.DataFrame) -> pd.DataFrame:
    """Judge vs (mean) human score on the keys both rated, with both on a 0-1 scale and their gap."""
    columns = [
        *JUDGE_ITEM_COLUMNS,
        "human",
        "human_min",
        "human_max",
        "n_raters",
        "judge_unit",
        "human_unit",
        "gap",
    ]
    if judge_items.empty or human_items.empty:
        return frame([], columns)
    df = judge_items.merge(human_items, on=["item_id", "system", "aspect"], how="inner")
    if df.empty:
        return frame([], columns)
    df["judge_unit"] = to_unit(
        df["score"], df["scale_min"].fillna(df["human_min"]), df["scale_max"].fillna(df["human_max"])
    )
    df["human_unit"] = to_unit(df["human"], df["human_min"], df["human_max"])
    df["gap"] = (df["judge_unit"] - df["human_unit"]).abs()
    return df[columns]


def bins(unit: pd.Series, k: int = 5) -> pd.Series:
    """The agreement module's common k-point scale: floor(unit * k) clipped to k - 1."""
    return np.floor(unit * k).clip(0, k - 1)


def score_confusion(scatter: pd.DataFrame, k: int = 5) -> pd.DataFrame:
    """k x k counts: judge bin (rows) by human bin (columns), bins labelled 1..k."""
    labels = [str(i + 1) for i in range(k)]
    table = pd.DataFrame(0, index=labels, columns=labels)
    if scatter.empty:
        return table
    j, h = bins(scatter["judge_unit"], k).dropna(), bins(scatter["human_unit"], k).dropna()
    both = pd.concat([j.rename("j"), h.rename("h")], axis=1).dropna()
    for (jb, hb), count in both.groupby(["j", "h"]).size().items():
        table.iloc[int(jb), int(hb)] = int(count)
    return table


def _scale_text(low: object, high: object) -> str:
    lo, hi = pd.to_numeric(pd.Series([low, high]), errors="coerce")
    return "n/a" if pd.isna(lo) or pd.isna(hi) else f"{lo:g}–{hi:g}"


def system_ranks(scatter: pd.DataFrame) -> pd.DataFrame:
    """Per (judge, aspect, system): mean judge and human score on shared keys, each on its own scale (the judge's:
    the scale the report uses, named in ``judge_scale``; the humans': ``human_scale``), and both ranks (1 = best,
    ranked on the 0-1 share of each scale, so two scales compare)."""
    columns = ["judge", "aspect", "system", "judge_mean", "judge_scale", "human_mean", "human_scale", "judge_rank",
               "human_rank", "n"]  # fmt: skip
    if scatter.empty:
        return frame([], columns)
    g = (
        scatter.groupby(["judge", "aspect", "system"])
        .agg(
            judge_mean=("score", "mean"),
            human_mean=("human", "mean"),
            judge_unit=("judge_unit", "mean"),
            human_unit=("human_unit", "mean"),
            judge_min=("scale_min", "first"),
            judge_max=("scale_max", "first"),
            human_min=("human_min", "first"),
            human_max=("human_max", "first"),
            n=("item_id", "size"),
        )
        .reset_index()
    )
    g["judge_scale"] = [_scale_text(lo, hi) for lo, hi in zip(g["judge_min"], g["judge_max"], strict=True)]
    g["human_scale"] = [_scale_text(lo, hi) for lo, hi in zip(g["human_min"], g["human_max"], strict=True)]
    by = g.groupby(["judge", "aspect"])
    g["judge_rank"] = by["judge_unit"].rank(ascending=False, method="min").astype("Int64")
    g["human_rank"] = by["human_unit"].rank(ascending=False, method="min").astype("Int64")
    return g[columns]


def gap_summary(scatter: pd.DataFrame) -> pd.DataFrame:
    """Mean judge-human gap (0-1 scale) per system x aspect: where disagreement concentrates."""
    columns = ["system", "aspect", "mean_gap", "n"]
    if scatter.empty:
        return frame([], columns)
    out = scatter.groupby(["system", "aspect"]).agg(mean_gap=("gap", "mean"), n=("gap", "size")).reset_index()
    return out[columns]


def item_score_bars(judgments: pd.DataFrame) -> pd.DataFrame:
    """One item's single-mode scores shaped for ``charts.score_means_chart`` (samples averaged, no CI)."""
    columns = ["system", "aspect", "mean", "ci_low", "ci_high", "n"]
    if judgments.empty or "mode" not in judgments:
        return frame([], columns)
    single = judgments[(judgments["mode"] == "single") & judgments["score"].notna()]
    if single.empty:
        return frame([], columns)
    out = single.groupby(["system_a", "aspect"]).agg(mean=("score", "mean"), n=("score", "size")).reset_index()
    out = out.rename(columns={"system_a": "system"})
    out["ci_low"] = out["ci_high"] = out["mean"]
    return out[columns]
