"""Assemble every statistic of a run into one JSON-serialisable report, and render it.

``build_report`` validates the frames once, then fills these sections (each documented in its own
module): ``counts`` (rows per status and mode), ``scores`` (``scores.score_summary``), ``paired``
(``scores.paired_comparisons``: every pair of systems per aspect x judge), ``paper_table``
(``scores.paper_table``), ``preferences`` (``preferences.preference_summary``), ``ranking``
(``ranking.bradley_terry``), ``agreement`` (only when ratings are given: preference S1/S2 + kappa,
score correlations / QWK, Krippendorff's alpha), ``bias`` (``bias.bias_report``) and ``cost``.

``cost``: totals of input / output tokens, cost (USD) and latency over all rows, and means per
*finished* judgment (done + failed + unparseable) of the service's own; ``n_cached`` counts cached verdicts,
``n_provider_calls`` the finished rows that were not cached and ``n_imported`` the finished imported verdicts
(``source`` set: no call, left out of the means), so that ``n_cached + n_provider_calls + n_imported == n_finished``.

The result contains only dicts, lists, str, int, float, bool and None (NaN / inf become None), so
``json.dumps(report, allow_nan=False)`` works.  Empty frames and runs in which every judgment failed
give the same sections with zero counts and None statistics.
``report_to_markdown`` and ``report_to_table`` render a report for the CLI (Markdown pipe tables, or
fixed-width plain text); ``agreement_to_table`` renders the ``agreement`` section alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import preference_agreement, score_agreement, score_alpha
from judge_api.stats.bias import BiasThresholds, bias_report
from judge_api.stats.consistency import self_consistency_section
from judge_api.stats.facts import facts_section
from judge_api.stats.panel import (
    AGGREGATES,
    PANEL_JUDGE,
    PSEUDO_JUDGES,
    REFERENCE_JUDGE,
    inter_judge_agreement,
    judges_vs_humans,
    panel_members,
    with_panel,
)
from judge_api.stats.preferences import combine_orders, preference_summary
from judge_api.stats.ranking import bradley_terry
from judge_api.stats.scores import item_scores, paired_comparisons, paper_table, score_summary

SECTIONS = (
    "meta",
    "counts",
    "scores",
    "paired",
    "paper_table",
    "preferences",
    "ranking",
    "agreement",
    "bias",
    "cost",
    "self_consistency",
    "panel",
    "facts",
)


def _status_dict(status: pd.Series) -> dict[str, int]:
    vc = status.value_counts()
    return {s: int(vc.get(s, 0)) for s in F.STATUSES}


def counts_section(judgments: pd.DataFrame) -> dict[str, Any]:
    """Row counts by status and mode, and the systems / judges / aspects present."""
    df = F.validate_judgments(judgments)
    return {
        "n_rows": len(df),
        "by_status": _status_dict(df[F.STATUS]),
        "by_mode": {m: _status_dict(df.loc[df[F.MODE] == m, F.STATUS]) for m in F.MODES},
        "n_items": int(df[F.ITEM_ID].nunique()),
        "systems": F.distinct(df[F.SYSTEM_A], df[F.SYSTEM_B]),
        "judges": F.distinct(df[F.JUDGE]),
        "aspects": F.distinct(df[F.ASPECT]),
        "runs": F.distinct(df[F.RUN_ID]),
    }


_COST_COLUMNS = (
    F.INPUT_TOKENS,
    F.OUTPUT_TOKENS,
    F.COST_USD,
    F.LATENCY_MS,
    F.CACHED_INPUT_TOKENS,
    F.CACHE_WRITE_TOKENS,
    F.LIST_COST_USD,
    F.CACHE_SAVED_USD,
)


def _cost_block(
    cols: Mapping[str, np.ndarray], finished: np.ndarray, cached: np.ndarray, imported: np.ndarray
) -> dict[str, Any]:
    called = finished & ~imported  # an imported verdict cost this service nothing: not in the means

    def total(name: str) -> float:
        return float(np.nansum(cols[name]))

    def mean(name: str) -> float | None:
        vals = cols[name][called]
        vals = vals[np.isfinite(vals)]
        return float(vals.mean()) if vals.size else None

    cost = total(F.COST_USD)
    # rows from before the list price was stored (NaN): they were billed at list price
    listed = float(np.nansum(np.where(np.isfinite(cols[F.LIST_COST_USD]), cols[F.LIST_COST_USD], cols[F.COST_USD])))
    cache_saved = total(F.CACHE_SAVED_USD)
    return {
        "input_tokens": int(total(F.INPUT_TOKENS)),
        "output_tokens": int(total(F.OUTPUT_TOKENS)),
        "cached_input_tokens": int(total(F.CACHED_INPUT_TOKENS)),
        "cache_write_tokens": int(total(F.CACHE_WRITE_TOKENS)),
        "cost_usd": cost,
        "list_cost_usd": listed,
        # what the provider's discounts saved against list price: caching at real-time prices, batch the rest
        "saved_usd": {"cache": cache_saved, "batch": max(listed - cost - cache_saved, 0.0)},
        "latency_ms": total(F.LATENCY_MS),
        "n_finished": int(finished.sum()),
        "n_cached": int((called & cached).sum()),
        "n_provider_calls": int((called & ~cached).sum()),
        "n_imported": int((finished & imported).sum()),
        "mean_input_tokens": mean(F.INPUT_TOKENS),
        "mean_output_tokens": mean(F.OUTPUT_TOKENS),
        "mean_cost_usd": mean(F.COST_USD),
        "mean_latency_ms": mean(F.LATENCY_MS),
    }


def cost_section(judgments: pd.DataFrame) -> dict[str, Any]:
    """Token / cost / latency totals and per-judgment means, overall and per judge."""
    df = F.validate_judgments(judgments)
    cols = {c: df[c].to_numpy(dtype="float64") for c in _COST_COLUMNS}
    finished = df[F.STATUS].isin(F.FINISHED_STATUSES).to_numpy()
    cached = df[F.CACHED].to_numpy(dtype=bool)
    imported = df[F.SOURCE].notna().to_numpy()
    out = _cost_block(cols, finished, cached, imported)
    codes, judges = pd.factorize(df[F.JUDGE], sort=True)
    per_judge = []
    for k, judge in enumerate(judges):
        m = codes == k
        block = _cost_block({c: v[m] for c, v in cols.items()}, finished[m], cached[m], imported[m])
        per_judge.append({"judge": str(judge), **block})
    out["per_judge"] = per_judge
    return out


def _paper_section(table: pd.DataFrame) -> dict[str, Any]:
    """The paper table: systems x judge aspects per judge, with the reference metrics (same for every judge) as
    extra columns on each row, as the recursive-summarisation paper shows F1 / BLEU beside the judge's scores."""
    fixed = {F.JUDGE, "system", "average", "n_items"}
    aspects = [c for c in table.columns if c not in fixed]
    reference = table[table[F.JUDGE] == REFERENCE_JUDGE]
    judged = table[table[F.JUDGE] != REFERENCE_JUDGE]
    present = [a for a in aspects if reference[a].notna().any()] if not reference.empty else []
    metrics = [m for m in METRIC_LABELS if m in present] + [m for m in present if m not in METRIC_LABELS]
    judge_aspects = [a for a in aspects if judged[a].notna().any()] if not judged.empty else []
    by_system = {r["system"]: r for r in reference.to_dict(orient="records")}
    records = judged.to_dict(orient="records")
    if not records:  # nothing judged (yet): the reference metrics alone
        records = [{F.JUDGE: None, "system": s, "average": None, "n_items": r["n_items"]} for s, r in by_system.items()]
    rows = [
        {
            "judge": r[F.JUDGE],
            "system": r["system"],
            "metrics": {m: by_system.get(r["system"], {}).get(m) for m in metrics},
            "values": {a: r.get(a) for a in judge_aspects},
            "average": r["average"],
            "n_items": r["n_items"],
        }
        for r in records
    ]
    return {"metrics": metrics, "aspects": judge_aspects, "rows": rows}


