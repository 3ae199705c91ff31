"""Memory audit (a): lexical precision / recall / F1 of a generated memory against gold memory, no judge needed.

The recursive-summarisation paper scores generated memory against gold memory (MSC's per-session personas) with
precision, recall and F1. Here that is the bag-of-words overlap of the two texts: lower-cased tokens
``[a-z0-9]+(?:'[a-z0-9]+)*`` (after NFKC), overlap = the sum over tokens of the smaller of the two counts (clipped),
``precision = overlap / generated tokens``, ``recall = overlap / gold tokens``, ``F1 = 2PR / (P + R)``; a side with
no tokens gives 0 for the figures that divide by it, and F1 is 0 when P + R is 0.

Per system the three figures are averaged over items, with percentile bootstrap CIs over items
(``judge_api/stats/bootstrap.py``; one generator per system and figure from the report seed).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

import pandas as pd

from judge_api.stats.bootstrap import bootstrap_mean_ci, rng_for

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
