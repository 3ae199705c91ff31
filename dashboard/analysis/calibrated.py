"""The Calibrated page's frames, from the report's ``calibrated`` section (docs/calibration.md) and the run's label
queue: the judge-only, human-only and calibrated intervals per system on the humans' scale, the gap between the
judge and the people, the notes of the rows that have no estimate, and the items to label next."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import pandas as pd

JUDGE_ONLY = "judge only (mapped to the human scale)"
HUMAN_ONLY = "human only"
CALIBRATED = "calibrated (PPI++)"
INTERVALS = (JUDGE_ONLY, HUMAN_ONLY, CALIBRATED)
INTERVAL_COLUMNS = ["judge", "aspect", "system", "interval", "estimate", "ci_low", "ci_high", "n"]
GAP_COLUMNS = ["judge", "aspect", "system", "judge only", "people (calibrated)", "gap", "n_labeled", "n_judged"]
NOTE_COLUMNS = ["part", "judge", "aspect", "which", "note"]
LABEL_NEXT_COLUMNS = ["position", "item_id", "inclusion_probability", "annotate"]


def _key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(row.get("judge")), str(row.get("aspect")), str(row.get("system"))


def _mapped(value: Any, source: tuple[float, float], target: tuple[float, float]) -> float | None:
    """The fixed linear map of the judge's stated scale onto the humans' (as the section maps the judge's scores)."""
    if value is None or pd.isna(value):
        return None
    (s_lo, s_hi), (t_lo, t_hi) = source, target
    return t_lo + (float(value) - s_lo) * (t_hi - t_lo) / (s_hi - s_lo)


def judge_only_mapped(report: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The report's own (judge-only) mean and interval of a calibrated row's judge x aspect x system, on the row's
    human scale; None when the judge's or the humans' scale is unknown."""
    own = {_key(r): r for r in report.get("scores") or []}.get(_key(row))
    scale = row.get("human_scale")
    if own is None or not scale or own.get("scale_min") is None or own.get("scale_max") is None:
        return None
    source = (float(own["scale_min"]), float(own["scale_max"]))
    if not source[1] > source[0]:
        return None
    target = (float(scale[0]), float(scale[1]))
    return {
        "estimate": _mapped(own.get("mean"), source, target),
        "ci_low": _mapped(own.get("ci_low"), source, target),
        "ci_high": _mapped(own.get("ci_high"), source, target),
        "n": own.get("n"),
    }


def interval_frame(report: Mapping[str, Any]) -> pd.DataFrame:
    """One row per judge x aspect x system x interval (judge only, human only, calibrated) that has an estimate."""
    section = report.get("calibrated") or {}
    rows: list[dict[str, Any]] = []
    for row in section.get("scores") or []:
        base = {"judge": row["judge"], "aspect": row["aspect"], "system": row["system"]}
        judge = judge_only_mapped(report, row)
        human = row.get("human_only") or {}
        for name, part, n in (
            (JUDGE_ONLY, judge or {}, (judge or {}).get("n")),
            (HUMAN_ONLY, human, row.get("n_labeled")),
            (CALIBRATED, row, row.get("n_labeled")),
        ):
            if part.get("estimate") is not None:
                rows.append(
                    {**base, "interval": name, **{k: part.get(k) for k in ("estimate", "ci_low", "ci_high")}, "n": n}
                )
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)


def gap_frame(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per system: the judge's own mean (mapped) against the people's calibrated estimate, and the gap (judge −
    people) on the humans' scale; only rows that have both."""
    section = report.get("calibrated") or {}
    rows = []
    for row in section.get("scores") or []:
        judge = judge_only_mapped(report, row)
        if judge is None or judge["estimate"] is None or row.get("estimate") is None:
            continue
        rows.append(
            {
                "judge": row["judge"],
                "aspect": row["aspect"],
                "system": row["system"],
                "judge only": judge["estimate"],
                "people (calibrated)": row["estimate"],
                "gap": judge["estimate"] - float(row["estimate"]),
                "n_labeled": row.get("n_labeled"),
                "n_judged": row.get("n_judged"),
            }
        )
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def gap_sentence(gaps: pd.DataFrame, scale: tuple[float, float] | None) -> str:
    """The largest gap between the judge and the people in words ("" without one)."""
    if gaps.empty:
        return ""
    worst = gaps.loc[gaps["gap"].abs().idxmax()]
    on = f" on the people's {scale[0]:g}–{scale[1]:g} scale" if scale else ""
    side = "above" if worst["gap"] > 0 else "below"
    return (
        f"The judge puts **{worst['system']}** ({worst['aspect']}) {abs(worst['gap']):.3g} {side} what the people's "
        f"labels give{on}; the judge's own interval is about the judge, the calibrated one about the people."
    )


def human_scale(report: Mapping[str, Any], judge: str, aspect: str) -> tuple[float, float] | None:
    for row in (report.get("calibrated") or {}).get("scores") or []:
        if str(row["judge"]) == judge and str(row["aspect"]) == aspect and row.get("human_scale"):
            return float(row["human_scale"][0]), float(row["human_scale"][1])
    return None


def notes_frame(report: Mapping[str, Any]) -> pd.DataFrame:
    """Every row without an estimate, with the note that says why (and how many labels it needs)."""
    section = report.get("calibrated") or {}
    rows = []
    for part, key in (("score", "scores"), ("difference", "differences"), ("win rate", "win_rates")):
        for row in section.get(key) or []:
            if row.get("estimate") is None and row.get("note"):
                which = row.get("system") or f"{row.get('system_a')} vs {row.get('system_b')}"
                rows.append(
                    {"part": part, "judge": row["judge"], "aspect": row["aspect"], "which": which, "note": row["note"]}
                )
    return pd.DataFrame(rows, columns=NOTE_COLUMNS)


def annotate_link(run_id: str, item_id: str) -> str:
    return "annotate?" + urlencode({"run": run_id, "item": item_id})


def label_next_frame(queue: Mapping[str, Any] | None) -> pd.DataFrame:
    """The queue's items nobody has labeled yet, in the queue's order (label them in that order: a uniform queue's
    labeled prefix stays a random sample), each with a link to Annotate."""
    if not queue:
        return pd.DataFrame(columns=LABEL_NEXT_COLUMNS)
    run_id = str(queue.get("run_id"))
    rows = [
        {
            "position": i["position"],
            "item_id": str(i["item_id"]),
            "inclusion_probability": i.get("inclusion_probability"),
            "annotate": annotate_link(run_id, str(i["item_id"])),
        }
        for i in queue.get("items") or []
        if not i.get("labeled")
    ]
    return pd.DataFrame(rows, columns=LABEL_NEXT_COLUMNS)
