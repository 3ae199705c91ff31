"""Pure pandas transforms from report dicts / frames to the tables the pages show (no Streamlit here).

Every function tolerates missing report sections (returns an empty frame with the expected columns).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

PAPER_ASPECTS = ("engagingness", "coherence", "consistency")
OUTCOME_VALUE = {"win": 1.0, "tie": 0.0, "loss": -1.0}
SCORE_COLUMNS = [
    "system",
    "aspect",
    "judge",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "median",
    "std",
    "n_total",
    "n_done",
    "n_failed",
    "n_unparseable",
    "n_pending",
]
PREF_COLUMNS = [
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "n",
    "wins",
    "ties",
    "losses",
    "ties_inconsistent",
    "win_rate_pct",
    "tie_rate_pct",
    "loss_rate_pct",
    "win_rate",
    "win_rate_ci_low",
    "win_rate_ci_high",
    "mean_preference",
]
RANK_COLUMNS = [
    "aspect",
    "judge",
    "rank",
    "system",
    "elo",
    "elo_ci_low",
    "elo_ci_high",
    "strength",
    "n_comparisons",
    "wins",
    "ties",
    "losses",
]


PANEL = "panel"
REFERENCE = "reference"
METRIC_LABELS = {"f1": "F1", "bleu-1": "BLEU-1", "bleu-2": "BLEU-2", "bertscore": "BERTScore"}
JUDGES_HUMAN_COLUMNS = [
    "judge",
    "aspect",
    "n_scores",
    "spearman",
    "kendall",
    "qwk",
    "n_votes",
    "s1",
    "s2",
    "kappa",
    "cost_usd",
]


def section_list(report: Mapping[str, Any] | None, name: str) -> list[dict[str, Any]]:
    value = (report or {}).get(name)
    return [dict(v) for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """Rows as a frame with at least ``columns`` (missing ones filled with None), in that order first."""
    df = pd.DataFrame([dict(r) for r in rows])
    for column in columns:
        if column not in df:
            df[column] = None
    return df[[*columns, *[c for c in df.columns if c not in columns]]]


def judges_of(report: Mapping[str, Any] | None) -> list[str]:
    counts = (report or {}).get("counts") or {}
    judges = counts.get("judges") or []
    if not judges:
        found = {r.get("judge") for name in ("scores", "preferences", "ranking") for r in section_list(report, name)}
        judges = sorted(j for j in found if j)
    judges = [str(j) for j in judges]
    if (report or {}).get("panel") and PANEL not in judges:
        judges.append(PANEL)  # the panel pseudo-judge: the run's judges aggregated (it has no stored rows)
    return judges


def aspect_order(aspects: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(a for a in aspects if a))
    return [a for a in PAPER_ASPECTS if a in present] + sorted(a for a in present if a not in PAPER_ASPECTS)


# -- leaderboard -----------------------------------------------------------------------------------------
def scores_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    rows = [{k: v for k, v in r.items() if k != "histogram"} for r in section_list(report, "scores")]
    return frame(rows, SCORE_COLUMNS)


def histogram_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Long histogram rows (system, aspect, judge, bin_start, bin_end, count) from the scores section."""
    rows: list[dict[str, Any]] = []
    for r in section_list(report, "scores"):
        hist = r.get("histogram") or {}
        edges, counts = hist.get("edges") or [], hist.get("counts") or []
        for i, count in enumerate(counts):
            if i + 1 < len(edges):
                rows.append(
                    {
                        "system": r.get("system"),
                        "aspect": r.get("aspect"),
                        "judge": r.get("judge"),
                        "bin_start": edges[i],
                        "bin_end": edges[i + 1],
                        "count": count,
                    }
                )
    return frame(rows, ["system", "aspect", "judge", "bin_start", "bin_end", "count"])


