"""Column names, validation and empty frames for the statistics library.

Follows ``docs/data-contract.md``: a *judgments frame* (one row per stored judgment, single or pairwise
mode, any status) and a *human ratings frame* (one row per human score or preference vote).

``validate_judgments`` / ``validate_ratings`` are the single entry point every public statistic goes
through.  They accept the full contract frame, and also a hand-built frame that only carries the key
columns: missing optional columns are filled with neutral defaults (NaN scores, ``sample_index`` 0,
zero tokens, ...).  Unknown ``mode`` / ``status`` / ``order`` / ``outcome`` values raise ``ValueError``
rather than being dropped silently.  Pairwise rows that carry only one of ``preference`` / ``outcome``
get the other from the contract's default mapping (+-2 -> win/loss, +-1 and 0 -> tie; win/tie/loss ->
+2/0/-2).

``jsonable`` turns numpy / pandas scalars and containers into plain Python objects, NaN and inf into
``None``: every report section goes through it so that ``json.dumps(report, allow_nan=False)`` works.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

# --- judgments frame -------------------------------------------------------------------------------
JUDGMENT_ID = "judgment_id"
RUN_ID = "run_id"
ITEM_ID = "item_id"
MODE = "mode"
SYSTEM_A = "system_a"
SYSTEM_B = "system_b"
ASPECT = "aspect"
JUDGE = "judge"
RUBRIC_ID = "rubric_id"
RUBRIC_VERSION = "rubric_version"
ORDER = "order"
SAMPLE_INDEX = "sample_index"
STATUS = "status"
SCORE = "score"
SCALE_MIN = "scale_min"
SCALE_MAX = "scale_max"
PREFERENCE = "preference"
OUTCOME = "outcome"
LEN_A = "len_a"
LEN_B = "len_b"
CONFIDENCE = "confidence"
INPUT_TOKENS = "input_tokens"
OUTPUT_TOKENS = "output_tokens"
LATENCY_MS = "latency_ms"
COST_USD = "cost_usd"
CACHED_INPUT_TOKENS = "cached_input_tokens"
"""Of input_tokens, read from the provider's prompt cache (0 where not reported)."""
CACHE_WRITE_TOKENS = "cache_write_tokens"
LIST_COST_USD = "list_cost_usd"
"""The same tokens at list price (no cache, no batch); missing (NaN) for frames from before it was stored."""
CACHE_SAVED_USD = "cache_saved_usd"
CACHED = "cached"
PROVIDER_CALLS = "provider_calls"
"""Requests to the provider that it answered and billed for this judgment (retries that reached it included): none
for a cache hit, a reference metric or an imported verdict."""
SOURCE = "source"
"""Imported verdicts: the SHA-256 of the file they came from (None for the service's own judge calls)."""
REFERENCE_JUDGE = "reference"
"""The pseudo-judge of the reference metrics (``judge_api.reference_metrics.REFERENCE_JUDGE``)."""

SINGLE = "single"
PAIRWISE = "pairwise"
MODES = (SINGLE, PAIRWISE)

PENDING = "pending"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
UNPARSEABLE = "unparseable"
CANCELLED = "cancelled"
STATUSES = (PENDING, RUNNING, DONE, FAILED, UNPARSEABLE, CANCELLED)
FINISHED_STATUSES = (DONE, FAILED, UNPARSEABLE)
"""Statuses of judgments the judge was asked about (``cancelled`` ones never were)."""
STATUS_COLUMNS = ["n_total", "n_done", "n_failed", "n_unparseable", "n_pending", "n_cancelled"]
"""Per-group row counts; ``n_pending`` counts ``pending`` and ``running`` rows."""

ORDER_AB = "ab"
ORDER_BA = "ba"
ORDERS = (ORDER_AB, ORDER_BA)

WIN = "win"
TIE = "tie"
LOSS = "loss"
OUTCOMES = (WIN, TIE, LOSS)
OUTCOME_CODE: dict[str, int] = {WIN: 1, TIE: 0, LOSS: -1}