def panel_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's panel settings (``RunCreate.panel``) with their defaults: all judges, mean."""
    panel = dict(config or {})
    aggregate = panel.get("aggregate") or "mean"
    if aggregate not in AGGREGATES:
        raise ValueError(f"panel.aggregate {aggregate!r} is not one of {list(AGGREGATES)}")
    return {"judges": panel.get("judges"), "aggregate": aggregate, "enabled": panel.get("enabled", True)}


def build_report(
    judgments: pd.DataFrame,
    ratings: pd.DataFrame | None = None,
    *,
    thresholds: BiasThresholds | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    human_prefix: str | None = None,
    families: Mapping[str, str] | None = None,
    n_bins: int = 5,
    panel: Mapping[str, Any] | None = None,
    fact_labels: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Every statistic of a run as one JSON-serialisable dict (see the module docstring).

    ``ratings`` (human ratings frame) enables the ``agreement`` section; ``human_prefix`` restricts
    the human raters to ids starting with it (MT-Bench: ``"expert_"``).  ``n_boot`` bootstrap
    resamples with ``seed`` for every CI; ``thresholds`` for the bias flags; ``families`` overrides
    the model-family substring map of the self-preference check; ``n_bins`` is the common scale of
    the score kappa. ``panel`` (``{"judges": [...] or None, "aggregate": "mean"|"median", "enabled": bool}``,
    default: every judge, mean) adds the ``panel`` pseudo-judge when it has two or more members (``stats.panel``).
    ``fact_labels`` (the fact labels frame of fact-check judgments) fills the ``facts`` section (``stats.facts``;
    None without fact-check judgments).
    """
    stored = F.validate_judgments(judgments)
    settings = panel_config(panel)
    imported = F.imported_judges(stored)
    # the default panel is the judges the run called: imported verdicts join it only when named
    chosen = settings["judges"]
    if chosen is None:
        chosen = [j for j in F.distinct(stored[F.JUDGE]) if j not in imported]
    members = panel_members(stored, chosen) if settings["enabled"] else []
    df, panel_rows = with_panel(stored, members, settings["aggregate"])
    combined = combine_orders(df, validated=True)
    items = item_scores(df, validated=True)
    real = stored[~stored[F.JUDGE].isin(PSEUDO_JUDGES).to_numpy()]
    report: dict[str, Any] = {
        "meta": {
            "n_boot": n_boot,
            "seed": seed,
            "ci": ci,
            "ci_method": {
                "scores": "percentile bootstrap over items",
                "paired": "paired percentile bootstrap over items; Wilcoxon signed-rank p",
                "win_rate": "Wilson score interval, ties counted as half wins",
                "ranking": "Bradley-Terry (MM), percentile bootstrap over items",
                "reference_metrics": "ParlAI normalisation; F1 of tokens; BLEU-1/2 nltk sentence_bleu with "
                "SmoothingFunction(epsilon=1e-12).method1",
            },
        },
        "counts": {**counts_section(stored), "imported": imported},
        "scores": score_summary(df, n_boot=n_boot, seed=seed, ci=ci, items=items),
        "paired": paired_comparisons(df, n_boot=n_boot, seed=seed, ci=ci, items=items),
        "paper_table": _paper_section(paper_table(df, items=items)),
        "preferences": preference_summary(df, ci=ci, combined=combined),
        "ranking": bradley_terry(df, n_boot=n_boot, seed=seed, ci=ci, combined=combined),
        "agreement": None,
        "bias": bias_report(
            real,
            thresholds=thresholds,
            families=families,
            combined=combined[~combined[F.JUDGE].isin(PSEUDO_JUDGES).to_numpy()],
            items=items[~items[F.JUDGE].isin(PSEUDO_JUDGES).to_numpy()],
        ),
        "cost": cost_section(stored),
        "self_consistency": self_consistency_section(stored, validated=True),
        "panel": None,
        "facts": facts_section(fact_labels, n_boot=n_boot, seed=seed, ci=ci),
    }
    if len(members) >= 2:
        report["panel"] = {
            "judge": PANEL_JUDGE,
            "members": members,
            "aggregate": settings["aggregate"],
            "n_rows": len(panel_rows),
            "cost_usd": float(stored.loc[stored[F.JUDGE].isin(members).to_numpy(), F.COST_USD].sum()),
            "inter_judge": inter_judge_agreement(stored, members, n_bins=n_bins, items=items, combined=combined),
        }
    if ratings is not None:
        r = F.validate_ratings(ratings)
        report["agreement"] = {
            "human_prefix": human_prefix,
            "preferences": preference_agreement(df, r, human_prefix=human_prefix, combined=combined),
            "scores": score_agreement(df, r, n_bins=n_bins, human_prefix=human_prefix, items=items),
            "alpha": score_alpha(real, r, n_bins=n_bins, human_prefix=human_prefix),
            "judges": judges_vs_humans(
                stored, r, members, settings["aggregate"], human_prefix=human_prefix, n_bins=n_bins
            ),
        }
    out = F.jsonable(report)
    assert isinstance(out, dict)
    _mark_imported(out, imported)
    return out


def _mark_imported(report: dict[str, Any], imported: Mapping[str, Any]) -> None:
    """``imported: true`` on every agreement row of a judge whose verdicts were imported (``false`` otherwise)."""
    agreement = report.get("agreement") or {}
    rows = list((agreement.get("preferences") or {}).get("judge_vs_human") or []) + list(agreement.get("scores") or [])
    for row in rows:
        row["imported"] = row.get(F.JUDGE) in imported


def warm_up() -> None:
    """Build one small report (scores, pairs, preferences, ranking, bias and agreement) and throw it away.

    The first report in a process otherwise pays for the numpy / scipy / pandas work done once per process
    (lazily imported submodules, first calls into compiled code); the API calls this at start-up so that its first
    ``GET /report`` costs what every later one does. About 0.2 s."""
    from judge_api.stats.synthetic import synthetic_judgments

    frame = synthetic_judgments(3000, seed=0)
    done = frame[frame[F.STATUS] == F.DONE]
    single = done[done[F.MODE] == F.SINGLE].head(200)
    pairs = done[done[F.MODE] == F.PAIRWISE].head(200)
    ratings = pd.concat(
        [
            pd.DataFrame(
                {
                    F.ITEM_ID: single[F.ITEM_ID],
                    "system": single[F.SYSTEM_A],
                    F.ASPECT: single[F.ASPECT],
                    "rater": "warm-up",
                    "kind": "score",
                    "value": single[F.SCORE],
                    F.SCALE_MIN: 1.0,
                    F.SCALE_MAX: 100.0,
                }
            ),
            pd.DataFrame(
                {
                    F.ITEM_ID: pairs[F.ITEM_ID],
                    "system": pairs[F.SYSTEM_A],
                    F.SYSTEM_B: pairs[F.SYSTEM_B],
                    F.ASPECT: pairs[F.ASPECT],
                    "rater": "warm-up",
                    "kind": "preference",
                    "value": np.sign(pairs[F.PREFERENCE].fillna(0.0)),
                }
            ),
        ],
        ignore_index=True,
    )
    build_report(frame, ratings, n_boot=20)


# --- rendering -------------------------------------------------------------------------------------
METRIC_LABELS = {"f1": "F1", "bleu-1": "BLEU-1", "bleu-2": "BLEU-2", "bertscore": "BERTScore"}
Cell = Callable[[Mapping[str, Any]], Any]


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != 0 and abs(v) < 10 ** (-digits):
            return f"{v:.1e}"
        return f"{v:.{digits}f}"
    return str(v)


def _ci(lo: Any, hi: Any, digits: int = 2) -> str:
    if lo is None or hi is None:
        return "-"
    return f"[{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


def _agreement_tables(agr: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    out: list[tuple[str, list[str], list[list[str]]]] = []
    prefs = agr.get("preferences") or {}
    rows = [
        [
            "judge: " + r["judge"] + (" (imported)" if r.get("imported") else ""),
            r["aspect"],
            f"{r['s1']['agree']}/{r['s1']['total']}",
            _fmt(r["s1"]["rate"], 3),
            f"{r['s2']['agree']}/{r['s2']['total']}",
            _fmt(r["s2"]["rate"], 3),
            _fmt(r["kappa_s1"], 3),
        ]
        for r in prefs.get("judge_vs_human") or []
    ]
    rows += [
        [
            "human vs human",
            r["aspect"],
            f"{r['s1']['agree']}/{r['s1']['total']}",
            _fmt(r["s1"]["rate"], 3),
            f"{r['s2']['agree']}/{r['s2']['total']}",
            _fmt(r["s2"]["rate"], 3),
            "-",
        ]
        for r in prefs.get("human_vs_human") or []
    ]
    out.append(
        (
            "Preference agreement with humans",
            ["who", "aspect", "S1", "S1 rate", "S2", "S2 rate", "kappa"],
            rows,
        )
    )
    out.append(
        (
            "Score agreement with humans",
            ["aspect", "judge", "n", "spearman", "kendall", "pearson", "QWK", "system spearman"],
            [
                [
                    r["aspect"],
                    r["judge"] + (" (imported)" if r.get("imported") else ""),
                    _fmt(r["n"]),
                    _fmt(r["spearman"], 3),
                    _fmt(r["kendall"], 3),
                    _fmt(r["pearson"], 3),
                    _fmt(r["qwk"], 3),
                    _fmt(r["system_spearman"], 3),
                ]
                for r in agr.get("scores") or []
            ],
        )
    )
    out.append(
        (
            "Krippendorff's alpha",
            [
                "aspect",
                "units",
                "humans",
                "interval (humans)",
                "ordinal (humans)",
                "interval (all)",
                "ordinal (all)",
            ],
            [
                [
                    r["aspect"],
                    _fmt(r["n_units"]),
                    _fmt(r["n_raters_human"]),
                    _fmt(r["alpha_interval_humans"], 3),
                    _fmt(r["alpha_ordinal_humans"], 3),
                    _fmt(r["alpha_interval_all"], 3),
                    _fmt(r["alpha_ordinal_all"], 3),
                ]
                for r in agr.get("alpha") or []
            ],
        )
    )
    if agr.get("judges"):
        out += _judges_human_tables(agr["judges"])
    return out


def _pair_cells(pair: Mapping[str, Any]) -> list[str]:
    if "spearman" in pair:
        return [_fmt(pair["spearman"], 3), _fmt(pair["qwk"], 3)]
    return [_fmt(pair["agreement"], 3), _fmt(pair["kappa"], 3)]


def _panel_tables(panel: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    inter = panel.get("inter_judge") or {}
    title = f"Judge panel: {panel['aggregate']} of {', '.join(panel['members'])} (cost ${_fmt(panel['cost_usd'], 4)})"
    rows: list[list[str]] = []
    for r in inter.get("scores") or []:
        alphas = [_fmt(r["alpha_interval"], 3), _fmt(r["alpha_ordinal"], 3)]
        rows.append([r["aspect"], "scores", "all", _fmt(r["n_units"]), *alphas, "-", "-"])
        rows += [
            [r["aspect"], "scores", f"{p['judge_a']} ~ {p['judge_b']}", _fmt(p["n"]), "-", "-", *_pair_cells(p)]
            for p in r["pairs"]
        ]
    for r in inter.get("preferences") or []:
        rows.append([r["aspect"], "pairwise", "all", _fmt(r["n_units"]), _fmt(r["alpha_nominal"], 3), "-", "-", "-"])
        rows += [
            [r["aspect"], "pairwise", f"{p['judge_a']} ~ {p['judge_b']}", _fmt(p["n"]), "-", "-", *_pair_cells(p)]
            for p in r["pairs"]
        ]
    return [
        (
            title + " - inter-judge agreement",
            ["aspect", "mode", "judges", "units", "alpha", "alpha (ordinal)", "spearman / agree", "QWK / kappa"],
            rows,
        )
    ]


def _judges_human_tables(judges: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    def figures(r: Mapping[str, Any]) -> list[str]:
        return [
            _fmt(r.get("n_scores")),
            _fmt(r.get("spearman"), 3),
            _fmt(r.get("qwk"), 3),
            _fmt(r.get("n_votes")),
            _fmt(r.get("s1"), 3),
            _fmt(r.get("kappa"), 3),
            _fmt(r.get("cost_usd"), 4),
        ]

    headers = ["n", "spearman", "QWK", "votes", "S1", "kappa", "cost USD"]
    return [
        (
            "Judges vs humans, with cost",
            ["judge", "aspect", *headers],
            [[r["judge"], r["aspect"], *figures(r)] for r in judges.get("matrix") or []],
        ),
        (
            "Judge sets vs humans (cheapest first)",
            ["judges", "aspect", *headers],
            [[" + ".join(r["judges"]), r["aspect"], *figures(r)] for r in judges.get("sets") or []],
        ),
    ]


def _tables(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of every table the renderers show."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    ci_label = f"{round(100 * float((report.get('meta') or {}).get('ci', 0.95)))}% CI"
    c = report.get("counts") or {}
    by_status = c.get("by_status") or {}
    out.append(
        (
            "Counts",
            ["rows", "items", *F.STATUSES],
            [
                [
                    _fmt(c.get("n_rows", 0)),
                    _fmt(c.get("n_items", 0)),
                    *[_fmt(by_status.get(s, 0)) for s in F.STATUSES],
                ]
            ],
        )
    )
    out.append(
        (
            "Scores (single mode)",
            [
                "system",
                "aspect",
                "judge",
                "n",
                "mean",
                ci_label,
                "median",
                "std",
                "failed",
                "unparseable",
                "pending",
                "cancelled",
            ],
            [
                [
                    r["system"],
                    r["aspect"],
                    r["judge"] + (" (imported)" if r.get("imported") else ""),
                    _fmt(r["n"]),
                    _fmt(r["mean"]),
                    _ci(r["ci_low"], r["ci_high"]),
                    _fmt(r["median"]),
                    _fmt(r["std"]),
                    _fmt(r["n_failed"]),
                    _fmt(r["n_unparseable"]),
                    _fmt(r["n_pending"]),
                    _fmt(r["n_cancelled"]),
                ]
                for r in report.get("scores") or []
            ],
        )
    )
    pt = report.get("paper_table") or {"aspects": [], "rows": []}
    metrics = pt.get("metrics") or []
    out.append(
        (
            "Paper table (mean scores)",
            [
                "judge",
                "system",
                *[METRIC_LABELS.get(m, m) for m in metrics],
                *[a.capitalize() for a in pt["aspects"]],
                "Average",
            ],
            [
                [
                    r["judge"] or "-",
                    r["system"],
                    *[_fmt((r.get("metrics") or {}).get(m), 3) for m in metrics],
                    *[_fmt(r["values"].get(a)) for a in pt["aspects"]],
                    _fmt(r["average"]),
                ]
                for r in pt["rows"]
            ],
        )
    )
    out.append(
        (
            "Paired comparisons (x - y)",
            ["aspect", "judge", "x", "y", "pairs", "mean diff", ci_label, "Wilcoxon p"],
            [
                [
                    r["aspect"],
                    r["judge"],
                    r["system_x"],
                    r["system_y"],
                    _fmt(r["n_pairs"]),
                    _fmt(r["mean_diff"]),
                    _ci(r["ci_low"], r["ci_high"]),
                    _fmt(r["p_value"], 3),
                ]
                for r in report.get("paired") or []
            ],
        )
    )
    out.append(
        (
            "Preferences (pairwise, orders combined)",
            ["a", "b", "aspect", "judge", "n", "win %", "tie %", "loss %", "incons.", "win rate", ci_label],
            [
                [
                    r["system_a"],
                    r["system_b"],
                    r["aspect"],
                    r["judge"] + (" (imported)" if r.get("imported") else ""),
                    _fmt(r["n"]),
                    _fmt(r["win_rate_pct"], 1),
                    _fmt(r["tie_rate_pct"], 1),
                    _fmt(r["loss_rate_pct"], 1),
                    _fmt(r["ties_inconsistent"]),
                    _fmt(r["win_rate"], 3),
                    _ci(r["win_rate_ci_low"], r["win_rate_ci_high"], 3),
                ]
                for r in report.get("preferences") or []
            ],
        )
    )
    out.append(
        (
            "Ranking (Bradley-Terry)",
            ["aspect", "judge", "rank", "system", "elo", ci_label, "comparisons"],
            [
                [
                    r["aspect"],
                    r["judge"],
                    _fmt(r["rank"]),
                    r["system"],
                    _fmt(r["elo"], 0),
                    _ci(r["elo_ci_low"], r["elo_ci_high"], 0),
                    _fmt(r["n_comparisons"]),
                ]
                for r in report.get("ranking") or []
            ],
        )
    )
    out += _economy_tables((report.get("run") or {}).get("economy"))
    panel = report.get("panel")
    if panel:
        out += _panel_tables(panel)
    agr = report.get("agreement")
    if agr:
        out += _agreement_tables(agr)
    bias = report.get("bias") or {}
    brows = []
    for judge, rec in (bias.get("per_judge") or {}).items():
        pos = rec.get("position") or {}
        swap = rec.get("swap") or {}
        length = rec.get("length") or {}
        use = rec.get("score_use") or {}
        fail = rec.get("failures") or {}
        brows.append(
            [
                judge,
                _fmt(pos.get("p_first_wins"), 3),
                _fmt(swap.get("rate"), 3),
                _fmt(length.get("p_longer_wins"), 3),
                _fmt(length.get("score_length_spearman"), 3),
                _fmt(use.get("distinct_fraction"), 3),
                _fmt(use.get("entropy_norm"), 3),
                _fmt(fail.get("unparseable_rate"), 3),
                _fmt(fail.get("failure_rate"), 3),
            ]
        )
    out.append(
        (
            "Bias diagnostics",
            [
                "judge",
                "P(first wins)",
                "swap flips",
                "P(longer wins)",
                "rho(score,len)",
                "scale used",
                "entropy",
                "unparseable",
                "failed",
            ],
            brows,
        )
    )
    out.append(
        (
            "Bias flags",
            ["flag", "value", "threshold", "message"],
            [[f["name"], _fmt(f["value"], 3), _fmt(f["threshold"], 3), f["message"]] for f in bias.get("flags") or []],
        )
    )
    cost = report.get("cost") or {}
    out.append(
        (
            "Cost",
            [
                "judgments",
                "cached",
                "input tokens",
                "from prompt cache",
                "output tokens",
                "cost USD",
                "list price USD",
                "saved by caching",
                "saved by batch",
                "mean latency ms",
            ],
            [
                [
                    _fmt(cost.get("n_finished", 0)),
                    _fmt(cost.get("n_cached", 0)),
                    _fmt(cost.get("input_tokens", 0)),
                    _fmt(cost.get("cached_input_tokens", 0)),
                    _fmt(cost.get("output_tokens", 0)),
                    _fmt(cost.get("cost_usd"), 4),
                    _fmt(cost.get("list_cost_usd", cost.get("cost_usd")), 4),
                    _fmt((cost.get("saved_usd") or {}).get("cache", 0.0), 4),
                    _fmt((cost.get("saved_usd") or {}).get("batch", 0.0), 4),
                    _fmt(cost.get("mean_latency_ms"), 0),
                ]
            ],
        )
    )
    out += _facts_tables(report.get("facts"), ci_label)
    sampled = report.get("self_consistency") or []
    if sampled:
        out.append(
            (
                "Self-consistency (samples per judgment)",
                ["mode", "system", "vs", "aspect", "judge", "keys", "samples", "mean conf.", "min conf."],
                [
                    [
                        r["mode"],
                        r["system_a"],
                        r.get("system_b") or "-",
                        r["aspect"],
                        r["judge"],
                        _fmt(r["keys"]),
                        _fmt(r["samples_per_key"], 1),
                        _fmt(r["mean_confidence"], 3),
                        _fmt(r["min_confidence"], 3),
                    ]
                    for r in sampled
                ],
            )
        )
    return out


def _facts_tables(facts: Mapping[str, Any] | None, ci_label: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Fact-check runs: contradiction and retention rates per system, and each system's most-contradicted facts."""
    if not facts:
        return []
    systems = facts.get("systems") or []
    rates = [
        [
            r["system"],
            r["judge"],
            r["rubric_id"],
            _fmt(r["n_responses"]),
            _fmt(r["n_unparseable"]),
            f"{r['supported']}/{r['contradicted']}/{r['not_addressed']}",
            _fmt(r["contradiction_rate"], 3),
            _ci(r["contradiction_rate_ci_low"], r["contradiction_rate_ci_high"], 3),
            _fmt(r["retention_rate"], 3),
            _ci(r["retention_rate_ci_low"], r["retention_rate_ci_high"], 3),
        ]
        for r in systems
    ]
    top = [
        [f["item_id"], f["fact_id"], f["source"], _fmt(f["count"]), ", ".join(f["systems"]), f["text"] or "-"]
        for f in facts.get("most_contradicted") or []
    ]
    return [
        (
            "Facts (fact-check)",
            [
                "system",
                "judge",
                "rubric",
                "responses",
                "unparseable",
                "sup/contr/n.a.",
                "contradiction rate",
                ci_label,
                "retention rate",
                ci_label,
            ],
            rates,
        ),
        ("Most-contradicted facts", ["item", "fact", "source", "count", "systems", "text"], top),
    ]


def _economy_tables(economy: Mapping[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """Adaptive runs: calls used against round robin / a fixed sample count, why planning stopped, the ranking
    with its confidence-sequence intervals."""
    if not economy:
        return []
    out: list[tuple[str, list[str], list[list[str]]]] = []
    pairing = economy.get("pairing")
    if pairing:
        target = pairing.get("target") or {}
        out.append(
            (
                "Adaptive pairing",
                ["stop", "calls", "round robin", "share", "comparisons", "confidence", "by"],
                [
                    [
                        str(pairing.get("stop") or "running"),
                        _fmt(pairing.get("calls")),
                        _fmt(pairing.get("round_robin_calls")),
                        "-" if pairing.get("share") is None else f"{100 * pairing['share']:.1f}%",
                        f"{pairing.get('comparisons')}/{pairing.get('round_robin_comparisons')}",
                        _fmt(pairing.get("confidence"), 3),
                        f"{target.get('aspect', '-')} / {target.get('judge', '-')}",
                    ]
                ],
            )
        )
        gaps = {g["upper"]: g for g in pairing.get("gaps") or []}
        out.append(
            (
                "Adaptive ranking (intervals: the stopping rule's confidence sequence)",
                ["rank", "system", "strength", "interval", "comparisons", "vs next", "z / needed"],
                [
                    [
                        _fmt(r["rank"]),
                        r["system"],
                        _fmt(r["strength"], 3),
                        _ci(r.get("ci_low"), r.get("ci_high"), 3),
                        _fmt(r.get("comparisons")),
                        "-" if r["system"] not in gaps else ("separated" if gaps[r["system"]]["separated"] else "open"),
                        "-"
                        if r["system"] not in gaps
                        else f"{_fmt(gaps[r['system']]['z'], 2)} / {_fmt(gaps[r['system']]['z_needed'], 2)}",
                    ]
                    for r in pairing.get("ranking") or []
                ],
            )
        )
    samples = economy.get("samples")
    if samples:
        histogram = ", ".join(f"{k}: {v}" for k, v in (samples.get("histogram") or {}).items())
        out.append(
            (
                "Adaptive samples",
                ["judgments", "samples", "fixed count", "fixed samples", "saving", "samples taken: judgments"],
                [
                    [
                        _fmt(samples.get("judgments")),
                        _fmt(samples.get("samples")),
                        _fmt(samples.get("fixed")),
                        _fmt(samples.get("fixed_samples")),
                        f"{100 * float(samples.get('saving') or 0):.1f}%",
                        histogram or "-",
                    ]
                ],
            )
        )
    return out


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def report_to_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: one ``##`` section with a pipe table per part (empty parts say so)."""
    lines = ["# Evaluation report", ""]
    for title, headers, rows in _tables(report):
        lines += [f"## {title}", ""]
        if not rows:
            lines += ["_no data_", ""]
            continue
        lines.append("| " + " | ".join(_escape(h) for h in headers) + " |")
        lines.append("|" + "|".join("---" for _ in headers) + "|")
        lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _fixed(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    numeric = [all(_looks_numeric(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *[line(r) for r in rows]]


def _looks_numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return cell == "-"
    return True


def _plain(tables: list[tuple[str, list[str], list[list[str]]]]) -> str:
    lines: list[str] = []
    for title, headers, rows in tables:
        lines += [title, "=" * len(title)]
        lines += _fixed(headers, rows) if rows else ["(no data)"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report_to_table(report: Mapping[str, Any]) -> str:
    """The report as fixed-width plain text (one titled block per part)."""
    return _plain(_tables(report))


def agreement_to_table(agreement: Mapping[str, Any] | None) -> str:
    """The report's ``agreement`` section alone as fixed-width plain text."""
    if not agreement:
        return "No agreement figures: the run has no human ratings.\n"
    return _plain(_agreement_tables(agreement))
