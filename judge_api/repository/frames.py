"""Report frames: a run's judgments and human ratings as the DataFrames of docs/data-contract.md."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pandas as pd
import pyarrow as pa
from sqlalchemy import Table, bindparam, select
from sqlalchemy.orm import Session

from judge_api.facts import fact_sheet
from judge_api.models import (
    HumanRating,
    Judgment,
    RunItem,
)
from judge_api.repository import frame_columns

JUDGMENT_FRAME_COLUMNS = [
    "judgment_id",
    "run_id",
    "item_id",
    "mode",
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "rubric_id",
    "rubric_version",
    "order",
    "sample_index",
    "status",
    "score",
    "preference",
    "outcome",
    "len_a",
    "len_b",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "cost_usd",
    "cached",
    "source",
    "cached_input_tokens",
    "cache_write_tokens",
    "list_cost_usd",
    "cache_saved_usd",
    "provider_calls",
]
_QUERY_COLUMNS = [*JUDGMENT_FRAME_COLUMNS, "judgment_scale_min", "judgment_scale_max"]


# the stored columns of the judgments frame, in its order (and of the streaming exports, repository.exports)
JUDGMENT_FRAME_SELECT = (
    Judgment.id,
    Judgment.run_id,
    Judgment.item_key,
    Judgment.mode,
    Judgment.system_a,
    Judgment.system_b,
    Judgment.aspect,
    Judgment.judge,
    Judgment.rubric_id,
    Judgment.rubric_version,
    Judgment.order,
    Judgment.sample_index,
    Judgment.status,
    Judgment.score,
    Judgment.preference,
    Judgment.outcome,
    Judgment.len_a,
    Judgment.len_b,
    Judgment.input_tokens,
    Judgment.output_tokens,
    Judgment.latency_ms,
    Judgment.cost_usd,
    Judgment.cached,
    Judgment.source,
    Judgment.cached_input_tokens,
    Judgment.cache_write_tokens,
    Judgment.list_cost_usd,
    Judgment.cache_saved_usd,
    Judgment.provider_calls,
    Judgment.scale_min,
    Judgment.scale_max,
)


_JUDGMENTS_QUERY = select(*JUDGMENT_FRAME_SELECT).where(Judgment.run_id == bindparam("run_id")).order_by(Judgment.id)


FRAME_CHUNK = 50_000
"""Judgments read per round trip of the cursor: the driver's tuples of one chunk are turned into columns before
the next is read, so they never all live at once (about 1 kB of Python objects per judgment; issue 39)."""

_STRING_COLUMNS: tuple[str, ...] = ("item_id", "mode", "system_a", "system_b", "aspect", "judge", "rubric_id")
_STRING_COLUMNS += ("rubric_version", "run_id", "order", "status", "outcome", "source")


def _chunk_frame(rows: Sequence[Any]) -> pd.DataFrame:
    """One chunk of the query's rows as columns, the strings in pandas' ``str`` dtype (Arrow: a few bytes per value
    instead of a Python object each), as ``stats.frames.validate_judgments`` would make them."""
    part = pd.DataFrame.from_records(rows, columns=_QUERY_COLUMNS, coerce_float=False)
    for col in _STRING_COLUMNS:
        part[col] = part[col].astype("str")
    return part


REPORT_PART_ROWS = 262_144
"""Rows per part of :func:`judgments_parts` (a part's frame is ~45 MB of every column at this size)."""


def judgments_parts(
    session: Session, run_id: str, *, readers: int = 1, rows: int | None = None
) -> Iterator[pd.DataFrame]:
    """The run's judgments as :func:`judgments_frame` gives them, in parts of ``rows`` (default
    ``REPORT_PART_ROWS``) consecutive rows (the last shorter), for a report that never holds every column of every
    row (``stats.parts``, issue 39).

    The columns are read as :func:`judgments_frame` reads them, as Arrow record batches; each part is made from the
    next ``rows`` rows when it is asked for, and the batches it took are let go. The parts' bounds are every ``rows``
    rows whatever the readers (the report's cost sums are added part by part). Another database gives its frame as
    one part."""
    rows = REPORT_PART_ROWS if rows is None else rows
    if rows < 1:
        raise ValueError(f"rows per part must be at least 1, not {rows}")
    connection = session.connection()
    if connection.dialect.name not in ("postgresql", "sqlite"):
        yield _finish(_rows_frame(session, run_id))
        return
    columns = _read_columns(session, run_id, readers)
    if not columns.num_rows:
        yield _finish(pd.DataFrame.from_records([], columns=_QUERY_COLUMNS, coerce_float=False))
        return
    schema = columns.schema
    batches = columns.to_batches()
    del columns  # held by its batches from here on: each is let go once its rows are in a part
    batches.reverse()  # taken from the end of the list: the next is the last
    while batches:
        taken: list[Any] = []
        wanted = rows
        while batches and wanted:
            batch = batches.pop()
            if batch.num_rows > wanted:  # the part ends inside this batch: the rest goes back for the next part
                batches.append(batch.slice(wanted))
                batch = batch.slice(0, wanted)
            taken.append(batch)
            wanted -= batch.num_rows
        part = pa.Table.from_batches(taken, schema=schema)
        del taken, batch
        yield frame_columns.to_pandas(part, run_id, _rubric_scale)
        del part


def _read_columns(session: Session, run_id: str, readers: int) -> Any:
    """The run's stored columns as an Arrow table (``frame_columns``: PostgreSQL's COPY, SQLite's chunks)."""
    connection = session.connection()
    table = cast(Table, Judgment.__table__)
    readers = min(readers, available_cpus())
    if connection.dialect.name == "postgresql":
        # a COPY keeps two CPUs busy already (the server writes the CSV as this process parses it): one part per two
        # (on 2 CPUs two parts took 6.59 s where one COPY took 5.77, at 1M)
        readers = min(readers, max(1, available_cpus() // 2))
        return frame_columns.read_postgresql(connection, table, run_id, readers=readers)
    from judge_api.repository.report_cache import finished_state

    state = functools.partial(finished_state, session, run_id)
    return frame_columns.read_sqlite(connection, table, run_id, FRAME_CHUNK, readers=readers, state=state)


def judgments_frame(session: Session, run_id: str, *, readers: int = 1) -> pd.DataFrame:
    """The run's judgments as the statistics library's frame (docs/data-contract.md).

    Read as columns (``repository.frame_columns``: PostgreSQL's COPY parsed by pyarrow, SQLite's tuples turned
    into Arrow columns chunk by chunk), never as a Python object per value (issue 39). The string columns are
    categoricals with sorted categories, marked ``stats.frames.ENCODED``: the report keeps them encoded.

    A large run is read by up to ``readers`` readers at once (the API passes ``DJ_FRAME_READERS``), never more than
    this process's CPUs (:func:`frame_columns.read_sqlite`, :func:`frame_columns.read_postgresql`)."""
    if session.connection().dialect.name not in ("postgresql", "sqlite"):
        return _finish(_rows_frame(session, run_id))
    columns = _read_columns(session, run_id, readers)
    if not columns.num_rows:
        return _finish(pd.DataFrame.from_records([], columns=_QUERY_COLUMNS, coerce_float=False))
    return frame_columns.to_pandas(columns, run_id, _rubric_scale)


def available_cpus() -> int:
    """The CPUs this process may run on: ``DJ_FRAME_READERS`` readers beyond them only wait for each other (each
    child also pays its start: 16 on 2 cores took 19.5 s where one took 4.6, review r53a)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _rubric_scale(rubric_id: str) -> tuple[float, float]:
    """A rubric's scale from the registry (NaN, NaN for a rubric no longer loaded or without one)."""
    from judge_api.rubrics import get_registry

    registry = get_registry()
    scale = registry.get(rubric_id).scale if rubric_id in registry else None
    return (float(scale[0]), float(scale[1])) if scale else (float("nan"), float("nan"))


def _rows_frame(session: Session, run_id: str) -> pd.DataFrame:
    """The frame from the driver's tuples, chunk by chunk (any database; the columnar readers give the same)."""
    result = session.connection().execute(_JUDGMENTS_QUERY, {"run_id": run_id})
    parts: list[pd.DataFrame] = []
    try:
        cursor = result.cursor
        while cursor is not None:
            rows = cursor.fetchmany(FRAME_CHUNK)
            if not rows:
                break
            parts.append(_chunk_frame(rows))
            del rows
    finally:
        result.close()
    if not parts:
        return pd.DataFrame.from_records([], columns=_QUERY_COLUMNS, coerce_float=False)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _finish(frame: pd.DataFrame, encoded: bool = True) -> pd.DataFrame:
    """The stored columns made the contract's: booleans, each judgment's scale (its own, else its rubric's), the
    strings as categoricals with sorted categories (as ``frame_columns.to_pandas`` makes them; ``encoded=False``:
    pandas' ``str``, the frame before issue 39's encoding, for the tests)."""
    from judge_api.stats.frames import ENCODED, encode_strings  # lazily: the statistics library loads scipy

    if len(frame):
        frame["cached"] = frame["cached"].astype(bool)  # SQLite's driver gives 0/1 (the ORM's type converted them)
    scales = {rubric_id: _rubric_scale(rubric_id) for rubric_id in frame["rubric_id"].unique()}
    # an imported score carries the scale it was given on; the service's own take their rubric's
    own_min = pd.to_numeric(frame.pop("judgment_scale_min"), errors="coerce").astype(float)
    own_max = pd.to_numeric(frame.pop("judgment_scale_max"), errors="coerce").astype(float)
    frame["scale_min"] = own_min.fillna(frame["rubric_id"].map({r: s[0] for r, s in scales.items()}).astype(float))
    frame["scale_max"] = own_max.fillna(frame["rubric_id"].map({r: s[1] for r, s in scales.items()}).astype(float))
    frame["score"] = frame["score"].astype(float)
    frame["preference"] = frame["preference"].astype(float)
    if encoded:
        frame = encode_strings(frame, _STRING_COLUMNS)
        frame.attrs[ENCODED] = True
    return frame


RATING_FRAME_COLUMNS = [
    "item_id",
    "system",
    "system_b",
    "aspect",
    "rater",
    "kind",
    "value",
    "scale_min",
    "scale_max",
    "turn",
    "tie_inconsistent",
]


_RATING_READ = (
    HumanRating.item_key,
    HumanRating.system,
    HumanRating.system_b,
    HumanRating.aspect,
    HumanRating.rater,
    HumanRating.kind,
    HumanRating.value,
    HumanRating.scale_min,
    HumanRating.scale_max,
    HumanRating.meta,
)


def _rating_meta(meta: dict[str, Any] | None) -> tuple[Any, bool]:
    """(turn, tie_inconsistent) of a rating's meta."""
    meta = meta or {}
    return meta.get("turn"), bool(meta.get("tie_inconsistent", False))


def ratings_frame(session: Session, run_id: str, item_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The run's human ratings (only those of ``item_ids`` when given) in the order they were first written."""
    # the columns, not ORM objects: a run's tens of thousands of ratings are read by every agreement page (issue 39)
    query = select(*_RATING_READ).where(HumanRating.run_id == run_id)
    if item_ids is not None:
        query = query.where(HumanRating.item_key.in_(list(item_ids)))
    rows = session.execute(query.order_by(HumanRating.id))
    records = [
        (item, system, system_b or None, aspect, rater, kind, value, low, high, *_rating_meta(meta))
        for item, system, system_b, aspect, rater, kind, value, low, high, meta in rows
    ]
    return pd.DataFrame(records, columns=RATING_FRAME_COLUMNS)


def fact_labels_frame(session: Session, run_id: str) -> pd.DataFrame:
    """The run's fact-check labels (``stats.facts``, docs/data-contract.md): one row per fact a finished fact-check
    judgment labelled, with the fact's text from the item's fact sheet; one row with ``fact_id`` None for a finished
    judgment that labelled none (empty sheet, unparseable, failed). Empty when the run has no fact-check judgment.

    A judgment is a fact-check judgment when its rubric has the ``fact_check`` parser in the registry, or (a rubric
    no longer loaded) when its details carry fact labels."""
    from judge_api.stats.facts import FACT_COLUMNS

    facts_rubrics, others = _rubrics_with_parser(session, run_id, "fact_check")
    if not facts_rubrics and not others:
        return pd.DataFrame(columns=FACT_COLUMNS)
    query = (
        select(
            Judgment.id,
            Judgment.item_key,
            Judgment.system_a,
            Judgment.judge,
            Judgment.rubric_id,
            Judgment.aspect,
            Judgment.sample_index,
            Judgment.status,
            Judgment.details,
        )
        .where(
            Judgment.run_id == run_id,
            Judgment.mode == "single",
            Judgment.rubric_id.in_(facts_rubrics + others),
            Judgment.status.in_(("done", "unparseable", "failed")),
        )
        .order_by(Judgment.id)
    )
    rows = [r for r in session.execute(query).all() if r.rubric_id in facts_rubrics or _has_fact_labels(r.details)]
    if not rows:
        return pd.DataFrame(columns=FACT_COLUMNS)
    keys = sorted({r.item_key for r in rows})
    texts: dict[tuple[str, str], str] = {}
    for key, payload in session.execute(
        select(RunItem.item_key, RunItem.payload).where(RunItem.run_id == run_id, RunItem.item_key.in_(keys))
    ):
        for fact in fact_sheet(payload or {}):
            texts[(key, fact["id"])] = fact["text"]
    records: list[dict[str, object]] = []
    for r in rows:
        base = {
            "judgment_id": r.id,
            "item_id": r.item_key,
            "system": r.system_a,
            "judge": r.judge,
            "rubric_id": r.rubric_id,
            "aspect": r.aspect,
            "sample_index": r.sample_index,
            "status": r.status,
        }
        labelled = (r.details or {}).get("facts") if r.status == "done" else None
        if not labelled:
            records.append({**base, "fact_id": None, "text": None, "source": None, "label": None, "evidence": None})
            continue
        records += [
            {
                **base,
                "fact_id": f["id"],
                "text": texts.get((r.item_key, f["id"])),
                "source": f.get("source"),
                "label": f["label"],
                "evidence": f.get("evidence") or "",
            }
            for f in labelled
        ]
    return pd.DataFrame.from_records(records, columns=FACT_COLUMNS)


def _has_fact_labels(details: object) -> bool:
    return isinstance(details, dict) and isinstance(details.get("facts"), list) and "contradiction_rate" in details


def _rubrics_with_parser(session: Session, run_id: str, parser: str) -> tuple[list[str], list[str]]:
    """The run's rubric ids whose rubric has ``parser`` in the registry, and those no longer loaded."""
    from judge_api.rubrics import get_registry

    registry = get_registry()
    rubric_ids = session.scalars(select(Judgment.rubric_id).where(Judgment.run_id == run_id).distinct()).all()
    known = [r for r in rubric_ids if r in registry and registry.get(r).parser == parser]
    return known, [r for r in rubric_ids if r not in registry]


def memory_audit_frame(session: Session, run_id: str) -> pd.DataFrame:
    """The run's memory-audit judgments as ``stats.memory.audit_rows`` (docs/data-contract.md): one row per finished
    single judgment of a rubric with the ``memory_audit`` parser (or, a rubric no longer loaded, whose details carry
    a memory audit) with its precision, recall, F1 and error counts. Empty when the run has none."""
    from judge_api.stats.memory import AUDIT_COLUMNS, FINISHED, audit_rows

    audit_rubrics, others = _rubrics_with_parser(session, run_id, "memory_audit")
    if not audit_rubrics and not others:
        return pd.DataFrame(columns=AUDIT_COLUMNS)
    query = (
        select(
            Judgment.item_key.label("item_id"),
            Judgment.system_a,
            Judgment.judge,
            Judgment.rubric_id,
            Judgment.aspect,
            Judgment.status,
            Judgment.details,
        )
        .where(
            Judgment.run_id == run_id,
            Judgment.mode == "single",
            Judgment.rubric_id.in_(audit_rubrics + others),
            Judgment.status.in_(FINISHED),
        )
        .order_by(Judgment.id)
    )
    rows = [
        r._asdict()
        for r in session.execute(query).all()
        if r.rubric_id in audit_rubrics or _has_memory_audit(r.details)
    ]
    return audit_rows(rows)


def _has_memory_audit(details: object) -> bool:
    return isinstance(details, dict) and isinstance(details.get("generated"), list) and "error_shares" in details