JUDGMENT_COLUMNS: tuple[str, ...] = (
    JUDGMENT_ID,
    RUN_ID,
    ITEM_ID,
    MODE,
    SYSTEM_A,
    SYSTEM_B,
    ASPECT,
    JUDGE,
    RUBRIC_ID,
    RUBRIC_VERSION,
    ORDER,
    SAMPLE_INDEX,
    STATUS,
    SCORE,
    SCALE_MIN,
    SCALE_MAX,
    PREFERENCE,
    OUTCOME,
    LEN_A,
    LEN_B,
    CONFIDENCE,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    LATENCY_MS,
    COST_USD,
    CACHED,
    SOURCE,
    CACHED_INPUT_TOKENS,
    CACHE_WRITE_TOKENS,
    LIST_COST_USD,
    CACHE_SAVED_USD,
    PROVIDER_CALLS,
)
JUDGMENT_REQUIRED: tuple[str, ...] = (ITEM_ID, MODE, SYSTEM_A, ASPECT, JUDGE, STATUS)

FLOAT_COLUMNS = (
    SCORE,
    SCALE_MIN,
    SCALE_MAX,
    PREFERENCE,
    LEN_A,
    LEN_B,
    CONFIDENCE,
    LATENCY_MS,
    COST_USD,
    LIST_COST_USD,
    CACHE_SAVED_USD,
)
_INT_COLUMNS = (SAMPLE_INDEX, INPUT_TOKENS, OUTPUT_TOKENS, CACHED_INPUT_TOKENS, CACHE_WRITE_TOKENS, PROVIDER_CALLS)
_OPTIONAL_STR_COLUMNS = (SYSTEM_B, ORDER, OUTCOME, SOURCE)
_STR_COLUMNS = (RUN_ID, ITEM_ID, MODE, SYSTEM_A, ASPECT, JUDGE, RUBRIC_ID, RUBRIC_VERSION, STATUS)

# --- human ratings frame ---------------------------------------------------------------------------
SYSTEM = "system"
RATER = "rater"
KIND = "kind"
VALUE = "value"
TURN = "turn"
TIE_INCONSISTENT = "tie_inconsistent"

KIND_SCORE = "score"
KIND_PREFERENCE = "preference"
KINDS = (KIND_SCORE, KIND_PREFERENCE)

RATING_COLUMNS: tuple[str, ...] = (
    ITEM_ID,
    SYSTEM,
    SYSTEM_B,
    ASPECT,
    RATER,
    KIND,
    VALUE,
    SCALE_MIN,
    SCALE_MAX,
    TURN,
    TIE_INCONSISTENT,
)
RATING_REQUIRED: tuple[str, ...] = (ITEM_ID, SYSTEM, ASPECT, RATER, KIND, VALUE)


def _check_required(df: pd.DataFrame, required: tuple[str, ...], what: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what} frame is missing required column(s): {', '.join(missing)}")


def _check_values(series: pd.Series, allowed: tuple[str, ...], column: str) -> None:
    present = series.dropna()
    bad = sorted({str(v) for v in pd.unique(present)} - set(allowed))
    if bad:
        raise ValueError(f"column {column!r} has unknown value(s) {bad}; allowed: {list(allowed)}")


def _as_str(series: pd.Series, encoded: bool = False) -> pd.Series:
    """A string column (pandas' ``str`` dtype), reusing the data when it already is one; with ``encoded``, a
    categorical of strings stays categorical (``encode_strings``' frames: no string is materialised)."""
    s = series.reset_index(drop=True)
    if encoded and isinstance(s.dtype, pd.CategoricalDtype) and s.cat.categories.inferred_type in ("string", "empty"):
        if not s.cat.categories.is_monotonic_increasing:
            # sorted, as encode_strings makes them: a group-by in category order is then in the strings' order, and
            # the report's lists do not depend on how a caller ordered its categories (review r57a)
            s = s.cat.reorder_categories(s.cat.categories.sort_values())
        return s
    return s if isinstance(s.dtype, pd.StringDtype) else s.astype("str")


def _optional_str(series: pd.Series, encoded: bool = False) -> pd.Series:
    """Strings with missing values as NA (empty strings count as missing)."""
    out = _as_str(series, encoded)
    if isinstance(series.dtype, pd.StringDtype) or series.dtype == object:
        empty = (out == "").fillna(False).to_numpy(dtype=bool)
        if empty.any():
            out = out.mask(empty)
    elif isinstance(out.dtype, pd.CategoricalDtype) and "" in out.cat.categories:  # kept encoded: "" -> missing
        out = out.cat.remove_categories([""])
    return out


