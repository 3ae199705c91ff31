"""Row counts per status of the groups of a frame (``n_total``, ``n_done``, ... ``STATUS_COLUMNS``): the status tables
of ``scores.score_summary`` and ``preferences.preference_summary``, counted on integer codes (issue 39)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from judge_api.stats.frames import (
    CANCELLED,
    DONE,
    FAILED,
    PENDING,
    RUNNING,
    STATUS_COLUMNS,
    UNPARSEABLE,
    column,
    is_value,
)


def _status_flags(status: pd.Series) -> Callable[[str], np.ndarray]:
    """``flag(name)``: which rows have that status; on a categorical's codes, without a string per row (issue 39)."""
    return lambda name: is_value(status, name)


def status_counts_frame(status: pd.Series, keys: Mapping[str, pd.Series]) -> pd.DataFrame:
    """One row per group of ``keys`` (name -> column) with the ``STATUS_COLUMNS`` counts: what
    ``groupby(list(keys), sort=True).sum()`` of one 0/1 column per status gave (rows with a missing key left out, a
    categorical key in its categories' order), found on the keys' integer codes and counted with ``bincount`` instead
    of six columns of a million integers grouped (issue 39)."""
    if len(status) == 0:
        return pd.DataFrame(columns=[*keys, *STATUS_COLUMNS])
    coded = [_group_key_codes(column(values)) for values in keys.values()]
    present = np.ones(len(status), dtype=bool)
    group = np.zeros(len(status), dtype=np.int64)
    bound = 1
    ranked = False
    for codes, n_values, _ in coded:
        present &= codes >= 0
        if bound * (n_values + 1) >= 2**62:  # ranked again before the product could overflow; ranks keep the order
            group = np.unique(group, return_inverse=True)[1].astype(np.int64)
            bound = int(group.max()) + 1
            ranked = True
        group = group * max(n_values, 1) + np.maximum(codes, 0)
        bound *= max(n_values, 1)
    status_codes, status_names = _status_codes(status)
    if not ranked and bound * (len(status_names) + 1) <= max(4 * len(status), 1 << 20):
        return _status_counts_by_code(group, present, bound, status_codes, status_names, keys, coded)
    rows = np.flatnonzero(present)
    groups, first, group = np.unique(group[present], return_index=True, return_inverse=True)  # sorted as grouped
    is_status = _status_flags(status)
    flags = {
        "n_total": None,
        "n_done": is_status(DONE),
        "n_failed": is_status(FAILED),
        "n_unparseable": is_status(UNPARSEABLE),
        "n_pending": is_status(PENDING) | is_status(RUNNING),
        "n_cancelled": is_status(CANCELLED),
    }
    first_row = rows[first]  # each group's key values, read off its first row
    frame = pd.DataFrame(
        {name: value_of(codes[first_row]) for name, (codes, _, value_of) in zip(keys, coded, strict=True)}
    )
    for name, flag in flags.items():
        weights = None if flag is None else flag[present]
        frame[name] = np.bincount(group, weights=weights, minlength=len(groups)).astype("int64")
    return frame[[*keys, *STATUS_COLUMNS]]


def _status_codes(status: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's status as an integer code (missing: -1) and the statuses the codes name."""
    if isinstance(status.dtype, pd.CategoricalDtype):
        return status.cat.codes.to_numpy(), [str(v) for v in status.cat.categories]
    codes, uniques = pd.factorize(status)
    return codes, [str(v) for v in uniques]


def _status_counts_by_code(
    group: np.ndarray,
    present: np.ndarray,
    bound: int,
    status_codes: np.ndarray,
    status_names: list[str],
    keys: Mapping[str, pd.Series],
    coded: list[tuple[np.ndarray, int, Callable[[np.ndarray], pd.Series]]],
) -> pd.DataFrame:
    """``status_counts_frame`` when the groups' mixed codes are few (below ``bound``): one ``bincount`` of (group,
    status) over every row, no sort of the rows (issue 39: 2.4 s of a 10M-row report). The groups come out in the
    codes' order, as the sort gave them, and each key's code is read back off the group's mixed code."""
    width = len(status_names) + 1  # the last column: a missing status, counted in n_total only
    bucket = np.where(present, group, bound)  # rows with a missing key: a bucket of their own, dropped
    bucket *= width
    bucket += np.where(status_codes >= 0, status_codes, width - 1)
    table = np.bincount(bucket, minlength=(bound + 1) * width).reshape(bound + 1, width)[:bound]
    del bucket
    sizes = table.sum(axis=1)
    groups = np.flatnonzero(sizes)
    table = table[groups]

    def count(*names: str) -> np.ndarray:
        out = np.zeros(len(groups), dtype=np.int64)
        for name in names:
            if name in status_names:
                out += table[:, status_names.index(name)]
        return out

    key_codes_of: list[np.ndarray] = []
    rest = groups
    for _, n_values, _ in reversed(coded):
        key_codes_of.append(rest % max(n_values, 1))
        rest = rest // max(n_values, 1)
    frame = pd.DataFrame(
        {name: value_of(own) for name, (_, _, value_of), own in zip(keys, coded, reversed(key_codes_of), strict=True)}
    )
    frame["n_total"] = sizes[groups].astype("int64")
    frame["n_done"] = count(DONE)
    frame["n_failed"] = count(FAILED)
    frame["n_unparseable"] = count(UNPARSEABLE)
    frame["n_pending"] = count(PENDING, RUNNING)
    frame["n_cancelled"] = count(CANCELLED)
    return frame[[*keys, *STATUS_COLUMNS]]


def _group_key_codes(series: pd.Series) -> tuple[np.ndarray, int, Callable[[np.ndarray], pd.Series]]:
    """A group-by key as integer codes that sort as ``groupby(sort=True)`` sorts it (a categorical: its categories'
    order; else the values'), missing as -1; their number; and the key's values of some codes, in the dtype the
    group-by gives them."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        dtype = series.dtype
        return (
            series.cat.codes.to_numpy("int64"),
            len(dtype.categories),
            lambda codes: pd.Series(pd.Categorical.from_codes(codes, dtype=dtype)),
        )
    codes, uniques = pd.factorize(series, sort=True)
    values = pd.Index(uniques)
    return codes.astype("int64"), len(values), lambda own: pd.Series(values.take(own))
