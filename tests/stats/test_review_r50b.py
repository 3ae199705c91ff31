"""Review r50b of d0f7841..a161588 (e7f0f55: the agreement sections' judge scores cut to the rated items; a161588).

Promise of e7f0f55: "figures unchanged" -- every figure of the report as before, for every input. ``score_alpha``
now drops the judges' scores of items no human rated *before* grouping by aspect. Before, those rows still made
their aspect a group, so an aspect that only judges scored (on items no human rated) had its alpha row (n_units 0,
every alpha None); now that row is gone from ``report["agreement"]["alpha"]``. The comment's claim "only units some
human rated (per aspect) count afterwards" holds for the units, not for the aspects the loop iterates over.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from judge_api.stats.agreement import score_alpha
from judge_api.stats.report import build_report

EMPTY_ALPHA_ROW = {
    "n_units": 0,
    "n_raters_human": 0,
    "n_judges": 0,
    "alpha_interval_humans": None,
    "alpha_ordinal_humans": None,
    "alpha_interval_all": None,
    "alpha_ordinal_all": None,
}


def _judgments(items: list[str], aspects: tuple[str, ...]) -> pd.DataFrame:
    rows = []
    for i, item in enumerate(items):
        for s, system in enumerate(("A", "B", "C")):
            for aspect in aspects:
                for judge in ("j1", "j2"):
                    rows.append(
                        {
                            "item_id": item,
                            "mode": "single",
                            "system_a": system,
                            "aspect": aspect,
                            "judge": judge,
                            "status": "done",
                            "score": float((i + 2 * s + (judge == "j2")) % 5 + 1),
                            "scale_min": 1.0,
                            "scale_max": 5.0,
                        }
                    )
    return pd.DataFrame(rows)


def _ratings(items: list[str], aspect: str) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "item_id": item,
                "system": system,
                "aspect": aspect,
                "rater": rater,
                "kind": "score",
                "value": float((i + s + k) % 5 + 1),
                "scale_min": 1.0,
                "scale_max": 5.0,
            }
            for i, item in enumerate(items)
            for s, system in enumerate(("A", "B", "C"))
            for k, rater in enumerate(("h1", "h2"))
        ]
    )


def _none_if_nan(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}


def test_score_alpha_keeps_the_row_of_an_aspect_only_judges_scored_on_unrated_items() -> None:
    """Judges score "coherence" on items 1-4 (humans rated 1-4) and "fluency" on items 5-6 only (no human rated
    them). 4031ba8 (and d0f7841) gave a "fluency" row with n_units 0 and no alpha; a161588 gives no "fluency" row:
    its judge rows are filtered out by item (``isin`` on the rated items) before ``groupby(aspect)``."""
    rated = ["1", "2", "3", "4"]
    frame = pd.concat([_judgments(rated, ("coherence",)), _judgments(["5", "6"], ("fluency",))], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = score_alpha(frame, _ratings(rated, "coherence"))
    assert list(out["aspect"]) == ["coherence", "fluency"]
    fluency = _none_if_nan(out[out["aspect"] == "fluency"].iloc[0].to_dict())
    assert fluency == {"aspect": "fluency", **EMPTY_ALPHA_ROW}


def test_report_alpha_rows_unchanged_when_the_ratings_share_no_item_with_the_judges() -> None:
    """Ratings of "coherence" on items the judges never scored (e.g. ratings of another run's items): every judge
    score is filtered out, ``both`` is the humans' rows only, and the report's alpha table loses the
    "engagingness" row (n_units 0) that 4031ba8 gave: 2 rows before, 1 row now."""
    frame = _judgments(["1", "2", "3", "4"], ("coherence", "engagingness"))
    ratings = _ratings(["7", "8", "9"], "coherence")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alpha = build_report(frame, ratings, n_boot=10, seed=0)["agreement"]["alpha"]
    assert [row["aspect"] for row in alpha] == ["coherence", "engagingness"]
    assert {k: alpha[1][k] for k in EMPTY_ALPHA_ROW} == EMPTY_ALPHA_ROW


def test_alpha_units_do_not_collide_on_the_separator() -> None:
    """F2 of the review: item "a\\x1fb" x system "c0" and item "a" x system "b\\x1fc0" are two units; the joined
    string key made them one, so a judge's score of the second counted on the humans' unit of the first."""
    judgments = pd.DataFrame(
        [
            {
                "item_id": "a",
                "mode": "single",
                "system_a": "b\x1fc0",
                "aspect": "coherence",
                "judge": "j1",
                "status": "done",
                "score": 3.0,
                "scale_min": 1.0,
                "scale_max": 5.0,
            }
        ]
    )
    ratings = pd.DataFrame(
        [
            {
                "item_id": "a\x1fb",
                "system": "c0",
                "aspect": "coherence",
                "rater": rater,
                "kind": "score",
                "value": value,
                "scale_min": 1.0,
                "scale_max": 5.0,
            }
            for rater, value in (("h1", 2.0), ("h2", 4.0))
        ]
    )
    row = score_alpha(judgments, ratings).iloc[0]
    assert row["n_units"] == 1
    assert row["n_judges"] == 0  # the judge never scored the humans' unit
    assert row["alpha_interval_all"] == row["alpha_interval_humans"]
