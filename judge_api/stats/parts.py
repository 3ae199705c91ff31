"""A run's report from its judgments read in parts (issue 39): no frame of every column of every row.

``build_report`` reads sixteen of the frame's 32 columns row by row (the keys, statuses, verdicts, scales, lengths
and ``cost_usd``). The other sixteen (ids, rubric, tokens, latency, prices, cache and import flags) feed only the
``counts`` by rubric and run, the ``cost`` section and the list of imported judges: sums and sets that parts of the
rows add up to. :class:`RunParts` takes the rows a part at a time (any split, in the run's order), keeps the sixteen
row columns of each and adds up the rest (:class:`RowSums`); :meth:`RunParts.frame` then gives the frame the report
reads, its summed columns held as one constant each (no memory per row; a column no section reads), marked
``frames.SUMMED``, and ``build_report(frame, sums=...)`` takes those figures from the sums.

What equals the report of the whole frame: every figure but the cost section's float totals and means, which are
sums of the parts' sums (the token counts are whole numbers: equal). With one part they are the same to the last
digit; with more they may differ in the last digits (``tests/stats/test_report_parts.py`` bounds it).

At 10M synthetic rows the kept columns are about half the frame (docs/scaling.md, session 57).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.report import PANEL_ROW_COLUMNS, CostSums, build_report, cost_sums

ROW_COLUMNS: tuple[str, ...] = (*PANEL_ROW_COLUMNS, F.COST_USD)
"""The columns the report's sections read row by row, kept for every row: what the item scores, the outcomes and the
status rows are made of (the panel's rows keep the same), and ``cost_usd`` (the panel's cost, the judges' against
humans)."""

SUMMED_COLUMNS: tuple[str, ...] = tuple(c for c in F.JUDGMENT_COLUMNS if c not in ROW_COLUMNS)
"""The columns only sums and sets of the report read (:class:`RowSums`): held as a constant in the parts' frame."""


@dataclass
class RowSums:
    """What the report reads of the summed columns, added up over the parts."""

    by_rubric: dict[str, Counter[str]] = field(default_factory=dict)
    """Rows per rubric and status."""
    runs: set[str] = field(default_factory=set)
    imported: dict[str, set[str]] = field(default_factory=dict)
    """Judges with imported verdicts -> the files (``source``) they came from."""
    cost: CostSums = field(default_factory=CostSums)
    cost_per_judge: dict[str, CostSums] = field(default_factory=dict)

    def add(self, part: pd.DataFrame) -> None:
        """Add one validated part's rows."""
        for rubric, statuses in part.groupby(F.RUBRIC_ID, sort=False, observed=True)[F.STATUS]:
            counts = self.by_rubric.setdefault(str(rubric), Counter())
            counts.update({str(s): int(n) for s, n in statuses.value_counts().items() if n})
        self.runs.update(F.distinct(part[F.RUN_ID]))
        for judge, sources in F.imported_judges(part).items():
            self.imported.setdefault(judge, set()).update(sources)
        overall, per_judge = cost_sums(part)
        self.cost = self.cost.plus(overall)
        for judge, sums in per_judge.items():
            self.cost_per_judge[judge] = self.cost_per_judge.get(judge, CostSums()).plus(sums)

    def counts(self) -> dict[str, Any]:
        """The ``counts`` section's figures of the summed columns."""
        return {
            "by_rubric": {r: {s: int(self.by_rubric[r].get(s, 0)) for s in F.STATUSES} for r in sorted(self.by_rubric)},
            "runs": sorted(self.runs),
        }

    def imported_judges(self) -> dict[str, list[str]]:
        """As ``frames.imported_judges`` of the whole frame."""
        return {judge: sorted(self.imported[judge]) for judge in sorted(self.imported)}

    def cost_sums(self) -> tuple[CostSums, Mapping[str, CostSums]]:
        return self.cost, self.cost_per_judge


