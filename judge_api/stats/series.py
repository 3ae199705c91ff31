"""A monitor's series (docs/monitoring.md): verdicts over time, by bucket and slice, with intervals.

Everything goes through additive sums per hour and key (``n``, sum, sum of squares, and for fact-check verdicts
their count and summed contradiction rate), so the hourly sums retention keeps and the verdicts still stored add up
to the same series as the verdicts alone would give.

Per bucket (``1h`` or ``1d``, UTC) and group (the ``by`` slices, rubric, aspect, judge):

* ``n`` and ``mean``: the verdicts with a score and their mean (a fact-check response that addresses no fact has
  none: n/a, docs/facts.md); ``ci_low``/``ci_high``: Student's t interval at ``confidence``,
  ``mean +- t(1-(1-c)/2, n-1) * s / sqrt(n)`` with ``s`` the sample standard deviation (None below 2 verdicts);
* ``contradiction_rate``: fact-check rubrics, the mean of the verdicts' contradicted share; ``contradiction_n``
  the verdicts it is over.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as st

KEY = ["system", "version", "segment", "rubric_id", "aspect", "judge"]
SUMS = ["n", "total", "total_sq", "fact_n", "fact_total"]
HOURLY_COLUMNS = ["hour_start", *KEY, *SUMS]
SLICES = ("version", "system", "segment")
BUCKETS = {"1h": "h", "1d": "D"}
SERIES_COLUMNS = [
    "bucket_start",
    "system",
    "version",
    "segment",
    "rubric_id",
    "aspect",
    "judge",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "contradiction_rate",
    "contradiction_n",
]


def hourly_sums(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Verdict rows (``ts``, KEY, ``score`` or None, ``contradiction_rate`` or None) -> one row per (hour, KEY) of
    sums; a row without a score counts only in the contradiction sums."""
    if verdicts.empty:
        return pd.DataFrame(columns=HOURLY_COLUMNS)
    scores = pd.to_numeric(verdicts["score"], errors="coerce").astype(float)
    frame = verdicts.assign(
        hour_start=pd.to_datetime(verdicts["ts"]).dt.floor("h"),
        n=scores.notna().astype(int),  # a fact-check response that addresses no fact has no score (n/a)
        total=scores.fillna(0.0),
        total_sq=scores.fillna(0.0) ** 2,
        fact_n=verdicts["contradiction_rate"].notna().astype(int),
        fact_total=pd.to_numeric(verdicts["contradiction_rate"], errors="coerce").fillna(0.0).astype(float),
    )
    grouped = frame.groupby(["hour_start", *KEY], sort=True, dropna=False)[SUMS].sum().reset_index()
    return grouped[HOURLY_COLUMNS]


def series(
    sums: pd.DataFrame,
    bucket: str = "1h",
    by: Sequence[str] = ("version",),
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Hourly sums (any number of rows per hour and key: they add) -> the series rows (SERIES_COLUMNS), sorted by
    bucket and group. The slices not in ``by`` are None (summed over)."""
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}")
    unknown = [b for b in by if b not in SLICES]
    if unknown:
        raise ValueError(f"by: {unknown[0]!r} is not one of {', '.join(SLICES)}")
    if sums.empty:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    frame = sums.assign(bucket_start=pd.to_datetime(sums["hour_start"]).dt.floor(BUCKETS[bucket]))
    group = ["bucket_start", *[s for s in SLICES if s in by], "rubric_id", "aspect", "judge"]
    out = frame.groupby(group, sort=True, dropna=False)[SUMS].sum().reset_index()
    for s in SLICES:
        if s not in by:
            out[s] = None
    n = out["n"].astype(float).to_numpy()
    total = out["total"].astype(float).to_numpy()
    mean = np.divide(total, n, out=np.full_like(total, np.nan), where=n > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (out["total_sq"].astype(float).to_numpy() - n * mean**2) / (n - 1)
        var = np.where(n >= 2, np.maximum(var, 0.0), np.nan)
        half = st.t.ppf(1 - (1 - confidence) / 2, np.maximum(n - 1, 1)) * np.sqrt(var / n)
    out["mean"] = mean
    out["ci_low"] = mean - half
    out["ci_high"] = mean + half
    fact_n = out["fact_n"].astype(float).to_numpy()
    fact_total = out["fact_total"].astype(float).to_numpy()
    out["contradiction_rate"] = np.divide(fact_total, fact_n, out=np.full_like(fact_total, np.nan), where=fact_n > 0)
    out["contradiction_n"] = out["fact_n"].astype(int)
    out["n"] = out["n"].astype(int)
    out = out[SERIES_COLUMNS]
    return out.astype(object).where(out.notna(), None)


def series_of_verdicts(
    verdicts: pd.DataFrame, bucket: str = "1h", by: Sequence[str] = ("version",), confidence: float = 0.95
) -> pd.DataFrame:
    """The series of verdict rows alone (no kept sums)."""
    return series(hourly_sums(verdicts), bucket, by, confidence)
