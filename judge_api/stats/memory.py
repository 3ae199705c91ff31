"""Memory audit (a): lexical precision / recall / F1 of a generated memory against gold memory, no judge needed.

The recursive-summarisation paper scores generated memory against gold memory (MSC's per-session personas) with
precision, recall and F1. Here that is the bag-of-words overlap of the two texts: lower-cased tokens
``[a-z0-9]+(?:'[a-z0-9]+)*`` (after NFKC), overlap = the sum over tokens of the smaller of the two counts (clipped),
``precision = overlap / generated tokens``, ``recall = overlap / gold tokens``, ``F1 = 2PR / (P + R)``; a side with
no tokens gives 0 for the figures that divide by it, and F1 is 0 when P + R is 0.

Per system the three figures are averaged over items, with percentile bootstrap CIs over items
(``judge_api/stats/bootstrap.py``; one generator per system and figure from the report seed).

Memory audit (b), ``judged_memory_audit``: the same figures at the level of facts, from a judge's labels (the
``memory-audit`` rubric), and the proportions of the paper's error types (see that function).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

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


def judged_memory_audit(rows: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Per system, from memory-audit judgments (``workers/memoryaudit.py``): fact-level precision / recall / F1
    averaged over items (an item's judgments, e.g. samples, averaged first) with percentile bootstrap CIs over items,
    and the error-type proportions: each type's pooled count over all the system's errors, with bootstrap CIs over
    items of the same ratio.

    ``rows``: one row per finished judgment with item_id, system, status (``done`` rows carry precision, recall,
    f1 and the counts fabricated, wrong_relationship, missing). Output columns: system, n (items with a parsed
    audit), n_unparseable (unparseable or failed judgments), the three figures with ``_low`` / ``_high``, the error
    counts, ``<type>_share`` with ``_low`` / ``_high``.
    """
    columns = (
        ["system", "n", "n_unparseable"]
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
            "n_unparseable": int((group["status"] != "done").sum()),
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
