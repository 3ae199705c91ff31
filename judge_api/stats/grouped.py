"""Group-bys of categorical keys whose groups are found on the keys' integer codes: numbered as
``groupby(keys, sort=True)`` numbers them, with each group's key values and size (issue 39: 0.85 s of the 0.89 s a
4.8M-row group-by of three categoricals took was finding its groups).

A mean is still pandas' own. Its group mean is not a plain sum in row order, nor a Kahan sum replayed in numpy (their
last bits differ on some frames), so the values are grouped by pandas on one integer key, the groups' numbers, which
labels the rows as the group-by of the keys labels them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from judge_api.stats import frames as F


@dataclass(frozen=True)
class SortedGroups:
    """The groups of some rows: ``ids`` numbers each row's group as ``groupby(sort=True)`` orders the groups;
    ``sizes`` their numbers of rows; ``keys`` each key's value per group, in the key's dtype."""

    ids: np.ndarray
    sizes: np.ndarray
    keys: list[pd.Categorical]

    @property
    def n_groups(self) -> int:
        return len(self.sizes)


def sorted_groups(keys: Sequence[pd.Series]) -> SortedGroups | None:
    """The groups of categorical ``keys`` (columns of equal length, at least one); None when a key is not
    categorical or misses a value, or when the keys can take many more values than there are rows (the caller groups
    with pandas then). A categorical groups in its categories' order, so the groups are numbered in the order of
    their mixed codes: which of them occur is marked and counted, without a sort or a hash of the rows."""
    coded = []
    for series in keys:
        if not isinstance(series.dtype, pd.CategoricalDtype):
            return None
        codes = series.cat.codes.to_numpy()
        if codes.size and int(codes.min()) < 0:
            return None
        coded.append((codes, series.dtype, max(len(series.dtype.categories), 1)))
    n_rows = len(keys[0])
    bound = 1
    for *_, n_values in coded:
        bound *= n_values
        if bound > max(4 * n_rows, 1 << 20):
            return None
    mixed = np.zeros(n_rows, dtype=np.int64)
    for codes, _, n_values in coded:
        mixed *= n_values
        mixed += codes
    groups, ids = unique_inverse(mixed)  # each group's mixed code, in order, and each row's group
    del mixed
    key_codes = []
    for _, _, n_values in reversed(coded):
        key_codes.append(groups % n_values)
        groups //= n_values
    return SortedGroups(
        ids=ids,
        sizes=np.bincount(ids, minlength=len(key_codes[0])),
        keys=[
            pd.Categorical.from_codes(own, dtype=dtype)
            for (_, dtype, _), own in zip(coded, reversed(key_codes), strict=True)
        ],
    )


AGGREGATIONS = ("mean", "median", "min", "max", "sum", "size")


def aggregated(
    frame: pd.DataFrame, keys: list[str], spec: dict[str, tuple[str, str]], *, sort: bool = True
) -> pd.DataFrame:
    """``frame.groupby(keys, sort=sort).agg(**spec).reset_index()``, ``spec`` naming each output column's (column,
    function) with a function of ``AGGREGATIONS``: the same frame, its groups found by :func:`sorted_groups` when it
    finds them. Sizes, and sums of numpy booleans or int64 whose sum is exact in float64, are counted here; the other
    figures are pandas' own, of the columns as they are (their dtypes kept), on the groups' numbers. An output named
    like a key goes to the group-by (which refuses it)."""
    groups = sorted_groups([frame[k] for k in keys]) if not set(spec) & set(keys) else None
    if groups is None:
        return frame.groupby(keys, sort=sort).agg(**spec).reset_index()
    out = pd.DataFrame(dict(zip(keys, groups.keys, strict=True)))
    labels = groups.ids
    if not sort:
        # the groups numbered in the order they first appear, as groupby(sort=False) numbers them: pandas' figures
        # are made on the same numbers as there (its mean's last bits follow the numbering)
        first_seen = pd.unique(groups.ids)
        renumbered = np.empty(groups.n_groups, dtype=np.int64)
        renumbered[first_seen] = np.arange(groups.n_groups)
        labels = renumbered[groups.ids]
    counted = {
        name for name, (column, how) in spec.items() if how == "size" or (how == "sum" and _exact_sum(frame[column]))
    }
    by_pandas = {name: how for name, (_, how) in spec.items() if name not in counted}
    if by_pandas:
        values = pd.DataFrame({name: F.column(frame[spec[name][0]]) for name in by_pandas})
        made = values.groupby(labels, sort=True).agg(by_pandas)
    for name, (column, how) in spec.items():
        if how not in AGGREGATIONS:
            raise ValueError(f"aggregated {name!r}: {how!r} is not one of {AGGREGATIONS}")
        if how == "size":
            out[name] = groups.sizes.astype(np.int64)
        elif name not in by_pandas:
            out[name] = group_sums(groups, frame[column].to_numpy())
    if not sort:
        out = out.take(first_seen).reset_index(drop=True)
    for name in by_pandas:  # already in the output's order
        out[name] = made[name].reset_index(drop=True)
    return out[[*keys, *spec]]


def _exact_sum(series: pd.Series) -> bool:
    """Whether ``group_sums`` gives pandas' sum of the column: numpy booleans, or int64 whose every partial sum is a
    whole number float64 holds exactly (below 2**53 in magnitude)."""
    if series.dtype == np.bool_:
        return True
    if series.dtype != np.int64:
        return False
    values = series.to_numpy()
    return not values.size or max(abs(int(values.min())), abs(int(values.max()))) * values.size < 2**53


def group_sums(groups: SortedGroups, values: np.ndarray) -> np.ndarray:
    """The sum of whole-number or boolean ``values`` per group, as int64 (exact below 2**53 in any order, as pandas'
    sum is)."""
    return np.bincount(groups.ids, weights=np.asarray(values, dtype=np.int64), minlength=groups.n_groups).astype(
        np.int64
    )


def unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``: for one-dimensional int64 ``keys``, non-negative, the largest small
    against their number, by marking which occur and counting them, without a sort (issue 39); else numpy's."""
    if keys.dtype == np.int64 and keys.ndim == 1 and keys.size and int(keys.min()) >= 0:
        bound = int(keys.max()) + 1
        if bound <= max(4 * keys.size, 1 << 20):
            seen = np.zeros(bound, dtype=np.int64)
            seen[keys] = 1
            number = np.cumsum(seen)
            number -= 1
            return np.flatnonzero(seen), number[keys]
    return np.unique(keys, return_inverse=True)
