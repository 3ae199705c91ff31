"""Single-mode score statistics: per-system summaries, paired comparisons, the seed paper's table.

Conventions
-----------
* The analysis unit is the *item*: self-consistency samples of one judgment key (item, system,
  aspect, judge; different ``sample_index``) are averaged first, over the samples whose status is
  ``done`` and whose score parsed.  ``n`` is the number of such items.
* Status counts are judgment *rows* (samples included) and are always reported next to the
  statistics: ``n_total = n_done + n_failed + n_unparseable + n_pending + n_cancelled`` where
  ``n_pending`` counts both ``pending`` and ``running`` rows.  Nothing is dropped silently.
* ``std`` is the sample standard deviation (ddof=1) of item scores; the CI of the mean is
  ``bootstrap.mean_interval`` over items: the hull of the Student t and bootstrap-t intervals, clipped to the
  scale; none for one item, the scale's worst case when all scores are equal, and then (or below 10 items) a
  ``ci_warning`` saying so.
* The histogram covers the rubric scale ``[scale_min, scale_max]``: one bin per integer value when the
  scale is integral with at most ``max_bins`` points (e.g. 1-10, 0-2), otherwise ``max_bins`` equal
  width bins (1-100 -> ten bins; the top edge belongs to the last bin).  Item means are binned, so
  they agree with ``n``.
* Paired comparison of systems X and Y (per aspect x judge): differences ``X - Y`` on the items where
  both have an item score; mean difference, its ``mean_interval`` (items resampled, so pairs stay
  together; bounded by +/- the scale's width; with its ``ci_warning``), and scipy's Wilcoxon signed-rank
  test (two-sided, ``zero_method="wilcox"``: zero differences are dropped; all differences zero gives ``p = 1.0``).
* Paper table (Wang et al. 2023, recursive summarisation): mean item score per system and aspect,
  ``average`` = unweighted mean of that system's aspect means. Per judge and aspect the systems are compared on
  the items they all have a score for (a system judged only on the items it did not fail must not rise above one
  judged on all of them); when they share none, each system's own items are used and the counts say so
  (``paper_cell_counts``: the n behind every cell, and whether it is the shared set).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from judge_api.stats import frames as F
from judge_api.stats.bootstrap import map_in_order, mean_interval, rng_for
from judge_api.stats.grouped import aggregated, unique_inverse
from judge_api.stats.status_counts import status_counts_frame

SYSTEM = "system"
GROUP_KEYS = [SYSTEM, F.ASPECT, F.JUDGE]
ITEM_KEYS = [F.ITEM_ID, SYSTEM, F.ASPECT, F.JUDGE]
PAPER_ASPECTS = ("engagingness", "coherence", "consistency")

STATUS_COLUMNS = F.STATUS_COLUMNS


def single_rows(judgments: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Single-mode rows (optionally only ``columns``) of a validated frame, ``system_a`` -> ``system``."""
    cols = list(judgments.columns) if columns is None else columns
    rows = judgments.loc[(judgments[F.MODE] == F.SINGLE).to_numpy(), cols]
    return rows.rename(columns={F.SYSTEM_A: SYSTEM})


