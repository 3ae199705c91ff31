"""Memory audit (a): lexical precision / recall / F1 of a generated memory against gold memory, no judge needed.

The recursive-summarisation paper scores generated memory against gold memory (MSC's per-session personas) with
precision, recall and F1. Here that is the bag-of-words overlap of the two texts: lower-cased tokens
``[a-z0-9]+(?:'[a-z0-9]+)*`` (after NFKC), overlap = the sum over tokens of the smaller of the two counts (clipped),
``precision = overlap / generated tokens``, ``recall = overlap / gold tokens``, ``F1 = 2PR / (P + R)``; a side with
no tokens gives 0 for the figures that divide by it, and F1 is 0 when P + R is 0.

Per system the three figures are averaged over items, with percentile bootstrap CIs over items
(``judge_api/stats/bootstrap.py``; one generator per system and figure from the report seed).

Memory audit (b), ``judged_memory_audit``: the same figures at the level of facts, from a judge's labels (the
``memory-audit`` rubric), and the proportions of the paper's error types (see that function). ``audit_rows`` turns
memory-audit judgments into its input; ``dialogue-judge memory-audit --judge`` prints its table and the run report's
``memory_audit`` section (``memory_audit_section``) carries the same figures per rubric x aspect x judge x system.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats.bootstrap import bootstrap_mean_ci, bootstrap_ratio_ci, rng_for

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
FIGURES = ("precision", "recall", "f1")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def lexical_prf(generated: str, gold: str) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``generated`` against ``gold`` (see the module docstring)."""
    gen, ref = Counter(tokens(generated)), Counter(tokens(gold))
    overlap = sum((gen & ref).values())
    precision = overlap / sum(gen.values()) if gen else 0.0
    recall = overlap / sum(ref.values()) if ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def memory_scores(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (item_id, system): the three figures. ``rows`` has item_id, system, generated, gold."""
    figures = [lexical_prf(g, r) for g, r in zip(rows["generated"], rows["gold"], strict=True)]
    out = rows[["item_id", "system"]].copy()
    for index, name in enumerate(FIGURES):
        out[name] = [f[index] for f in figures]
    return out


def memory_audit(rows: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Per system: n items, mean precision / recall / F1 and their bootstrap CIs (``<figure>_low/_high``)."""
    columns = ["system", "n"] + [f"{f}{s}" for f in FIGURES for s in ("", "_low", "_high")]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    scored = memory_scores(rows)
    records = []
    for system, group in scored.groupby("system", sort=True):
        record: dict[str, object] = {"system": system, "n": len(group)}
        for name in FIGURES:
            values = group[name].to_numpy(dtype=float)
            low, high = bootstrap_mean_ci(values, n_boot=n_boot, rng=rng_for(seed, "memory", system, name), ci=ci)
            record.update({name: float(values.mean()), f"{name}_low": low, f"{name}_high": high})
        records.append(record)
    return pd.DataFrame.from_records(records, columns=columns)


# -- memory audit (b): judge-based, fact level -----------------------------------------------------------------------
ERROR_TYPES = ("fabricated", "wrong_relationship", "missing")
"""The paper's taxonomy of generated-memory errors: fabricated facts, incorrect relationships, missing details."""
AUDIT_KEY = ["rubric_id", "aspect", "judge"]
AUDIT_COLUMNS = ["item_id", "system", *AUDIT_KEY, "status", *FIGURES, *ERROR_TYPES]
FINISHED = ("done", "unparseable", "failed")


def audit_rows(judgments: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The input of ``judged_memory_audit`` from memory-audit judgments (dicts with item_id, system_a, rubric_id,
    aspect, judge, status, details, as the API lists them): one row per finished judgment; a ``done`` judgment
    without figures in its details counts as unparseable."""
    records = []
    for row in judgments:
        if row["status"] not in FINISHED:
            continue
        details = row.get("details") or {}
        errors = details.get("errors") or {}
        records.append(
            {
                "item_id": row["item_id"],
                "system": row["system_a"],
                **{key: row.get(key) for key in AUDIT_KEY},
                "status": row["status"] if details or row["status"] != "done" else "unparseable",
                **{name: details.get(name) for name in FIGURES},
                **{kind: errors.get(kind, 0) for kind in ERROR_TYPES},
            }
        )
    return pd.DataFrame.from_records(records, columns=AUDIT_COLUMNS)


def judged_memory_audit(rows: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Per system, from memory-audit judgments (``workers/memoryaudit.py``): fact-level precision / recall / F1
    averaged over items (an item's judgments, e.g. samples, averaged first) with percentile bootstrap CIs over items,
    and the error-type proportions: each type's pooled count over all the system's errors, with bootstrap CIs over
    items of the same ratio.

    ``rows``: one row per finished judgment with item_id, system, status (``done`` rows carry precision, recall,
    f1 and the counts fabricated, wrong_relationship, missing; ``audit_rows`` builds them). Output columns: system,
    n (items with a parsed audit), n_parsed (parsed judgments), n_unparseable (judgments without a parsed audit:
    unparseable or failed), n_failed (of those, failed), the three figures with ``_low`` / ``_high``, the error
    counts, ``<type>_share`` with ``_low`` / ``_high``.
    """
    columns = (
        ["system", "n", "n_parsed", "n_unparseable", "n_failed"]
        + [f"{f}{s}" for f in FIGURES for s in ("", "_low", "_high")]
        + list(ERROR_TYPES)
        + [f"{t}_share{s}" for t in ERROR_TYPES for s in ("", "_low", "_high")]
    )
    if rows.empty:
        return pd.DataFrame(columns=columns)
    records = []
    for system, group in rows.groupby("system", sort=True):
        done = group[group["status"] == "done"]
        per_item = done.groupby("item_id", sort=True).agg(
            **{f: (f, "mean") for f in FIGURES}, **{t: (t, "sum") for t in ERROR_TYPES}
        )
        record: dict[str, object] = {
            "system": system,
            "n": len(per_item),
            "n_parsed": len(done),
            "n_unparseable": int((group["status"] != "done").sum()),
            "n_failed": int((group["status"] == "failed").sum()),
        }
        for name in FIGURES:
            values = per_item[name].to_numpy(dtype=float)
            low, high = bootstrap_mean_ci(
                values, n_boot=n_boot, rng=rng_for(seed, "memory-judged", system, name), ci=ci
            )
            record.update(
                {name: float(values.mean()) if values.size else None, f"{name}_low": low, f"{name}_high": high}
            )
        counts = {t: per_item[t].to_numpy(dtype=float) for t in ERROR_TYPES}
        errors = sum(counts.values()) if len(per_item) else np.zeros(0)
        total = float(np.sum(errors))
        for kind in ERROR_TYPES:
            record[kind] = int(counts[kind].sum())
            share = float(counts[kind].sum()) / total if total else None
            low, high = (
                bootstrap_ratio_ci(counts[kind], errors, n_boot, rng_for(seed, "memory-errors", system, kind), ci)
                if share is not None
                else (None, None)
            )
            record.update({f"{kind}_share": share, f"{kind}_share_low": low, f"{kind}_share_high": high})
        records.append(record)
    return pd.DataFrame.from_records(records, columns=columns)


def memory_audit_section(
    rows: pd.DataFrame | None, *, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> dict[str, Any] | None:
    """The report's ``memory_audit`` section: ``judged_memory_audit`` of each rubric x aspect x judge's rows
    (``audit_rows``), one record per system with ``_ci_low`` / ``_ci_high`` for the CIs; None without memory-audit
    judgments. A run with one judge gets the figures ``dialogue-judge memory-audit --judge`` prints for the same
    labels, seed and ``n_boot``."""
    if rows is None or rows.empty:
        return None
    systems: list[dict[str, Any]] = []
    for key, group in rows.groupby(AUDIT_KEY, sort=True, dropna=False):
        table = judged_memory_audit(group, n_boot=n_boot, seed=seed, ci=ci)
        for record in table.to_dict(orient="records"):
            out: dict[str, Any] = {name: str(value) for name, value in zip(AUDIT_KEY, key, strict=True)}
            out.update(
                {
                    "system": str(record["system"]),
                    "n_items": int(record["n"]),
                    "n_parsed": int(record["n_parsed"]),
                    "n_unparseable": int(record["n_unparseable"]),
                    "n_failed": int(record["n_failed"]),
                }
            )
            for name in (*FIGURES, *(f"{kind}_share" for kind in ERROR_TYPES)):
                out.update(
                    {
                        name: record[name],
                        f"{name}_ci_low": record[f"{name}_low"],
                        f"{name}_ci_high": record[f"{name}_high"],
                    }
                )
            out.update({kind: int(record[kind]) for kind in ERROR_TYPES})
            out["errors"] = sum(out[kind] for kind in ERROR_TYPES)
            systems.append(out)
    return {
        "ci_method": "precision, recall, F1: per memory, averaged over an item's judgments, then over items, "
        "percentile bootstrap over items; error-type shares: pooled count of the type / all errors (fabricated + "
        "wrong relationship + missing), percentile bootstrap over items",
        "error_types": list(ERROR_TYPES),
        "systems": systems,
    }
