"""The tables of who judged: the judge panel (its coverage and the inter-judge agreement) and the agreement
with human raters (preferences, scores, Krippendorff's alpha, judges and judge sets vs humans, with cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judge_api.stats.panel import PANEL_JUDGE
from judge_api.stats.render.cells import fmt


def agreement_tables(agr: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    out: list[tuple[str, list[str], list[list[str]]]] = []
    prefs = agr.get("preferences") or {}
    rows = [
        [
            "judge: " + r["judge"] + (" (imported)" if r.get("imported") else ""),
            r["aspect"],
            f"{r['s1']['agree']}/{r['s1']['total']}",
            fmt(r["s1"]["rate"], 3),
            f"{r['s2']['agree']}/{r['s2']['total']}",
            fmt(r["s2"]["rate"], 3),
            fmt(r["kappa_s1"], 3),
        ]
        for r in prefs.get("judge_vs_human") or []
    ]
    rows += [
        [
            "human vs human",
            r["aspect"],
            f"{r['s1']['agree']}/{r['s1']['total']}",
            fmt(r["s1"]["rate"], 3),
            f"{r['s2']['agree']}/{r['s2']['total']}",
            fmt(r["s2"]["rate"], 3),
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
                    fmt(r["n"]),
                    fmt(r["spearman"], 3),
                    fmt(r["kendall"], 3),
                    fmt(r["pearson"], 3),
                    fmt(r["qwk"], 3),
                    fmt(r["system_spearman"], 3),
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
                    fmt(r["n_units"]),
                    fmt(r["n_raters_human"]),
                    fmt(r["alpha_interval_humans"], 3),
                    fmt(r["alpha_ordinal_humans"], 3),
                    fmt(r["alpha_interval_all"], 3),
                    fmt(r["alpha_ordinal_all"], 3),
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
        return [fmt(pair["spearman"], 3), fmt(pair["qwk"], 3)]
    return [fmt(pair["agreement"], 3), fmt(pair["kappa"], 3)]


def _coverage_text(coverage: Mapping[str, Any] | None) -> str:
    if not coverage or not coverage.get("n_units"):
        return "coverage -"
    pct = 100.0 * coverage["n_verdicts"] / coverage["n_units"]
    return f"coverage {coverage['n_verdicts']}/{coverage['n_units']} units ({pct:.1f} %)"


def panel_judge_label(report: Mapping[str, Any]) -> str:
    """How the panel's rows are labelled in the tables: its name and its coverage, so no panel figure is read
    without knowing how many units it stands on."""
    panel = report.get("panel") or {}
    return f"{PANEL_JUDGE} ({_coverage_text(panel.get('coverage'))})" if panel else PANEL_JUDGE


def who(row: Mapping[str, Any], panel_label: str) -> str:
    judge = row.get("judge")
    if not judge:
        return "-"
    if judge == PANEL_JUDGE:
        return panel_label
    return str(judge) + (" (imported)" if row.get("imported") else "")


def panel_tables(panel: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    inter = panel.get("inter_judge") or {}
    coverage = panel.get("coverage") or {}
    quorum = f"quorum {panel.get('quorum', '-')} of {len(panel['members'])}"
    title = (
        f"Judge panel: {panel['aggregate']} of {', '.join(panel['members'])}; {quorum}; {_coverage_text(coverage)} "
        f"(cost ${fmt(panel['cost_usd'], 4)})"
    )
    out: list[tuple[str, list[str], list[list[str]]]] = [
        (
            title + " - coverage (units with a panel verdict)",
            ["mode", "aspect", "units", "panel verdicts", "below quorum", "split, a member missing", "coverage"],
            [
                [
                    r["mode"],
                    r["aspect"],
                    fmt(r["n_units"]),
                    fmt(r["n_verdicts"]),
                    fmt(r["n_below_quorum"]),
                    fmt(r["n_split"]),
                    fmt(r["coverage"], 3),
                ]
                for r in coverage.get("by_aspect") or []
            ],
        )
    ]
    rows: list[list[str]] = []
    for r in inter.get("scores") or []:
        alphas = [fmt(r["alpha_interval"], 3), fmt(r["alpha_ordinal"], 3)]
        rows.append([r["aspect"], "scores", "all", fmt(r["n_units"]), *alphas, "-", "-"])
        rows += [
            [r["aspect"], "scores", f"{p['judge_a']} ~ {p['judge_b']}", fmt(p["n"]), "-", "-", *_pair_cells(p)]
            for p in r["pairs"]
        ]
    for r in inter.get("preferences") or []:
        rows.append([r["aspect"], "pairwise", "all", fmt(r["n_units"]), fmt(r["alpha_nominal"], 3), "-", "-", "-"])
        rows += [
            [r["aspect"], "pairwise", f"{p['judge_a']} ~ {p['judge_b']}", fmt(p["n"]), "-", "-", *_pair_cells(p)]
            for p in r["pairs"]
        ]
    out.append(
        (
            title + " - inter-judge agreement",
            ["aspect", "mode", "judges", "units", "alpha", "alpha (ordinal)", "spearman / agree", "QWK / kappa"],
            rows,
        )
    )
    return out


def _judges_human_tables(judges: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    def figures(r: Mapping[str, Any]) -> list[str]:
        return [
            fmt(r.get("n_scores")),
            fmt(r.get("spearman"), 3),
            fmt(r.get("qwk"), 3),
            fmt(r.get("n_votes")),
            fmt(r.get("s1"), 3),
            fmt(r.get("kappa"), 3),
            fmt(r.get("cost_usd"), 4),
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