def status_counts(judgments: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Row counts per status of single-mode judgments by ``keys`` (default system x aspect x judge)."""
    keys = keys or GROUP_KEYS
    df = single_rows(F.validate_judgments(judgments), [F.ITEM_ID, F.SYSTEM_A, F.ASPECT, F.JUDGE, F.STATUS])
    return _status_table(df, keys)


def _status_table(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return status_counts_frame(df[F.STATUS], {k: df[k] for k in keys})


def item_scores(judgments: pd.DataFrame, *, validated: bool = False) -> pd.DataFrame:
    """One row per (item, system, aspect, judge): the mean of its done, parsed samples.

    Columns: item_id, system, aspect, judge, score, n_samples, length, scale_min, scale_max.
    """
    df = judgments if validated else F.validate_judgments(judgments)
    mask = (df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna()
    for key in (F.ITEM_ID, F.SYSTEM_A, F.ASPECT, F.JUDGE):  # a row with a missing key is in no group, as grouped
        mask &= df[key].notna()
    keep = [F.ITEM_ID, F.SYSTEM_A, F.ASPECT, F.JUDGE, F.SCORE, F.LEN_A, F.SCALE_MIN, F.SCALE_MAX]
    df = df.loc[mask, keep].rename(columns={F.SYSTEM_A: SYSTEM})
    cols = [*ITEM_KEYS, F.SCORE, "n_samples", "length", F.SCALE_MIN, F.SCALE_MAX]
    if df.empty:
        out = pd.DataFrame({c: pd.Series(dtype="str") for c in ITEM_KEYS})
        for c in cols[len(ITEM_KEYS) :]:
            out[c] = pd.Series(dtype="float64")
        return out
    # grouped by one integer code per (item, system, aspect, judge), numbered as groupby(ITEM_KEYS, sort=False)
    # numbers them: the same groups, rows and order, so the same means (issue 39)
    group = F.group_codes(df, ITEM_KEYS)
    if group.size and int(group[-1]) == group.size - 1:
        # one row per group (one sample a judgment, the usual run), numbered in row order: each group's mean, size
        # and first value are its row's own (a mean of one value is that value; a first non-missing of a missing
        # one is missing), without the group-by's copies (issue 39: 780 MB at 10M rows, 390 without)
        out = df.rename(columns={F.LEN_A: "length"}).reset_index(drop=True)
        out["n_samples"] = np.ones(len(out), dtype=np.int64)
        out = out[cols]
        out.attrs = {}  # item scores, not the judgments frame its markers describe (review r57a)
        return out
    values = df[[F.SCORE, F.LEN_A, F.SCALE_MIN, F.SCALE_MAX]].reset_index(drop=True)
    aggregated = values.groupby(group, sort=False).agg(
        score=(F.SCORE, "mean"),
        n_samples=(F.SCORE, "size"),
        length=(F.LEN_A, "mean"),
        scale_min=(F.SCALE_MIN, "first"),
        scale_max=(F.SCALE_MAX, "first"),
    )
    keys = df.iloc[F.first_rows(group)][ITEM_KEYS].reset_index(drop=True)
    out = pd.concat([keys, aggregated.reset_index(drop=True)], axis=1)
    return out[cols]


def histogram_edges(scale_min: float, scale_max: float, max_bins: int = 10) -> tuple[np.ndarray, bool]:
    """Bin edges over a scale, and whether the bins are one-per-integer-value."""
    lo, hi = float(scale_min), float(scale_max)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return np.array([lo, hi] if np.isfinite(lo) else [0.0, 1.0]), False
    if lo.is_integer() and hi.is_integer() and hi - lo + 1 <= max_bins:
        return np.arange(lo - 0.5, hi + 1.0, 1.0), True
    return np.linspace(lo, hi, max_bins + 1), False


def _bin_index(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    nb = len(edges) - 1
    idx = np.searchsorted(edges, x, side="right") - 1
    return np.clip(idx, 0, nb - 1)


def _scale_of(scores: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> tuple[float, float]:
    """A group's scale: the first scale bounds its rows give, else its scores' range."""
    lo, hi = lows[~np.isnan(lows)], highs[~np.isnan(highs)]
    lo_v = float(lo[0]) if lo.size else float(pd.Series(scores).min())
    hi_v = float(hi[0]) if hi.size else float(pd.Series(scores).max())
    return lo_v, hi_v


STATUS_ROW_COLUMNS = [F.SYSTEM_A, F.ASPECT, F.JUDGE, F.STATUS]
"""The columns ``score_summary`` counts statuses by (``single_rows`` names ``system_a`` ``system``)."""


def score_summary(
    judgments: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    max_bins: int = 10,
    items: pd.DataFrame | None = None,
    status_rows: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per system x aspect x judge: n, mean, median, std, bootstrap CI, histogram and status counts.

    Groups whose judgments all failed (or are pending) are kept with ``n = 0`` and NaN statistics.
    ``items`` (``item_scores`` output of the same frame) skips recomputing the item scores; ``status_rows``
    (``single_rows(frame, STATUS_ROW_COLUMNS)`` of the same frame) the status counts' rows.
    """
    df = F.validate_judgments(judgments)
    counts = _status_table(single_rows(df, STATUS_ROW_COLUMNS) if status_rows is None else status_rows, GROUP_KEYS)
    items = item_scores(df, validated=True) if items is None else items
    columns = [
        *GROUP_KEYS,
        "n",
        "mean",
        "median",
        "std",
        "ci_low",
        "ci_high",
        "ci_warning",
        F.SCALE_MIN,
        F.SCALE_MAX,
        "histogram",
        *STATUS_COLUMNS,
    ]
    if counts.empty:
        return pd.DataFrame(columns=columns)
    # each group's rows, in their order, not a frame of every column per group (issue 39: 1.1 s at 10M rows)
    rows_of = items.groupby(GROUP_KEYS, sort=True).indices if not items.empty else {}
    scores = items[F.SCORE].to_numpy(dtype="float64")
    lows, highs = items[F.SCALE_MIN].to_numpy(dtype="float64"), items[F.SCALE_MAX].to_numpy(dtype="float64")

    def record(row: Any) -> dict[str, Any]:
        key = (row.system, row.aspect, row.judge)
        rec: dict[str, Any] = dict(zip(GROUP_KEYS, key, strict=True))
        rows = rows_of.get(key)
        if rows is None or rows.size == 0:
            rec.update(n=0, mean=np.nan, median=np.nan, std=np.nan, ci_low=np.nan, ci_high=np.nan, ci_warning=None)
            rec.update({F.SCALE_MIN: np.nan, F.SCALE_MAX: np.nan, "histogram": None})
        else:
            x = scores[rows]
            lo, hi = lows[rows], highs[rows]
            smin, smax = _scale_of(x, lo, hi)
            has_scale = bool((~np.isnan(lo)).any() and (~np.isnan(hi)).any() and smax > smin)
            bounds = (smin, smax) if has_scale else None  # the data's own range is not a bound on the mean
            interval = mean_interval(x, n_boot=n_boot, rng=rng_for(seed, "scores", *key), ci=ci, bounds=bounds)
            edges, per_value = histogram_edges(smin, smax, max_bins)
            hist = np.bincount(_bin_index(x, edges), minlength=len(edges) - 1)
            rec.update(
                n=int(x.size),
                mean=float(x.mean()),
                median=float(np.median(x)),
                std=float(x.std(ddof=1)) if x.size > 1 else np.nan,
                ci_low=interval.low,
                ci_high=interval.high,
                ci_warning=interval.warning,
            )
            rec.update({F.SCALE_MIN: smin, F.SCALE_MAX: smax})
            rec["histogram"] = {
                "edges": edges.tolist(),
                "values": (edges[:-1] + 0.5).tolist() if per_value else None,
                "counts": hist.tolist(),
            }
        for c in STATUS_COLUMNS:
            rec[c] = int(getattr(row, c))
        return rec

    records = map_in_order(record, counts.itertuples(index=False))  # each group draws from its own generator
    return pd.DataFrame.from_records(records, columns=columns)


def wilcoxon_p(diffs: np.ndarray) -> float | None:
    """Two-sided Wilcoxon signed-rank p-value; 1.0 when every difference is zero, None without data."""
    d = np.asarray(diffs, dtype="float64")
    d = d[np.isfinite(d)]
    if d.size == 0:
        return None
    if np.all(d == 0):
        return 1.0
    try:
        return float(sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
    except ValueError:
        return 1.0


def _paired_record(
    x: np.ndarray,
    y: np.ndarray,
    key: tuple[str, str, str, str],
    n_boot: int,
    seed: int,
    ci: float,
    width: float | None = None,
) -> dict[str, Any]:
    """``width``: the scale's width (differences lie within +/- it), None when unknown."""
    both = np.isfinite(x) & np.isfinite(y)
    d = x[both] - y[both]
    aspect, judge, sx, sy = key
    rec: dict[str, Any] = {
        F.ASPECT: aspect,
        F.JUDGE: judge,
        "system_x": sx,
        "system_y": sy,
        "n_pairs": int(d.size),
        "n_x_only": int((np.isfinite(x) & ~np.isfinite(y)).sum()),
        "n_y_only": int((~np.isfinite(x) & np.isfinite(y)).sum()),
    }
    if d.size == 0:
        rec.update(mean_x=np.nan, mean_y=np.nan, mean_diff=np.nan, ci_low=np.nan, ci_high=np.nan, ci_warning=None)
        rec.update(p_value=None, n_x_better=0, n_y_better=0, n_equal=0)
        return rec
    bounds = None if width is None else (-width, width)
    interval = mean_interval(
        d, n_boot=n_boot, rng=rng_for(seed, "paired", *key), ci=ci, bounds=bounds, what="differences"
    )
    rec.update(
        mean_x=float(x[both].mean()),
        mean_y=float(y[both].mean()),
        mean_diff=float(d.mean()),
        ci_low=interval.low,
        ci_high=interval.high,
        ci_warning=interval.warning,
        p_value=wilcoxon_p(d),
        n_x_better=int((d > 0).sum()),
        n_y_better=int((d < 0).sum()),
        n_equal=int((d == 0).sum()),
    )
    return rec


PAIRED_COLUMNS = [
    F.ASPECT,
    F.JUDGE,
    "system_x",
    "system_y",
    "n_pairs",
    "n_x_only",
    "n_y_only",
    "mean_x",
    "mean_y",
    "mean_diff",
    "ci_low",
    "ci_high",
    "ci_warning",
    "p_value",
    "n_x_better",
    "n_y_better",
    "n_equal",
]


def _scale_width(items: pd.DataFrame) -> float | None:
    """The width of the rubric scale of these item scores (None when the rows carry no scale)."""
    return _width(items[F.SCALE_MIN].min(), items[F.SCALE_MAX].max())


def _width(low: Any, high: Any) -> float | None:
    """``high - low``: None when either is missing or the scale is empty."""
    if pd.isna(low) or pd.isna(high) or float(high) <= float(low):
        return None
    return float(high) - float(low)


def _scale_widths(items: pd.DataFrame) -> dict[tuple[Any, Any], float | None]:
    """``_scale_width`` of each (aspect, judge) block of item scores, from one group-by's min and max of the two scale
    columns (issue 39: one frame per block was 1.45 s of a 10M-row report)."""
    spec = {"low": (F.SCALE_MIN, "min"), "high": (F.SCALE_MAX, "max")}
    bounds = aggregated(items, [F.ASPECT, F.JUDGE], spec, sort=False)  # the blocks in the order they first appear
    keys = zip(bounds[F.ASPECT], bounds[F.JUDGE], strict=True)
    return {key: _width(low, high) for key, low, high in zip(keys, bounds["low"], bounds["high"], strict=True)}


def _wide(items: pd.DataFrame) -> pd.DataFrame:
    """Item scores as (aspect, judge, item_id) x system."""
    wide = items.set_index([F.ASPECT, F.JUDGE, F.ITEM_ID, SYSTEM])[F.SCORE].unstack(SYSTEM)
    # rows sorted by the keys' values: unstack sorts string levels, not categorical ones (issue 39)
    return wide.sort_index() if any(isinstance(lv, pd.CategoricalIndex) for lv in wide.index.levels) else wide


def paired_comparison(
    judgments: pd.DataFrame,
    system_x: str,
    system_y: str,
    aspect: str,
    judge: str,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> dict[str, Any]:
    """Per-item paired comparison ``system_x - system_y`` on one aspect for one judge."""
    items = item_scores(judgments)
    items = items[(items[F.ASPECT] == aspect) & (items[F.JUDGE] == judge)]
    sub = items[items[SYSTEM].isin([system_x, system_y])]
    wide = sub.set_index([F.ITEM_ID, SYSTEM])[F.SCORE].unstack(SYSTEM) if not sub.empty else None
    nan = np.full(0 if wide is None else len(wide), np.nan)
    x = wide[system_x].to_numpy("float64") if wide is not None and system_x in wide else nan
    y = wide[system_y].to_numpy("float64") if wide is not None and system_y in wide else nan
    return _paired_record(x, y, (aspect, judge, system_x, system_y), n_boot, seed, ci, _scale_width(sub))


def paired_comparisons(
    judgments: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    items: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``paired_comparison`` for every unordered pair of systems (x < y by name) per aspect x judge."""
    items = item_scores(judgments) if items is None else items
    if items.empty:
        return pd.DataFrame(columns=PAIRED_COLUMNS)
    widths = _scale_widths(items)
    jobs = [
        (table[:, i], table[:, j], (aspect, judge, systems[i], systems[j]), widths.get((aspect, judge)))
        for (aspect, judge), systems, table in _wide_blocks(items)
        for i, j in combinations(range(len(systems)), 2)
    ]
    # each pair draws from its own generator: the records are the loop's, in its order
    records = map_in_order(lambda job: _paired_record(job[0], job[1], job[2], n_boot, seed, ci, job[3]), jobs)
    return pd.DataFrame.from_records(records, columns=PAIRED_COLUMNS)


def _wide_blocks(items: pd.DataFrame) -> list[tuple[tuple[str, str], list[str], np.ndarray]]:
    """Per (aspect, judge), sorted: the systems with a score there (sorted) and the (items x systems) table of their
    scores, items sorted, NaN where a system has none. What ``_wide(items).groupby(level=[0, 1])`` and dropping the
    all-NaN columns gave, on integer codes instead of an unstacked frame (issue 39); ``_wide`` stays the
    definition (``tests/stats/test_stats_report_aggregates.py`` compares the two)."""
    aspect, aspects = F.sorted_codes(items[F.ASPECT])
    judge, judges = F.sorted_codes(items[F.JUDGE])
    item, _ = F.sorted_codes(items[F.ITEM_ID])
    system, systems = F.sorted_codes(items[SYSTEM])
    n_items, n_systems = int(item.max()) + 1, len(systems)
    block = aspect * len(judges) + judge
    row_key = block * n_items + item
    rows, row = unique_inverse(row_key)  # the wide frame's rows: (aspect, judge, item), sorted
    table = np.full((rows.size, n_systems), np.nan)
    table[row, system] = items[F.SCORE].to_numpy("float64")
    row_block = rows // n_items
    starts = np.flatnonzero(np.r_[True, row_block[1:] != row_block[:-1]])
    ends = np.r_[starts[1:], rows.size]
    out = []
    for start, end in zip(starts, ends, strict=True):
        b = int(row_block[start])
        part = table[start:end]
        present = np.flatnonzero(~np.isnan(part).all(axis=0))
        key = (str(aspects[b // len(judges)]), str(judges[b % len(judges)]))
        out.append((key, [str(systems[k]) for k in present], part[:, present]))
    return out


def ordered_aspects(aspects: list[str] | np.ndarray | pd.Index) -> list[str]:
    """The paper's aspects first, in the paper's order, then any others alphabetically."""
    present = {str(a) for a in aspects}
    first = [a for a in PAPER_ASPECTS if a in present]
    return first + sorted(present - set(first))


PaperItems = tuple[pd.DataFrame, dict[tuple[str, str], bool]]

PAPER_ITEM_COLUMNS = [F.JUDGE, SYSTEM, F.ASPECT, F.ITEM_ID, F.SCORE]
"""The columns of the item scores the paper table and its counts read: what :func:`paper_items` keeps."""


def paper_items(items: pd.DataFrame) -> PaperItems:
    """The item scores the paper table averages: per (judge, aspect), those of the items every system there has;
    all of them when the systems share no item. Also whether each (judge, aspect) block is on shared items.

    Counted on integer codes (issue 39): an item is shared in its (judge, aspect) block when as many of the block's
    rows name it as the block has systems (``item_scores`` has one row per item x system x aspect x judge). The rows
    kept are in their order in ``items``, so every mean over them sums in the same order as before. The report finds
    them once for ``paper_table`` and ``paper_cell_counts`` (their ``paper``). Only their columns are taken
    (``PAPER_ITEM_COLUMNS``: a copy of most item scores, 500 MB at 10M rows with every column; issue 39)."""
    if items.empty:
        return items[PAPER_ITEM_COLUMNS], {}
    judge, judges = pd.factorize(items[F.JUDGE])
    aspect, aspects = pd.factorize(items[F.ASPECT])
    # blocks numbered in the order they first appear, as groupby(sort=False) numbers them
    block = pd.factorize(judge.astype(np.int64) * len(aspects) + aspect)[0]
    starts = F.first_rows(block)  # each block's first row, in the blocks' order
    blocks = [(judges[judge[i]], aspects[aspect[i]]) for i in starts]
    n_blocks = len(blocks)
    system, system_names = pd.factorize(items[SYSTEM])
    item = pd.factorize(items[F.ITEM_ID])[0]
    n_items = int(item.max()) + 1
    block_system = pd.unique(block.astype(np.int64) * len(system_names) + system)
    n_systems = np.bincount(block_system // len(system_names), minlength=n_blocks)
    # each (block, item) cell numbered by hashing, not sorting: only its count of rows matters
    inverse, cells = F.factorize_codes(block.astype(np.int64) * n_items + item)
    per_cell = np.bincount(inverse, minlength=len(cells))
    common_row = (per_cell == n_systems[cells // n_items])[inverse]
    block_shared = np.bincount(block, weights=common_row, minlength=n_blocks) > 0
    keep = common_row | ~block_shared[block]
    shared = {(str(j), str(a)): bool(block_shared[k]) for k, (j, a) in enumerate(blocks)}
    order = np.argsort(block, kind="stable")  # the blocks one after another, as the concatenation gave them
    order = order[keep[order]]
    return items[PAPER_ITEM_COLUMNS].iloc[order].reset_index(drop=True), shared


def paper_cell_counts(items: pd.DataFrame, *, paper: PaperItems | None = None) -> pd.DataFrame:
    """Per judge x system x aspect: ``n`` (the items behind the paper table's cell) and ``shared`` (True when the
    cell is averaged over the items every system of that judge and aspect has). ``paper``: ``paper_items(items)``."""
    used, shared = paper_items(items) if paper is None else paper
    if used.empty:
        return pd.DataFrame(columns=[F.JUDGE, SYSTEM, F.ASPECT, "n", "shared"])
    counts = used.groupby([F.JUDGE, SYSTEM, F.ASPECT], sort=True)[F.ITEM_ID].nunique().rename("n").reset_index()
    counts["shared"] = [shared[(str(j), str(a))] for j, a in zip(counts[F.JUDGE], counts[F.ASPECT], strict=True)]
    return counts


def paper_table(
    judgments: pd.DataFrame,
    judge: str | None = None,
    *,
    items: pd.DataFrame | None = None,
    paper: PaperItems | None = None,
) -> pd.DataFrame:
    """Systems x aspects of mean item scores plus ``average`` (mean of the aspect means).

    Columns: judge, system, one column per aspect present (paper order), average, n_items.
    One block of rows per judge unless ``judge`` is given. ``paper``: ``paper_items(items)`` (every judge's).
    """
    items = item_scores(judgments) if items is None else items
    if judge is not None:
        items = items[items[F.JUDGE] == judge]
    if items.empty:
        return pd.DataFrame(columns=[F.JUDGE, SYSTEM, "average", "n_items"])
    aspects = ordered_aspects(items[F.ASPECT].unique())
    used = paper_items(items)[0] if paper is None or judge is not None else paper[0]
    means = used.groupby([F.JUDGE, SYSTEM, F.ASPECT], sort=True)[F.SCORE].mean().unstack(F.ASPECT)
    means = means.reindex(columns=aspects)
    means["average"] = means[aspects].mean(axis=1, skipna=True)
    means["n_items"] = items.groupby([F.JUDGE, SYSTEM], sort=True)[F.ITEM_ID].nunique()
    out = means.reset_index()
    out.columns.name = None
    return out[[F.JUDGE, SYSTEM, *aspects, "average", "n_items"]]