class RunParts:
    """A run's judgments taken a part at a time: :meth:`add` each part (rows in the run's order, any number of
    rows), then :meth:`frame` and :attr:`sums` for ``build_report(frame, sums=sums)``, or :func:`report_from_parts`."""

    def __init__(self) -> None:
        self.sums = RowSums()
        self._columns: dict[str, list[Any]] = {c: [] for c in ROW_COLUMNS}
        self._n_rows = 0
        self._taken = False

    @property
    def n_rows(self) -> int:
        return self._n_rows

    def add(self, part: pd.DataFrame) -> None:
        """Validate one part (``frames.validate_judgments``: a bad value is refused as in the whole frame), add up its
        summed columns and keep its row columns."""
        if self._taken:
            raise RuntimeError("the parts' frame was already taken: add every part before calling frame()")
        if not len(part):
            return
        df = F.encode_strings(F.validate_judgments(part, encoded=True))
        self.sums.add(df)
        for col in ROW_COLUMNS:
            values = df[col].array
            self._columns[col].append(values if isinstance(values, pd.Categorical) else df[col].to_numpy())
        self._n_rows += len(df)

    def frame(self) -> pd.DataFrame:
        """The validated, encoded frame of every row's row columns, the summed columns as placeholders
        (``frames.SUMMED``). Each column is joined and its parts let go before the next: the parts and the frame are
        never held twice."""
        if self._taken:
            raise RuntimeError("the parts' frame was already taken")
        self._taken = True
        n = self._n_rows
        if n == 0:
            frame = F.encode_strings(F.empty_judgments())
            frame.attrs[F.ENCODED] = True
            return frame
        out: dict[str, Any] = {}
        for col in ROW_COLUMNS:
            pieces = self._columns.pop(col)
            out[col] = _joined(pieces)
            del pieces
        out.update(_placeholders(n))
        frame = pd.DataFrame({c: out.pop(c) for c in F.JUDGMENT_COLUMNS}, index=pd.RangeIndex(n), copy=False)
        frame.attrs.update({F.VALIDATED: True, F.ENCODED: True, F.SUMMED: True})
        return frame


def _joined(pieces: list[Any]) -> Any:
    """One column from its parts: numpy arrays concatenated; categoricals recoded to their sorted, united categories
    (what ``encode_strings`` makes of the whole column)."""
    if not isinstance(pieces[0], pd.Categorical):
        joined = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
        pieces.clear()
        return joined
    union = pieces[0].categories
    for piece in pieces[1:]:
        union = union.union(piece.categories, sort=False)
    union = union.sort_values()
    width = np.min_scalar_type(len(union))
    codes = np.empty(sum(len(p) for p in pieces), dtype=np.promote_types(width, np.int8))
    at = 0
    while pieces:
        piece = pieces.pop(0)
        where = union.get_indexer(piece.categories)
        if np.array_equal(where, np.arange(len(where))):  # the part's categories begin the union's: its own codes
            codes[at : at + len(piece)] = piece.codes
        else:
            codes[at : at + len(piece)] = np.append(where, -1)[piece.codes]  # a missing value's -1 takes the last
        at += len(piece)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(union))


def _placeholders(n: int) -> dict[str, Any]:
    """The summed columns of an ``n``-row frame: each one value repeated in no memory per row (``frames.constant``),
    missing where the column may be (strings, floats), else zero, of the type ``validate_judgments`` gives it."""
    missing = pd.Categorical.from_codes(F.constant(np.int8(-1), n), categories=pd.Index([], dtype="str"))
    out: dict[str, Any] = {}
    for col in SUMMED_COLUMNS:
        if col in F.ENCODED_COLUMNS:
            out[col] = pd.Series(missing, copy=False)
        elif col == F.CACHED:
            out[col] = F.constant(np.bool_(False), n)
        elif col in F.FLOAT_COLUMNS:
            out[col] = F.constant(np.float64(np.nan), n)
        else:
            out[col] = F.constant(np.int64(0), n)
    return out


def report_from_parts(parts: Iterable[pd.DataFrame], ratings: pd.DataFrame | None = None, **options: Any) -> dict:
    """``build_report`` of the run whose rows ``parts`` gives in order (``options``: ``build_report``'s), holding the
    row columns of every row and sums of the rest, never every column at once."""
    run = RunParts()
    for part in parts:
        run.add(part)
    # the list is the frame's only holder: the report lets its rows go once it has read them
    return build_report([run.frame()], ratings, sums=run.sums, **options)