def outcome_codes(outcomes: pd.Series) -> np.ndarray:
    """win / tie / loss as 1 / 0 / -1 (float64; NaN where missing or not an outcome): ``outcomes.map(OUTCOME_CODE)``,
    looked up once per distinct value instead of once per row (issue 39: 0.08-0.15 s per 370k Arrow strings)."""
    codes, uniques = pd.factorize(outcomes)
    table = np.array([*(OUTCOME_CODE.get(u, np.nan) for u in uniques), np.nan], dtype="float64")
    return table[codes]  # a missing value's code is -1: the last entry


def _filled_str(n: int, value: str | None, encoded: bool) -> pd.Series:
    """``n`` times ``value`` (None: missing) as a string column; with ``encoded`` the categorical ``encode_strings``
    makes of it, one byte a row instead of a string array built from a list of ``n`` Python objects."""
    if not encoded:
        return pd.Series([value] * n, dtype="str")
    categories = pd.Index([] if value is None else [value], dtype="str")
    codes = constant(np.int8(-1 if value is None else 0), n)
    return pd.Series(pd.Categorical.from_codes(codes, categories=categories), copy=False)


def constant(value: Any, n: int) -> np.ndarray:
    """``n`` times ``value`` (a numpy scalar: its type is the array's) in no memory per row: a read-only view that
    repeats one value (stride 0). A column the frame lacks is filled with its neutral default so (issue 39: the
    panel's rows lack 13 columns, 350 MB at 10M rows as arrays); a write to it raises instead of reaching every row,
    and a copy, a take or a concatenation of it is an ordinary array."""
    return np.broadcast_to(np.asarray(value), (n,))


def empty_judgments() -> pd.DataFrame:
    """An empty judgments frame with every contract column and its dtype."""
    return validate_judgments(pd.DataFrame({c: [] for c in JUDGMENT_REQUIRED}))


def empty_ratings() -> pd.DataFrame:
    """An empty human ratings frame with every contract column and its dtype."""
    return validate_ratings(pd.DataFrame({c: [] for c in RATING_REQUIRED}))


VALIDATED = "judge_api.stats.validated"
"""``DataFrame.attrs`` marker set on validated frames so that nested calls do not re-validate."""

ENCODED = "judge_api.stats.encoded"
"""``DataFrame.attrs`` marker of a frame whose string columns are categoricals of strings with sorted categories, as
``encode_strings`` makes them (``repository.judgments_frame``'s, built so from the database's columns):
``validate_judgments`` keeps them encoded, as with ``encoded=True`` (issue 39)."""

SUMMED = "judge_api.stats.summed"
"""``DataFrame.attrs`` marker of the frame of a run read in parts (``stats.parts.RunParts.frame``): its
``stats.parts.SUMMED_COLUMNS`` are placeholders, the figures made from them come with the frame as sums, and
``build_report`` refuses the frame without them."""

OWNED = "judge_api.stats.owned"
"""``DataFrame.attrs`` key of the columns of a frame whose arrays nothing else holds, writable
(``repository.judgments_frame``'s, made from the database's columns; :func:`owned_columns`): ``validate_judgments``
takes those columns that already have their type as they are instead of copying them (issue 39: 0.7 s and 150 MB at
1M rows), and pandas' copy-on-write copies one before either frame writes to it (a write through ``Series.array`` is
not guarded by copy-on-write: it would reach both). The key names each column with the address of its data, so a
column put in the frame since (attrs follow a frame through most operations) is copied like any other."""


def _data_address(series: pd.Series) -> int | None:
    """Where a numpy-backed column's data starts (None for any other column)."""
    values = series.array
    if isinstance(values, pd.Categorical):
        return int(values.codes.__array_interface__["data"][0])
    array = getattr(values, "_ndarray", None)
    return int(array.__array_interface__["data"][0]) if isinstance(array, np.ndarray) else None