def paper_frame(report: Mapping[str, Any] | None, judge: str | None = None) -> pd.DataFrame:
    """The seed paper's table: System x F1/BLEU-1/BLEU-2 (reference metrics, when the items have references) x
    Engagingness/Coherence/Consistency/... + Average of the judge's aspects (one judge; the ``reference``
    pseudo-judge: the metrics alone)."""
    table = (report or {}).get("paper_table") or {}
    metrics = [str(m) for m in table.get("metrics") or []]
    aspects = [] if judge == REFERENCE else [str(a) for a in table.get("aspects") or []]
    rows = []
    seen: set[Any] = set()
    for r in table.get("rows") or []:
        if judge == REFERENCE:
            if r.get("system") in seen:
                continue
            seen.add(r.get("system"))
        elif judge is not None and r.get("judge") != judge:
            continue
        values = r.get("values") or {}
        row: dict[str, Any] = {"Judge": judge if judge == REFERENCE else r.get("judge"), "System": r.get("system")}
        row.update({METRIC_LABELS.get(m, m): (r.get("metrics") or {}).get(m) for m in metrics})
        row.update({a.capitalize(): values.get(a) for a in aspects})
        row["Average"] = r.get("average") if judge != REFERENCE else None
        row["Items"] = r.get("n_items")
        rows.append(row)
    columns = [
        "Judge",
        "System",
        *[METRIC_LABELS.get(m, m) for m in metrics],
        *[a.capitalize() for a in aspects],
        "Average",
        "Items",
    ]
    df = frame(rows, columns)
    return df.sort_values("Average", ascending=False, na_position="last").reset_index(drop=True) if len(df) else df


def reference_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """The reference metrics per system (mean over items, 95% bootstrap CI): the ``reference`` pseudo-judge's scores."""
    rows = [
        {
            "System": r.get("system"),
            "Metric": METRIC_LABELS.get(str(r.get("aspect")), r.get("aspect")),
            "Mean": r.get("mean"),
            "CI low": r.get("ci_low"),
            "CI high": r.get("ci_high"),
            "Items": r.get("n"),
        }
        for r in section_list(report, "scores")
        if r.get("judge") == REFERENCE
    ]
    return frame(rows, ["System", "Metric", "Mean", "CI low", "CI high", "Items"])


def judges_human_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Judges (and the panel, and the reference metrics) x aspects: agreement with humans beside the cost."""
    judges = ((report or {}).get("agreement") or {}).get("judges") or {}
    return frame(judges.get("matrix") or [], JUDGES_HUMAN_COLUMNS)


def judge_sets_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Every set of the panel's judges aggregated like the panel, vs humans, cheapest first."""
    judges = ((report or {}).get("agreement") or {}).get("judges") or {}
    rows = [{**r, "judges": " + ".join(r.get("judges") or [])} for r in judges.get("sets") or []]
    return frame(rows, ["judges", *JUDGES_HUMAN_COLUMNS[1:]])


def inter_judge_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """The panel's inter-judge agreement: alpha over all members and each judge pair, per aspect."""
    inter = ((report or {}).get("panel") or {}).get("inter_judge") or {}
    rows: list[dict[str, Any]] = []
    for r in inter.get("scores") or []:
        rows.append(
            {
                "aspect": r["aspect"],
                "mode": "scores",
                "judges": "all",
                "n": r["n_units"],
                "alpha": r["alpha_interval"],
                "alpha (ordinal)": r["alpha_ordinal"],
            }
        )
        rows += [
            {
                "aspect": r["aspect"],
                "mode": "scores",
                "judges": f"{p['judge_a']} ~ {p['judge_b']}",
                "n": p["n"],
                "spearman": p["spearman"],
                "QWK": p["qwk"],
            }
            for p in r.get("pairs") or []
        ]
    for r in inter.get("preferences") or []:
        rows.append(
            {"aspect": r["aspect"], "mode": "pairwise", "judges": "all", "n": r["n_units"], "alpha": r["alpha_nominal"]}
        )
        rows += [
            {
                "aspect": r["aspect"],
                "mode": "pairwise",
                "judges": f"{p['judge_a']} ~ {p['judge_b']}",
                "n": p["n"],
                "agreement": p["agreement"],
                "kappa": p["kappa"],
            }
            for p in r.get("pairs") or []
        ]
    return frame(
        rows, ["aspect", "mode", "judges", "n", "alpha", "alpha (ordinal)", "spearman", "QWK", "agreement", "kappa"]
    )


