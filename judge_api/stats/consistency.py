"""Self-consistency: how much a judge agrees with itself across samples of one judgment.

With ``options.samples = n`` (temperature > 0) every judgment key (item, systems, aspect, judge, presentation
order) has n sample rows. The verdict used everywhere else is the mean of the samples (scores, ``scores.py``) or
their majority (preferences, ``preferences.combine_orders`` takes the sign of the mean outcome code). Here each
key gets a **confidence** in [0, 1]:

* scores: ``1 - std / (range / 2)`` with the population std of the key's parsed samples and the rubric scale's
  range (1 when all samples agree; 0 when they split between the two ends of the scale);
* preferences: the share of samples whose outcome equals the majority outcome (1/3 is the floor with three
  outcomes).

Keys with a single parsed sample are left out (nothing to agree with). The section summarises per system (single)
or pair (pairwise) × aspect × judge: keys, mean and minimum confidence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F

KEY = [F.ITEM_ID, F.MODE, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE, F.ORDER]


def sample_confidence(judgments: pd.DataFrame, *, validated: bool = False) -> pd.DataFrame:
    """One row per judgment key with two or more done samples: ``n_samples`` and ``confidence``."""
    df = judgments if validated else F.validate_judgments(judgments)
    columns = [*KEY, "n_samples", "confidence"]
    # the columns read below only: the sampled rows of a million-row frame are a large share of it (issue 39)
    done = df.loc[_repeated_done(df), [*KEY, F.SCORE, F.SCALE_MIN, F.SCALE_MAX, F.OUTCOME]]
    if done.empty:
        return pd.DataFrame(columns=columns)
    for col in KEY:  # plain strings (a categorical key, issue 39, has no "" to fill with)
        if isinstance(done[col].dtype, pd.CategoricalDtype):
            done[col] = done[col].astype("str")
    done[F.SYSTEM_B] = done[F.SYSTEM_B].fillna("")
    done[F.ORDER] = done[F.ORDER].fillna("")
    single = done[(done[F.MODE] == F.SINGLE) & done[F.SCORE].notna()]
    pair = done[(done[F.MODE] == F.PAIRWISE) & done[F.OUTCOME].notna()]
    parts: list[pd.DataFrame] = []
    if not single.empty:
        g = single.groupby(KEY, sort=False)
        stats = g.agg(
            n_samples=(F.SCORE, "size"),
            lo=(F.SCALE_MIN, "first"),
            hi=(F.SCALE_MAX, "first"),
        ).reset_index()
        stats["std"] = _group_std(single[F.SCORE].to_numpy(dtype=np.float64), g.ngroup().to_numpy(), len(stats))
        half_range = ((stats["hi"] - stats["lo"]) / 2).where(lambda r: r > 0)
        stats["confidence"] = (1 - stats["std"] / half_range).clip(0, 1)
        parts.append(stats[columns])
    if not pair.empty:
        counts = pair.groupby([*KEY, F.OUTCOME], sort=False).size().rename("k").reset_index()
        g = counts.groupby(KEY, sort=False)["k"]
        stats = pd.DataFrame({"n_samples": g.sum(), "top": g.max()}).reset_index()
        stats["confidence"] = stats["top"] / stats["n_samples"]
        parts.append(stats[columns])
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return out[out["n_samples"] >= 2].reset_index(drop=True)


def _repeated_done(df: pd.DataFrame) -> np.ndarray:
    """The done rows whose key has another done row (issue 39): a key with one sample is left out of the result, so
    the string group-bys only see the sampled keys (none without ``options.samples``). Keys on integer codes
    (``frames.key_codes``: a missing value is a value of its own, as it is to the group-bys below once filled), the
    repeated ones found by sorting them: no copy of the key columns nor a hash table of a million keys (~90 MB at 1M
    rows before, the report's peak)."""
    done = (df[F.STATUS] == F.DONE).to_numpy()
    if not done.any():
        return done
    key = F.key_codes(df, KEY)
    key[~done] = -1  # the codes are >= 0: -1 is no key
    ordered = np.sort(key)
    again = ordered[1:] == ordered[:-1]
    again &= ordered[1:] >= 0
    if not again.any():
        return np.zeros(len(df), dtype=bool)
    return np.isin(key, ordered[1:][again])


def _group_std(values: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Population std of ``values`` per group ``codes`` (0..n_groups-1), each group's values in their row order.

    Only groups of two or more rows are computed (a lone sample's std is 0): without sampling every group is
    one row, and a per-group call over all of them was most of a 10k-judgment report's time. The formula is
    pandas' two-pass ``Series.std(ddof=0)``, so the figures are those of ``np.std`` on the group's Series."""
    out = np.zeros(n_groups)
    sizes = np.bincount(codes, minlength=n_groups)
    if not (sizes >= 2).any():
        return out
    ordered = values[np.argsort(codes, kind="stable")]
    ends = np.cumsum(sizes)
    for group in np.flatnonzero(sizes >= 2):
        chunk = ordered[ends[group] - sizes[group] : ends[group]]
        avg = chunk.sum(dtype=np.float64) / float(len(chunk))
        out[group] = float(np.sqrt(((avg - chunk) ** 2).sum(dtype=np.float64) / float(len(chunk))))
    return out


def self_consistency_section(judgments: pd.DataFrame, *, validated: bool = False) -> list[dict[str, Any]]:
    per_key = sample_confidence(judgments, validated=validated)
    if per_key.empty:
        return []
    group = [F.MODE, F.SYSTEM_A, F.SYSTEM_B, F.ASPECT, F.JUDGE]
    summary = (
        per_key.groupby(group, sort=True)
        .agg(
            keys=("confidence", "size"),
            samples_per_key=("n_samples", "mean"),
            mean_confidence=("confidence", "mean"),
            min_confidence=("confidence", "min"),
        )
        .reset_index()
    )
    summary[F.SYSTEM_B] = summary[F.SYSTEM_B].replace("", None)
    return list(summary.to_dict(orient="records"))