def owned_columns(frame: pd.DataFrame) -> None:
    """Mark ``frame``'s columns as its own (``OWNED``): only for a frame just made from arrays nothing else holds."""
    frame.attrs[OWNED] = {str(col): _data_address(frame[col]) for col in frame.columns}


def _is_owned(df: pd.DataFrame, col: str) -> bool:
    """Whether ``df[col]`` is the column :func:`owned_columns` marked (not one put in the frame since)."""
    owned = df.attrs.get(OWNED)
    if not isinstance(owned, dict) or col not in owned:
        return False
    address = _data_address(df[col])
    return address is not None and owned[col] == address


def _is_validated(df: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    return bool(df.attrs.get(VALIDATED)) and tuple(df.columns) == columns


def _owned(values: np.ndarray) -> np.ndarray:
    """``values`` when it is an array of its own that can be written, else a copy: a conversion may give a read-only
    view of the caller's data or of a temporary one, and the validated frame is made without copying its columns."""
    return values if values.flags.writeable and values.flags.owndata else values.copy()


def _as_float(series: pd.Series, share: bool) -> pd.Series | np.ndarray:
    """A numeric column as float64 (anything else: NaN); with ``share``, a float64 column itself (a Series: pandas
    knows the data is shared and copies it before either frame writes to it)."""
    if share and series.dtype == np.float64:
        return series.reset_index(drop=True)
    values = series.to_numpy()
    if values.dtype == np.float64:  # already numbers: the coercion would give the same values back, more slowly
        return _owned(values)
    return _owned(pd.to_numeric(pd.Series(values, copy=False), errors="coerce").astype("float64").to_numpy())


def _as_int(series: pd.Series, share: bool) -> pd.Series | np.ndarray:
    """A whole-number column as int64 (missing or not a number: 0); with ``share``, an int64 column itself."""
    if share and series.dtype == np.int64:
        return series.reset_index(drop=True)
    values = series.to_numpy()
    if values.dtype == np.int64:
        return _owned(values)
    return _owned(pd.to_numeric(pd.Series(values, copy=False), errors="coerce").fillna(0).astype("int64").to_numpy())


def validate_judgments(df: pd.DataFrame, *, encoded: bool = False) -> pd.DataFrame:
    """Check a judgments frame and return a normalised copy (all contract columns, fixed dtypes); of a frame marked
    ``OWNED`` (the repository's), the columns that already have their type are taken as they are (``OWNED``).

    Raises ``ValueError`` when a required column is missing or a categorical column holds an
    unknown value.  Never drops rows.  A frame this function returned (or a row subset of it) is
    passed through unchanged. ``encoded``: string columns that are categoricals of strings stay categorical (the
    report's frames, ``encode_strings``; the values and the checks are the same)."""
    if _is_validated(df, JUDGMENT_COLUMNS):
        return df
    _check_required(df, JUDGMENT_REQUIRED, "judgments")
    encoded = encoded or bool(df.attrs.get(ENCODED))
    n = len(df)
    # the columns are gathered first and the frame made once without copying them again: each is a fresh array of
    # its own, or (a column ``OWNED`` marks) the caller's column itself where it already has its type
    out: dict[str, Any] = {}

    def text(col: str, optional: bool) -> pd.Series:
        if col not in df.columns:
            return _filled_str(n, None if optional else "", encoded)
        values = _optional_str(df[col], encoded) if optional else _as_str(df[col], encoded)
        # Arrow's strings cannot be written in place; a categorical's codes and Python strings can
        immutable = isinstance(values.dtype, pd.StringDtype) and values.dtype.storage == "pyarrow"
        return values if immutable or _is_owned(df, col) else values.copy()

    for col in _STR_COLUMNS:
        out[col] = text(col, optional=False)
    for col in _OPTIONAL_STR_COLUMNS:
        out[col] = text(col, optional=True)
    # a column the frame lacks is filled as it is (issue 39: the panel's rows lack 13 of them)
    for col in FLOAT_COLUMNS:
        out[col] = _as_float(df[col], _is_owned(df, col)) if col in df.columns else constant(np.float64(np.nan), n)
    for col in _INT_COLUMNS:
        out[col] = _as_int(df[col], _is_owned(df, col)) if col in df.columns else constant(np.int64(0), n)
    if CACHED not in df.columns:
        out[CACHED] = constant(np.bool_(False), n)
    elif _is_owned(df, CACHED) and df[CACHED].dtype == bool:
        out[CACHED] = df[CACHED].reset_index(drop=True)
    else:
        out[CACHED] = _owned(df[CACHED].fillna(False).astype(bool).to_numpy())
    if JUDGMENT_ID in df.columns:
        ids = df[JUDGMENT_ID]
        if _is_owned(df, JUDGMENT_ID) and ids.dtype == np.int64:
            out[JUDGMENT_ID] = ids.reset_index(drop=True)
        else:
            out[JUDGMENT_ID] = _owned(pd.to_numeric(ids, errors="coerce").to_numpy())
    else:
        out[JUDGMENT_ID] = np.arange(n, dtype="int64")
    if COST_USD not in df.columns:
        out[COST_USD] = constant(np.float64(0.0), n)
    if CONFIDENCE not in df.columns:
        out[CONFIDENCE] = constant(np.float64(1.0), n)
    if PROVIDER_CALLS not in df.columns:  # a frame from elsewhere: one call per finished verdict a judge was asked for
        asked = (
            out[STATUS].isin(FINISHED_STATUSES).to_numpy()
            & ~np.asarray(out[CACHED], dtype=bool)
            & out[SOURCE].isna().to_numpy()
            & (out[JUDGE] != REFERENCE_JUDGE).to_numpy()
        )
        out[PROVIDER_CALLS] = asked.astype("int64")

    # the reference metrics' pseudo-judge scores on 0..1 (judge_api.reference_metrics); its pseudo-rubric is in no
    # rubric folder, so a frame built from storage may not know that scale
    reference = (out[JUDGE] == REFERENCE_JUDGE).to_numpy()
    if reference.any():
        for col, bound in ((SCALE_MIN, 0.0), (SCALE_MAX, 1.0)):
            values = np.array(out[col], dtype="float64")
            values[reference & np.isnan(values)] = bound
            out[col] = values
    _check_values(out[MODE], MODES, MODE)
    _check_values(out[STATUS], STATUSES, STATUS)
    _check_values(out[ORDER], ORDERS, ORDER)
    _check_values(out[OUTCOME], OUTCOMES, OUTCOME)
    no_b = (out[MODE] == PAIRWISE).to_numpy() & out[SYSTEM_B].isna().to_numpy()
    if no_b.any():
        raise ValueError(f"{int(no_b.sum())} pairwise judgment row(s) have no system_b")

    # Fill outcome from preference (and the reverse) with the contract's default mapping.
    pairwise = (out[MODE] == PAIRWISE).to_numpy()
    pref = np.asarray(out[PREFERENCE], dtype="float64")
    outcome = out[OUTCOME]
    need_outcome = pairwise & outcome.isna().to_numpy() & ~np.isnan(pref)
    if need_outcome.any():
        outcome = _as_str(outcome)  # a categorical lacks the derived values (encode_strings encodes it again)
        derived = np.where(pref >= 2, WIN, np.where(pref <= -2, LOSS, TIE))
        out[OUTCOME] = outcome.mask(need_outcome, pd.Series(derived, index=outcome.index))
    need_pref = pairwise & np.isnan(pref) & out[OUTCOME].notna().to_numpy()
    if need_pref.any():
        code = out[OUTCOME].map(OUTCOME_CODE).astype("float64").to_numpy() * 2.0
        out[PREFERENCE] = np.where(need_pref, code, pref)
    frame = pd.DataFrame({col: out[col] for col in JUDGMENT_COLUMNS}, index=pd.RangeIndex(n), copy=False)
    frame.attrs[VALIDATED] = True
    return frame


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _load_glibc() -> tuple[Callable[[int], int] | None, Callable[[], _MallInfo2] | None]:
    """glibc's ``malloc_trim`` and ``mallinfo2`` (2.33+), where this process has them."""
    if not sys.platform.startswith("linux"):
        return None, None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl): its allocator returns memory its own way
        return None, None
    try:
        info = libc.mallinfo2
        info.restype = _MallInfo2
    except AttributeError:  # glibc before 2.33
        return trim, None
    return trim, info