def ranking_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(section_list(report, "ranking"), RANK_COLUMNS)


def paired_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        section_list(report, "paired"),
        [
            "aspect",
            "judge",
            "system_x",
            "system_y",
            "n_pairs",
            "mean_x",
            "mean_y",
            "mean_diff",
            "ci_low",
            "ci_high",
            "p_value",
        ],
    )


# -- preferences -----------------------------------------------------------------------------------------
def preferences_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    rows = [{k: v for k, v in r.items() if k != "preference_distribution"} for r in section_list(report, "preferences")]
    return frame(rows, PREF_COLUMNS)


def orient(prefs: pd.DataFrame, focus: str | None) -> pd.DataFrame:
    """Pairs that involve ``focus`` turned so ``focus`` is system_a (wins/losses and rates swapped)."""
    if focus is None or prefs.empty:
        return prefs.copy()
    df = prefs[(prefs["system_a"] == focus) | (prefs["system_b"] == focus)].copy()
    flip = df["system_b"] == focus
    swaps = [("system_a", "system_b"), ("wins", "losses"), ("win_rate_pct", "loss_rate_pct")]
    for left, right in swaps:
        df.loc[flip, [left, right]] = df.loc[flip, [right, left]].to_numpy(copy=True)
    for column in ("win_rate", "win_rate_ci_low", "win_rate_ci_high"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    low, high = df.loc[flip, "win_rate_ci_low"].copy(), df.loc[flip, "win_rate_ci_high"].copy()
    df.loc[flip, "win_rate"] = 1 - df.loc[flip, "win_rate"]
    df.loc[flip, "win_rate_ci_low"] = 1 - high
    df.loc[flip, "win_rate_ci_high"] = 1 - low
    df["mean_preference"] = pd.to_numeric(df["mean_preference"], errors="coerce")
    df.loc[flip, "mean_preference"] = -df.loc[flip, "mean_preference"]
    return df.reset_index(drop=True)


def pair_label(a: Any, b: Any) -> str:
    return f"{a} vs {b}"


def wtl_long(prefs: pd.DataFrame) -> pd.DataFrame:
    """Long win/tie/loss percentages per pair (for the stacked bars), pairs with n > 0 only."""
    rows = []
    for r in prefs.to_dict(orient="records"):
        n = r.get("n") or 0
        if not n:
            continue
        label = pair_label(r["system_a"], r["system_b"])
        for outcome, count_col in (("win", "wins"), ("tie", "ties"), ("loss", "losses")):
            count = int(r.get(count_col) or 0)
            rows.append(
                {
                    "pair": label,
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge"),
                    "outcome": outcome,
                    "count": count,
                    "pct": 100.0 * count / n,
                    "n": n,
                }
            )
    return frame(rows, ["pair", "aspect", "judge", "outcome", "count", "pct", "n"])


def winrate_matrix(prefs: pd.DataFrame) -> pd.DataFrame:
    """Long (row, column, win_rate, n): win rate of ``row`` over ``column`` (both orientations)."""
    rows = []
    for r in prefs.to_dict(orient="records"):
        rate = r.get("win_rate")
        if rate is None or not r.get("n") or (isinstance(rate, float) and np.isnan(rate)):
            continue
        rows.append({"row": r["system_a"], "column": r["system_b"], "win_rate": float(rate), "n": r["n"]})
        rows.append({"row": r["system_b"], "column": r["system_a"], "win_rate": 1.0 - float(rate), "n": r["n"]})
    return frame(rows, ["row", "column", "win_rate", "n"])


# -- bias ------------------------------------------------------------------------------------------------
def bias_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per judge with the headline bias figures."""
    per_judge = ((report or {}).get("bias") or {}).get("per_judge") or {}
    rows = []
    for judge, rec in per_judge.items():
        rec = rec or {}
        pos, swap, length = rec.get("position") or {}, rec.get("swap") or {}, rec.get("length") or {}
        use, fail, selfp = (
            rec.get("score_use") or {},
            rec.get("failures") or {},
            rec.get("self_preference") or {},
        )
        rows.append(
            {
                "judge": judge,
                "p_first_wins": pos.get("p_first_wins"),
                "position_n": pos.get("n"),
                "swap_flip_rate": swap.get("rate"),
                "swap_n": swap.get("n"),
                "p_longer_wins": length.get("p_longer_wins"),
                "length_n": length.get("n_pairs"),
                "score_length_spearman": length.get("score_length_spearman"),
                "scale_used": use.get("distinct_fraction"),
                "entropy_norm": use.get("entropy_norm"),
                "unparseable_rate": fail.get("unparseable_rate"),
                "failure_rate": fail.get("failure_rate"),
                "self_pref_score_diff": selfp.get("score_diff_scaled"),
                "self_pref_win_rate": selfp.get("win_rate_same"),
            }
        )
    return frame(
        rows,
        [
            "judge",
            "p_first_wins",
            "position_n",
            "swap_flip_rate",
            "swap_n",
            "p_longer_wins",
            "length_n",
            "score_length_spearman",
            "scale_used",
            "entropy_norm",
            "unparseable_rate",
            "failure_rate",
            "self_pref_score_diff",
            "self_pref_win_rate",
        ],
    )


def flags_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    flags = ((report or {}).get("bias") or {}).get("flags") or []
    return frame([f for f in flags if isinstance(f, Mapping)], ["name", "value", "threshold", "message"])


# -- agreement -------------------------------------------------------------------------------------------
def _agreement(report: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (report or {}).get("agreement") or {}


def pref_agreement_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    prefs = _agreement(report).get("preferences") or {}
    rows = []
    for who, key in (("judge vs human", "judge_vs_human"), ("human vs human", "human_vs_human")):
        for r in prefs.get(key) or []:
            s1, s2 = r.get("s1") or {}, r.get("s2") or {}
            rows.append(
                {
                    "comparison": who,
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge", "-"),
                    "S1 agree": s1.get("agree"),
                    "S1 total": s1.get("total"),
                    "S1 rate": s1.get("rate"),
                    "S2 agree": s2.get("agree"),
                    "S2 total": s2.get("total"),
                    "S2 rate": s2.get("rate"),
                    "kappa S1": r.get("kappa_s1"),
                    "kappa S2": r.get("kappa_s2"),
                    "keys": r.get("n_keys"),
                }
            )
    return frame(
        rows,
        [
            "comparison",
            "aspect",
            "judge",
            "S1 agree",
            "S1 total",
            "S1 rate",
            "S2 agree",
            "S2 total",
            "S2 rate",
            "kappa S1",
            "kappa S2",
            "keys",
        ],
    )


def score_agreement_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        list(_agreement(report).get("scores") or []),
        [
            "aspect",
            "judge",
            "n",
            "n_human_raters",
            "spearman",
            "kendall",
            "pearson",
            "qwk",
            "system_spearman",
            "system_kendall",
        ],
    )


def alpha_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    return frame(
        list(_agreement(report).get("alpha") or []),
        [
            "aspect",
            "n_units",
            "n_raters_human",
            "n_judges",
            "alpha_interval_humans",
            "alpha_ordinal_humans",
            "alpha_interval_all",
            "alpha_ordinal_all",
        ],
    )


def pref_confusions(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{aspect, judge, labels, matrix}]`` judge (rows) x human (columns) vote counts."""
    prefs = _agreement(report).get("preferences") or {}
    out = []
    for r in prefs.get("judge_vs_human") or []:
        confusion = r.get("confusion") or {}
        matrix = confusion.get("judge_by_human")
        if matrix:
            out.append(
                {
                    "aspect": r.get("aspect"),
                    "judge": r.get("judge"),
                    "labels": list(confusion.get("labels") or ["b wins", "tie", "a wins"]),
                    "matrix": matrix,
                }
            )
    return out


# -- item-level frames (from the judgments frame and the ratings frame) ---------------------------------
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


def system_ranks(scatter: pd.DataFrame) -> pd.DataFrame:
    """Per (judge, aspect, system): mean judge and human score on shared keys, both ranks (1 = best)."""
    columns = ["judge", "aspect", "system", "judge_mean", "human_mean", "judge_rank", "human_rank", "n"]
    if scatter.empty:
        return frame([], columns)
    g = (
        scatter.groupby(["judge", "aspect", "system"])
        .agg(judge_mean=("judge_unit", "mean"), human_mean=("human_unit", "mean"), n=("item_id", "size"))
        .reset_index()
    )
    by = g.groupby(["judge", "aspect"])
    g["judge_rank"] = by["judge_mean"].rank(ascending=False, method="min").astype("Int64")
    g["human_rank"] = by["human_mean"].rank(ascending=False, method="min").astype("Int64")
    return g[columns]


# -- disagreements ---------------------------------------------------------------------------------------
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


# -- compare runs ----------------------------------------------------------------------------------------
def _item_means(items: pd.DataFrame) -> pd.DataFrame:
    """Average judges: one (item, system, aspect) score on a 0-100-comparable raw scale."""
    if items.empty:
        return frame([], ["item_id", "system", "aspect", "score"])
    return items.groupby(["item_id", "system", "aspect"], sort=True)["score"].mean().reset_index()


def compare_scores(
    base: pd.DataFrame, cand: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """Per (system, aspect): candidate - baseline mean on the shared items, paired bootstrap CI over items."""
    columns = [
        "system",
        "aspect",
        "n_items",
        "baseline",
        "candidate",
        "delta",
        "ci_low",
        "ci_high",
        "n_worse",
        "n_better",
    ]
    merged = _item_means(base).merge(_item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    rng = np.random.default_rng(seed)
    rows = []
    alpha = (1 - ci) / 2
    for (system, aspect), g in merged.groupby(["system", "aspect"], sort=True):
        diff = (g["score_cand"] - g["score_base"]).to_numpy(dtype="float64")
        low = high = None
        if len(diff) > 1 and n_boot > 0:
            idx = rng.integers(0, len(diff), size=(n_boot, len(diff)))
            boots = diff[idx].mean(axis=1)
            low, high = float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))
        rows.append(
            {
                "system": system,
                "aspect": aspect,
                "n_items": len(diff),
                "baseline": float(g["score_base"].mean()),
                "candidate": float(g["score_cand"].mean()),
                "delta": float(diff.mean()),
                "ci_low": low,
                "ci_high": high,
                "n_worse": int((diff < 0).sum()),
                "n_better": int((diff > 0).sum()),
            }
        )
    return frame(rows, columns)


def worse_items(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """(item, system, aspect) whose score dropped from baseline to candidate, biggest drop first."""
    columns = ["item_id", "system", "aspect", "baseline", "candidate", "delta"]
    merged = _item_means(base).merge(_item_means(cand), on=["item_id", "system", "aspect"], suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    merged = merged.rename(columns={"score_base": "baseline", "score_cand": "candidate"})
    merged["delta"] = merged["candidate"] - merged["baseline"]
    return merged[merged["delta"] < 0].sort_values(["delta", "item_id"])[columns].reset_index(drop=True)


def compare_preferences(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, aspect): candidate - baseline win rate, CI from the two Wilson half-widths combined."""
    columns = ["system_a", "system_b", "aspect", "baseline", "candidate", "delta", "ci_low", "ci_high"]
    keys = ["system_a", "system_b", "aspect"]
    if base.empty or cand.empty:
        return frame([], columns)

    def prep(df: pd.DataFrame) -> pd.DataFrame:
        d = df[df["n"].fillna(0) > 0].copy()
        for c in ("win_rate", "win_rate_ci_low", "win_rate_ci_high"):
            d[c] = pd.to_numeric(d[c], errors="coerce")
        d["half"] = (d["win_rate_ci_high"] - d["win_rate_ci_low"]) / 2
        return d.groupby(keys).agg(rate=("win_rate", "mean"), half=("half", "mean")).reset_index()

    merged = prep(base).merge(prep(cand), on=keys, suffixes=("_base", "_cand"))
    if merged.empty:
        return frame([], columns)
    merged["baseline"], merged["candidate"] = merged["rate_base"], merged["rate_cand"]
    merged["delta"] = merged["candidate"] - merged["baseline"]
    half = np.sqrt(merged["half_base"] ** 2 + merged["half_cand"] ** 2)
    merged["ci_low"], merged["ci_high"] = merged["delta"] - half, merged["delta"] + half
    return merged[columns]


def gap_summary(scatter: pd.DataFrame) -> pd.DataFrame:
    """Mean judge-human gap (0-1 scale) per system x aspect: where disagreement concentrates."""
    columns = ["system", "aspect", "mean_gap", "n"]
    if scatter.empty:
        return frame([], columns)
    out = scatter.groupby(["system", "aspect"]).agg(mean_gap=("gap", "mean"), n=("gap", "size")).reset_index()
    return out[columns]


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


# -- fact-check (docs/facts.md) --------------------------------------------------------------------------------
FACT_COLORS = {"contradicted": "red", "supported": "green"}
"""Streamlit background colours of the evidence of each label (not addressed facts have none)."""
SOURCE_KINDS = ("persona.user", "persona.bot", "memory", "session")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def source_kind(source: Any) -> str:
    """The kind of a fact's source: ``persona.user``, ``persona.bot``, ``memory`` or ``session`` (any earlier
    session or turn); anything else is kept as it is."""
    text = str(source or "")
    return "session" if text == "session" or text.startswith("session ") else text


def escape_markdown(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def evidence_span(response: str, evidence: str) -> tuple[int, int] | None:
    """Where ``evidence`` occurs in ``response`` (case and runs of white space ignored), or None."""
    words = str(evidence or "").split()
    if not words:
        return None
    found = re.search(r"\s+".join(re.escape(w) for w in words), response, re.IGNORECASE)
    return (found.start(), found.end()) if found else None


def highlight_evidence(response: str, facts: Sequence[Mapping[str, Any]]) -> str:
    """The response as Markdown with each supported fact's evidence on a green and each contradicted fact's on a
    red background (a contradiction wins where spans overlap); the rest escaped as plain text."""
    paint: list[str | None] = [None] * len(response)
    ranked = sorted(facts, key=lambda f: f.get("label") == "contradicted")  # contradicted painted last
    for fact in ranked:
        color = FACT_COLORS.get(str(fact.get("label")))
        span = evidence_span(response, str(fact.get("evidence") or "")) if color else None
        if span:
            paint[span[0] : span[1]] = [color] * (span[1] - span[0])
    out: list[str] = []
    start = 0
    for end in range(1, len(response) + 1):
        if end == len(response) or paint[end] != paint[start]:
            chunk = response[start:end]
            color = paint[start]
            if color and chunk.strip():  # white space at the ends stays outside the highlight
                lead = " " if chunk[:1].isspace() else ""
                trail = " " if chunk[-1:].isspace() else ""
                out.append(f"{lead}:{color}-background[{escape_markdown(' '.join(chunk.split()))}]{trail}")
            else:
                out.append(escape_markdown(chunk))
            start = end
    return "".join(out)


def contradiction_counts(labels: pd.DataFrame) -> pd.DataFrame:
    """Contradicted facts per system and source kind (columns system, source_kind, contradictions)."""
    columns = ["system", "source_kind", "contradictions"]
    if labels.empty:
        return pd.DataFrame(columns=columns)
    kinds = labels.assign(source_kind=labels["source"].map(source_kind))
    counted = kinds.groupby(["system", "source_kind"], sort=True).size().rename("contradictions").reset_index()
    return counted[columns]
