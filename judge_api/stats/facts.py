"""The report's facts section: contradiction and retention rates per system, and the most-contradicted facts.

Input: the *fact labels* frame (``docs/data-contract.md``), one row per fact labelled by a finished fact-check
judgment (a rubric of kind ``facts``, docs/facts.md), plus one row with ``fact_id`` None for a judgment that labelled
no fact (an empty fact sheet, or a judgment that is ``unparseable`` / ``failed``).

Per (rubric, aspect, judge, system), over its ``done`` judgments:

* ``contradiction_rate``: per response, contradicted / facts in the sheet (0 for an empty sheet); averaged over an
  item's responses (self-consistency samples), then over items. CI: percentile bootstrap over items.
* ``retention_rate``: pooled over the system's responses, supported / (supported + contradicted); None when no fact
  was addressed. CI: percentile bootstrap over items of the same pooled ratio (replicates in which no fact is
  addressed are left out).
* ``addressed_rate``: pooled over the system's responses whose sheet has a fact, the share that addressed at least
  one (labelled one ``supported`` or ``contradicted``); None without such responses. A response that addressed none
  has score n/a (``workers.factcheck``), counted in ``n_na`` with the responses to an empty sheet. CI: percentile
  bootstrap over items of the same pooled ratio. "Tell me more!" to every turn has an addressed rate of 0, whatever
  its contradiction rate.
* ``most_contradicted``: the facts (item, fact id, text, source) the most judgments labelled ``contradicted``, most
  first (ties by item and fact id), at most ``top``.

The section's own ``most_contradicted`` counts over every system (with the systems that contradicted each fact),
at most ``2 * top``.

Every bootstrap draws from ``rng_for(seed, "facts", figure, rubric, aspect, judge, system)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats.bootstrap import bootstrap_means, bootstrap_ratio_ci, percentile_ci, rng_for

FACT_COLUMNS = [
    "judgment_id",
    "item_id",
    "system",
    "judge",
    "rubric_id",
    "aspect",
    "sample_index",
    "status",
    "fact_id",
    "text",
    "source",
    "label",
    "evidence",
]
LABELS = ("supported", "contradicted", "not_addressed")
_KEY = ["rubric_id", "aspect", "judge", "system"]


def empty_fact_labels() -> pd.DataFrame:
    return pd.DataFrame(columns=FACT_COLUMNS)


def response_figures(labels: pd.DataFrame) -> pd.DataFrame:
    """One row per ``done`` judgment: its key, item, label counts and contradiction rate."""
    done = labels[labels["status"] == "done"]
    columns = ["judgment_id", "item_id", *_KEY, "n_facts", *LABELS, "contradiction_rate", "addressed"]
    if done.empty:
        return pd.DataFrame(columns=columns)
    counted = done.assign(
        n_facts=done["fact_id"].notna().astype(int),
        **{label: (done["label"] == label).astype(int) for label in LABELS},
    )
    per = counted.groupby(["judgment_id", "item_id", *_KEY], sort=True, dropna=False)[["n_facts", *LABELS]].sum()
    per = per.reset_index()
    per["contradiction_rate"] = np.where(
        per["n_facts"] > 0, per["contradicted"] / per["n_facts"].where(per["n_facts"] > 0, 1), 0.0
    )
    per["addressed"] = (per["supported"] + per["contradicted"]) > 0
    return per[columns]


def _top_facts(rows: pd.DataFrame, top: int, *, with_systems: bool = False) -> list[dict[str, Any]]:
    hit = rows[rows["label"] == "contradicted"]
    if hit.empty or top <= 0:
        return []
    counts = (
        hit.groupby(["item_id", "fact_id"], sort=True)
        .agg(
            text=("text", "first"),
            source=("source", "first"),
            count=("judgment_id", "size"),
            systems=("system", lambda s: sorted(set(map(str, s)))),
        )
        .reset_index()
        .sort_values(["count", "item_id", "fact_id"], ascending=[False, True, True], kind="stable")
    )
    return [
        {
            "item_id": str(r["item_id"]),
            "fact_id": str(r["fact_id"]),
            "text": None if pd.isna(r["text"]) else str(r["text"]),
            "source": str(r["source"]),
            "count": int(r["count"]),
            **({"systems": list(r["systems"])} if with_systems else {}),
        }
        for r in counts.head(top).to_dict("records")
    ]


def facts_section(
    labels: pd.DataFrame | None, *, n_boot: int = 1000, seed: int = 0, ci: float = 0.95, top: int = 5
) -> dict[str, Any] | None:
    """The facts section (see the module docstring); None when the run has no fact-check judgment."""
    if labels is None or labels.empty:
        return None
    figures = response_figures(labels)
    status = labels.drop_duplicates("judgment_id")
    systems = []
    for key, rows in labels.groupby(_KEY, sort=True, dropna=False):
        key_t = tuple(str(k) for k in key)
        mine = figures
        for column, value in zip(_KEY, key, strict=True):
            mine = mine[mine[column] == value]
        statuses = status
        for column, value in zip(_KEY, key, strict=True):
            statuses = statuses[statuses[column] == value]
        mine = mine.assign(
            eligible=(mine["n_facts"] > 0).astype(int), addressed=mine["addressed"].astype(bool).astype(int)
        )
        per_item = mine.groupby("item_id", sort=True).agg(
            rate=("contradiction_rate", "mean"),
            supported=("supported", "sum"),
            contradicted=("contradicted", "sum"),
            eligible=("eligible", "sum"),
            addressed_responses=("addressed", "sum"),
        )
        rates = per_item["rate"].to_numpy(dtype="float64")
        supported = per_item["supported"].to_numpy(dtype="float64")
        addressed = supported + per_item["contradicted"].to_numpy(dtype="float64")
        rate_low, rate_high = percentile_ci(bootstrap_means(rates, n_boot, rng_for(seed, "facts", "rate", *key_t)), ci)
        retention = float(supported.sum() / addressed.sum()) if addressed.sum() > 0 else None
        ret_low, ret_high = (
            bootstrap_ratio_ci(supported, addressed, n_boot, rng_for(seed, "facts", "retention", *key_t), ci)
            if retention is not None
            else (None, None)
        )
        answered = per_item["addressed_responses"].to_numpy(dtype="float64")
        eligible = per_item["eligible"].to_numpy(dtype="float64")
        addressed_rate = float(answered.sum() / eligible.sum()) if eligible.sum() > 0 else None
        adr_low, adr_high = (
            bootstrap_ratio_ci(answered, eligible, n_boot, rng_for(seed, "facts", "addressed", *key_t), ci)
            if addressed_rate is not None
            else (None, None)
        )
        systems.append(
            {
                "rubric_id": key_t[0],
                "aspect": key_t[1],
                "judge": key_t[2],
                "system": key_t[3],
                "n_items": len(per_item),
                "n_responses": len(mine),
                "n_unparseable": int((statuses["status"] == "unparseable").sum()),
                "n_failed": int((statuses["status"] == "failed").sum()),
                "n_labels": int(mine["n_facts"].sum()),
                **{label: int(mine[label].sum()) for label in LABELS},
                "contradiction_rate": float(rates.mean()) if rates.size else None,
                "contradiction_rate_ci_low": rate_low,
                "contradiction_rate_ci_high": rate_high,
                "retention_rate": retention,
                "retention_rate_ci_low": ret_low,
                "retention_rate_ci_high": ret_high,
                "n_na": int(len(mine) - mine["addressed"].sum()),
                "addressed_rate": addressed_rate,
                "addressed_rate_ci_low": adr_low,
                "addressed_rate_ci_high": adr_high,
                "most_contradicted": _top_facts(rows[rows["status"] == "done"], top),
            }
        )
    return {
        "ci_method": "contradiction rate: mean over items, percentile bootstrap over items; retention rate: pooled "
        "supported / (supported + contradicted), percentile bootstrap over items; addressed rate: pooled responses "
        "that addressed a fact / responses with a fact to address, percentile bootstrap over items",
        "systems": systems,
        "most_contradicted": _top_facts(labels[labels["status"] == "done"], 2 * top, with_systems=True),
    }