_MALLOC_TRIM, _MALLINFO2 = _load_glibc()
RELEASE_AT_BYTES = 192 * 1024 * 1024
"""Free heap (glibc's ``fordblks``) from which :func:`release_freed` gives it back."""


def release_freed() -> None:
    """Give the memory freed since back to the system when the heap holds much of it (glibc's ``malloc_trim`` from
    ``RELEASE_AT_BYTES`` free; nothing elsewhere).

    glibc keeps the pages of arrays smaller than its mmap threshold (up to 32 MB) in its heap once they are freed: at
    10M rows ``item_scores`` left 707 MB resident for 195 MB of result, and the next step's arrays did not fit in
    the holes (issue 39). The report calls this between its steps. Below the line it does nothing: every page given
    back is faulted in again by the next step's arrays, 0.25 s of a 1M-row report that kept 20 MB less."""
    if _MALLOC_TRIM is None:
        return
    if _MALLINFO2 is not None and _MALLINFO2().fordblks < RELEASE_AT_BYTES:
        return
    _MALLOC_TRIM(0)


def validate_ratings(df: pd.DataFrame | None) -> pd.DataFrame:
    """Check a human ratings frame and return a normalised copy (``None`` gives an empty frame)."""
    if df is None:
        return empty_ratings()
    if _is_validated(df, RATING_COLUMNS):
        return df
    _check_required(df, RATING_REQUIRED, "ratings")
    n = len(df)
    out = pd.DataFrame(index=pd.RangeIndex(n))
    for col in (ITEM_ID, SYSTEM, ASPECT, RATER, KIND):
        out[col] = _as_str(df[col])
    if SYSTEM_B in df.columns:
        out[SYSTEM_B] = _optional_str(df[SYSTEM_B])
    else:
        out[SYSTEM_B] = pd.Series([None] * n, dtype="str")
    for col in (VALUE, SCALE_MIN, SCALE_MAX):
        src = df[col].to_numpy() if col in df.columns else np.full(n, np.nan)
        out[col] = pd.to_numeric(pd.Series(src), errors="coerce").astype("float64").to_numpy()
    turn = df[TURN].to_numpy() if TURN in df.columns else np.full(n, np.nan)
    out[TURN] = pd.to_numeric(pd.Series(turn), errors="coerce").astype("Int64")
    out[TIE_INCONSISTENT] = (
        df[TIE_INCONSISTENT].fillna(False).astype(bool).to_numpy() if TIE_INCONSISTENT in df.columns else False
    )
    _check_values(out[KIND], KINDS, KIND)
    is_pref = (out[KIND] == KIND_PREFERENCE).to_numpy()
    out.loc[is_pref & np.isnan(out[SCALE_MIN].to_numpy()), SCALE_MIN] = -1.0
    out.loc[is_pref & np.isnan(out[SCALE_MAX].to_numpy()), SCALE_MAX] = 1.0
    out = out[list(RATING_COLUMNS)]
    out.attrs[VALIDATED] = True
    return out


