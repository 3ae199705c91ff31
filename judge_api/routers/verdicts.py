"""Imported verdicts: ``POST /v1/runs/{id}/verdicts`` stores an external judge's scores and preferences in a run.

The body is either JSON (``schemas.VerdictsIn``: verdict rows plus their source) or a verdict file as it is, read
by ``judge_api.verdict_files``: CSV (``text/csv``), JSON Lines, FastChat's single or pairwise judgment files or
AlpacaEval's annotations (``?format=``; detected when not given), the file's SHA-256 computed here. Every row is
checked before anything is stored (422 naming the row and field; 409 for an imported judge name the run calls, or a
verdict another file already gave); the same file imported again stores nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.config import get_settings
from judge_api.deps import get_session, require, run_or_404
from judge_api.errors import field_error
from judge_api.guards import check_storable
from judge_api.schemas import (
    IMPORTED_JUDGE_PATTERN,
    VerdictFormat,
    VerdictIn,
    VerdictsImported,
    VerdictsIn,
    VerdictSource,
)
from judge_api.verdict_files import VerdictFileError, detect_format, read_verdict_file

router = APIRouter(tags=["verdicts"])

_JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "application/x-jsonlines")


def inlined_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` references replaced by the definitions (for ``openapi_extra``)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return walk({**defs[ref.rsplit("/", 1)[-1]], **rest})
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result = walk(schema)
    assert isinstance(result, dict)
    return result


_OPENAPI_BODY = {
    "requestBody": {
        "content": {
            "application/json": {"schema": inlined_schema(VerdictsIn.model_json_schema())},
            "text/csv": {"schema": {"type": "string"}},
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
        "required": True,
    }
}

Loc = list[str | int]


def _validation_error(loc: Loc, exc: ValidationError) -> HTTPException:
    first = exc.errors()[0]
    where = [*loc, *[p for p in first["loc"] if p != "__root__"]]
    message = str(first["msg"]).removeprefix("Value error, ")
    return field_error(where, message)


def _storable(loc: Loc, verdict: VerdictIn) -> None:
    try:
        check_storable(verdict)
    except HTTPException as exc:
        detail: dict[str, Any] = exc.detail[0] if isinstance(exc.detail, list) else {"loc": [], "msg": exc.detail}
        raise field_error([*loc, *list(detail["loc"])[1:]], str(detail["msg"])) from None


def _rows_of_json(body: bytes) -> tuple[VerdictsIn, list[tuple[Loc, VerdictIn]]]:
    try:
        request = VerdictsIn.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_error([], exc) from None
    return request, [(["verdicts", index], v) for index, v in enumerate(request.verdicts)]


@router.post(
    "/v1/runs/{run_id}/verdicts", status_code=201, response_model=VerdictsImported, openapi_extra=_OPENAPI_BODY
)
async def import_verdicts(
    request: Request,
    run_id: str,
    file_format: VerdictFormat | None = Query(
        None, alias="format", description="the body's format (default: JSON rows, or detected from the content)"
    ),
    judge: str | None = Query(
        None, pattern=IMPORTED_JUDGE_PATTERN, description="the judge name (overrides the file's)"
    ),
    aspect: str | None = Query(
        None, min_length=1, max_length=64, description="the aspect (default: the file's, or overall)"
    ),
    turn: int | None = Query(None, ge=1, le=100, description="FastChat files: only this turn's verdicts"),
    item_id: str | None = Query(
        None, max_length=200, description="FastChat files: item id template (default mtbench-{question_id}-t{turn})"
    ),
    name: str | None = Query(None, max_length=300, description="the file's name, kept with the verdicts"),
    rubric: str = Query("imported", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"),
    scale_min: float | None = Query(None, ge=-1e9, le=1e9, description="scores' scale when a row has none"),
    scale_max: float | None = Query(None, ge=-1e9, le=1e9),
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
) -> VerdictsImported:
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # reading, checking and storing a large file takes seconds: in the thread pool, not on the event loop
    return await run_in_threadpool(
        _import,
        body,
        content_type,
        run_id,
        file_format,
        judge,
        aspect,
        turn,
        item_id,
        name,
        rubric,
        scale_min,
        scale_max,
        principal,
        session,
    )


def _import(
    body: bytes,
    content_type: str,
    run_id: str,
    file_format: str | None,
    judge: str | None,
    aspect: str | None,
    turn: int | None,
    item_id: str | None,
    name: str | None,
    rubric: str,
    scale_min: float | None,
    scale_max: float | None,
    principal: Principal,
    session: Session,
) -> VerdictsImported:
    if (scale_min is None) != (scale_max is None) or (
        scale_min is not None and scale_max is not None and scale_min >= scale_max
    ):
        raise HTTPException(
            422,
            [
                {
                    "loc": ["query", "scale_min"],
                    "msg": "give scale_min below scale_max, or neither",
                    "type": "value_error",
                }
            ],
        )
    if name is not None and "\x00" in name:
        raise HTTPException(
            422, [{"loc": ["query", "name"], "msg": "contains a NUL character (\\u0000)", "type": "value_error"}]
        )
    run = run_or_404(session, run_id, principal)
    ignored: list[str] = []
    scale = (scale_min, scale_max) if scale_min is not None and scale_max is not None else None
    as_rows = file_format == "rows" or (
        file_format is None and content_type == "application/json" and body.lstrip()[:1] == b"{"
    )
    if as_rows:
        parsed, rows = _rows_of_json(body)
        check_storable(parsed)  # the source name too: it is kept with every verdict
        source = parsed.source
        if source.sha256 is None:
            canonical = json.dumps([v.model_dump(mode="json") for v in parsed.verdicts], sort_keys=True)
            source = source.model_copy(update={"sha256": hashlib.sha256(canonical.encode()).hexdigest()})
        rubric = parsed.rubric if rubric == "imported" else rubric
        if parsed.scale_min is not None and parsed.scale_max is not None:
            scale = (parsed.scale_min, parsed.scale_max)
        fmt: str = source.format
    else:
        try:
            if file_format is None and content_type == "text/csv":
                fmt = "csv"
            elif file_format is None and content_type in _JSONL_TYPES:
                fmt = detect_format(body, "verdicts.jsonl")
            else:
                fmt = file_format or detect_format(body, name)
            file = read_verdict_file(
                body,
                fmt,
                name=name,
                judge=judge,
                aspect=aspect,
                turn=turn,
                item_id=item_id,
                items=repository.get_items(session, run_id) if fmt == "alpacaeval" else (),
            )
        except VerdictFileError as exc:
            loc: Loc = [p for p in (exc.where, exc.field) if p] or ["file"]
            raise field_error(loc, exc.message) from None
        rows = []
        for where, fields in file.rows:
            try:
                rows.append(([where], VerdictIn.model_validate(fields)))
            except ValidationError as exc:
                raise _validation_error([where], exc) from None
        for loc, verdict in rows:
            _storable(loc, verdict)
        source = VerdictSource(name=name, sha256=file.sha256, format=file.format)  # type: ignore[arg-type]
        scale = scale or file.scale
        ignored = file.ignored_columns
        fmt = file.format
    try:
        created, unchanged, judges = repository.import_verdicts(
            session, run, rows, source, rubric=rubric, scale=scale, max_judgments=get_settings().max_judgments_per_run
        )
        session.commit()
    except repository.VerdictImportError as exc:
        session.rollback()
        raise field_error(exc.loc, exc.message, exc.status) from None
    except sa_exc.IntegrityError:
        session.rollback()  # a concurrent request stored the same verdicts first: nothing of ours was kept
        raise HTTPException(
            409, "these verdicts were written concurrently by another request; nothing was stored, send them again"
        ) from None
    return VerdictsImported(
        run_id=run_id,
        created=created,
        unchanged=unchanged,
        judges=judges,
        source=source,
        format=fmt,
        ignored_columns=ignored,
    )