ENCODED_COLUMNS: tuple[str, ...] = (*_STR_COLUMNS, *_OPTIONAL_STR_COLUMNS)
"""The string columns ``encode_strings`` dictionary-encodes."""


def encode_strings(df: pd.DataFrame, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The frame with its string columns as categoricals whose categories are sorted (issue 39).

    Same values, same order when grouped (``groupby(sort=True)`` follows the categories, sorted as the strings sort;
    ``sort=False`` the order of first appearance, as for strings; pandas 3 groups observed categories only), but a
    take, a comparison or a group-by works on integer codes instead of Arrow strings: the report's frames are
    grouped and cut dozens of times. A validated frame stays marked as validated."""
    out = df.copy(deep=False)
    for col in ENCODED_COLUMNS if columns is None else columns:
        if col in out.columns and not isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype("category")
    out.attrs = dict(df.attrs)
    return out


def stack_encoded(first: pd.DataFrame, then: pd.DataFrame) -> pd.DataFrame:
    """``pd.concat([first, then], ignore_index=True)`` keeping categorical columns categorical (their categories
    united, sorted); a column categorical on one side only is encoded on the other first."""
    if then.empty:
        return first
    if first.empty:
        return then
    first, then = first.copy(deep=False), then.copy(deep=False)
    for col in first.columns:
        a, b = first[col], then[col] if col in then.columns else None
        if b is None:
            continue
        a_cat, b_cat = isinstance(a.dtype, pd.CategoricalDtype), isinstance(b.dtype, pd.CategoricalDtype)
        if not (a_cat or b_cat):
            continue
        a = a if a_cat else a.astype("category")
        b = b if b_cat else b.astype("category")
        union = a.cat.categories.union(b.cat.categories, sort=None)
        if not union.is_monotonic_increasing:
            union = union.sort_values()
        first[col] = a.cat.set_categories(union)
        then[col] = b.cat.set_categories(union)
    return pd.concat([first, then], ignore_index=True)


def sorted_codes(series: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Integer codes of a key column that sort as its values sort, and the values they stand for: a categorical's own
    codes when its categories are sorted (``encode_strings``), else a sorted factorisation (missing: -1)."""
    if isinstance(series.dtype, pd.CategoricalDtype) and series.cat.categories.is_monotonic_increasing:
        return series.cat.codes.to_numpy("int64"), series.cat.categories
    codes, uniques = pd.factorize(series, sort=True)
    return codes.astype("int64"), pd.Index(uniques)


def group_codes(df: pd.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """``df.groupby(keys, sort=False).ngroup()`` for key columns without missing values: the groups numbered 0, 1, ...
    in the order they first appear, counted on the columns' integer codes (a categorical's own, else a factorisation)
    instead of by pandas' group-by of several keys (issue 39: about 3x faster on 500k rows of five keys). A missing
    key value is a value of its own here; the group-by leaves such rows out, so a caller that means it passes none."""
    return factorize_codes(key_codes(df, keys))[0].astype(np.int64, copy=False)


def factorize_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(codes)`` of integer codes: the same labels and values, the codes hashed as int32 where they fit
    (issue 39: pandas' int64 table took 0.87 s for a 10M-row run's keys, its int32 table 0.25 s)."""
    if codes.size and codes.dtype == np.int64 and int(codes.min()) >= -(2**31) and int(codes.max()) < 2**31:
        labels, uniques = pd.factorize(codes.astype(np.int32))
        return labels, np.asarray(uniques, dtype=np.int64)
    labels, uniques = pd.factorize(codes)
    return labels, np.asarray(uniques)


def key_codes(df: pd.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """One non-negative int64 per row naming its tuple of ``keys``: equal tuples, equal codes (not numbered 0, 1, ...
    as :func:`group_codes` numbers them; a missing value is a value of its own). Mixed in place from each column's
    own narrow codes, so a million rows cost one int64 array, not one per key (issue 39)."""
    code = np.zeros(len(df), dtype=np.int64)
    bound = 1
    for col in keys:
        series = df[col]
        if isinstance(series.dtype, pd.CategoricalDtype):
            values, n_values = series.cat.codes.to_numpy(), len(series.cat.categories)
        else:
            values, uniques = pd.factorize(series)
            n_values = len(uniques)
        if bound * (n_values + 1) >= 2**62:  # renumber before the product could overflow
            code = pd.factorize(code)[0].astype(np.int64, copy=False)
            bound = int(code.max()) + 1 if code.size else 1
        code *= n_values + 1
        code += values
        code += 1
        bound *= n_values + 1
    return code


def left_join(left: pd.DataFrame, right: pd.DataFrame, keys: str | Sequence[str]) -> pd.DataFrame:
    """``left.merge(right, on=keys, how="left")``: the same rows in the same order, the same columns and values.

    When every key of ``left`` is a categorical of strings and every key of ``right`` a ``str`` column, the join is
    on ``left``'s category codes (``right``'s values looked up among the categories once), and the keys stay
    categoricals, their categories sorted as the strings sort: pandas would turn every one of ``left``'s keys into a
    string to compare them and give them back as strings, which every later group-by and cut then pays for (issue
    39: 1.3 s of the calibrated section at 1M rows); sorted, they group in the strings' order, as those would. A
    missing key joins a missing key, as pandas joins them; a value of ``right`` that ``left`` has not is joined to
    nothing. Any other frame is joined by pandas."""
    keys = [keys] if isinstance(keys, str) else list(keys)

    def coded(series: pd.Series) -> bool:
        return isinstance(series.dtype, pd.CategoricalDtype) and series.cat.categories.dtype == "str"

    if not keys or not all(coded(left[k]) and right[k].dtype == "str" for k in keys):
        return left.merge(right, on=keys, how="left")
    taken = {str(c) for c in (*left.columns, *right.columns)}
    prefix = "__left_join"
    while any(c.startswith(prefix) for c in taken):  # the join's own columns are named like none of theirs
        prefix += "_"
    names = [f"{prefix}{i}" for i in range(len(keys))]
    joinable = np.ones(len(right), dtype=bool)
    right_codes = []
    for key in keys:
        values = right[key]
        codes = left[key].cat.categories.get_indexer(values)
        joinable &= (codes >= 0) | values.isna().to_numpy()
        right_codes.append(codes)
    lhs = left.assign(**{n: left[k].cat.codes.to_numpy() for n, k in zip(names, keys, strict=True)})
    rhs = right.loc[joinable].drop(columns=keys)
    rhs = rhs.assign(**{n: c[joinable] for n, c in zip(names, right_codes, strict=True)})
    out = lhs.merge(rhs, on=names, how="left").drop(columns=names)
    for key in keys:
        categories = out[key].cat.categories
        if not categories.is_monotonic_increasing:
            out[key] = out[key].cat.reorder_categories(categories.sort_values())
    return out


def first_rows(codes: np.ndarray) -> np.ndarray:
    """The row where each group of ``group_codes`` first appears, in the groups' order."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    previous_max = np.maximum.accumulate(np.concatenate([[-1], codes[:-1]]))
    return np.flatnonzero(codes > previous_max)


def distinct(*series: pd.Series) -> list[str]:
    """Sorted distinct non-missing values of one or more string columns (fast on Arrow strings)."""
    values: set[str] = set()
    for s in series:
        values.update(str(v) for v in s.dropna().unique())
    return sorted(values)


def imported_judges(judgments: pd.DataFrame) -> dict[str, list[str]]:
    """Judges with imported verdicts (rows with a ``source``) -> the sources, sorted."""
    if SOURCE not in judgments.columns:
        return {}
    rows = judgments.loc[judgments[SOURCE].notna().to_numpy(), [JUDGE, SOURCE]].drop_duplicates()
    out: dict[str, list[str]] = {}
    for judge, source in zip(rows[JUDGE], rows[SOURCE], strict=True):
        out.setdefault(str(judge), []).append(str(source))
    return {judge: sorted(sources) for judge, sources in sorted(out.items())}


def is_value(series: pd.Series, value: str) -> np.ndarray:
    """``(series == value).to_numpy()`` as a boolean array; a categorical's codes compared with the value's code,
    without making a string per row to compare (issue 39: 0.25 s of each pair of judges at 10M rows)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        categories = series.cat.categories
        if value not in categories:
            return np.zeros(len(series), dtype=bool)
        return np.asarray(series.cat.codes.to_numpy() == categories.get_loc(value))
    return np.asarray(series.to_numpy() == value, dtype=bool)


def column(series: pd.Series) -> pd.Series:
    """A column ready to be put into a new frame with a RangeIndex (no dtype conversion)."""
    return series.reset_index(drop=True)


# --- JSON helpers -----------------------------------------------------------------------------------
def none_if_nan(x: Any) -> Any:
    """``None`` for NaN / inf / NA, a plain Python number otherwise."""
    if x is None or x is pd.NA:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if math.isfinite(f) else None
    return x


def jsonable(obj: Any) -> Any:
    """Recursively convert to JSON-safe Python objects (NaN / inf -> ``None``)."""
    if isinstance(obj, pd.DataFrame):
        return [jsonable(r) for r in obj.to_dict(orient="records")]
    if isinstance(obj, pd.Series):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, str):
        return obj
    if obj is None or obj is pd.NA or obj is pd.NaT:
        return None
    if isinstance(obj, (bool, np.bool_, int, np.integer, float, np.floating)):
        return none_if_nan(obj)
    try:
        if pd.isna(obj):
            return None
    except (TypeError, ValueError):
        pass
    return str(obj)
