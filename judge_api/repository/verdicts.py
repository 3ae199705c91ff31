"""Imported verdicts: an external judge's scores and preferences stored as finished judgments of a run, marked with
the SHA-256 of the file they came from (``Judgment.source``), so the report, agreement, bias, ranking and the gate
read them like the service's own while telling them apart.

Checked before anything is stored: every row's item and systems exist in the run, no imported judge name is a judge
the run calls (or a pseudo-judge), a score has a scale, no two rows are the same verdict. A verdict already stored
from the same file is left as it is (importing a file again stores nothing); one stored from another file, or a
judgment of the service's own, is a conflict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from judge_api.judges import JudgeSpecError, parse_judge
from judge_api.models import Judgment, Run, fresh_judgment_fields, utcnow
from judge_api.planning import PlannedJudgment, judge_refusal
from judge_api.reference_metrics import REFERENCE_JUDGE
from judge_api.repository.rows import INSERT_CHUNK, insert_judgment_rows
from judge_api.repository.runs import get_items, item_pks_for
from judge_api.rubrics import get_registry
from judge_api.schemas import VerdictIn, VerdictSource

IMPORTED_VERSION = "imported"
RESERVED_JUDGES = (REFERENCE_JUDGE, "panel")
_PREFERENCE = {"A": (2.0, "win"), "B": (-2.0, "loss"), "tie": (0.0, "tie")}

Loc = list[str | int]


class VerdictImportError(Exception):
    """A verdict that cannot be stored: ``status`` 422 (bad row) or 409 (conflict with the run), ``loc`` the field."""

    def __init__(self, status: int, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.loc = loc
        self.message = message


def _judge_keys(judges: Sequence[str]) -> set[str]:
    keys = set(judges)
    for judge in judges:
        with contextlib.suppress(JudgeSpecError):
            keys.add(parse_judge(judge).key)
    return keys


def _canonical(name: str) -> str:
    try:
        return parse_judge(name).key
    except JudgeSpecError:
        return name


def import_verdicts(
    session: Session,
    run: Run,
    verdicts: Sequence[tuple[Loc, VerdictIn]],
    source: VerdictSource,
    *,
    rubric: str = "imported",
    scale: tuple[float, float] | None = None,
    max_judgments: int | None = None,
) -> tuple[int, int, list[str]]:
    """Store ``verdicts`` (each with the ``loc`` its errors name) in the caller's transaction; returns (created,
    unchanged, judges). ``source.sha256`` must be set; ``scale`` applies to scores whose row gives none;
    ``max_judgments`` (DJ_MAX_JUDGMENTS): what the run may hold with them, as a submitted run."""
    assert source.sha256, "import_verdicts needs the source's sha256"
    candidates = {p["id"]: p.get("candidates") or {} for p in get_items(session, run.id)}
    registry = get_registry()
    # verdicts filed under a known rubric (so the gate can compare runs on it) score on that rubric's scale
    rubric_scale = registry.get(rubric).scale if rubric in registry else None
    scale = scale or rubric_scale
    run_judges = _judge_keys(list(run.config.get("judges") or []))
    planned: list[tuple[Loc, VerdictIn, str, tuple[float, float] | None]] = []
    seen: dict[str, Loc] = {}
    for loc, v in verdicts:
        texts = candidates.get(v.item_id)
        if texts is None:
            raise VerdictImportError(422, [*loc, "item_id"], f"item {v.item_id!r} is not in run {run.id}")
        for name, system in (("system", v.system), ("system_b", v.system_b)):
            if system is not None and system not in texts:
                known = ", ".join(sorted(texts))
                raise VerdictImportError(
                    422, [*loc, name], f"{system!r} is not a candidate of item {v.item_id!r} (candidates: {known})"
                )
        if v.judge in RESERVED_JUDGES:
            raise VerdictImportError(422, [*loc, "judge"], f"{v.judge!r} is a pseudo-judge of the report")
        refusal = _callable_judge_refusal(v.judge)
        if refusal is not None:
            raise VerdictImportError(422, [*loc, "judge"], refusal)
        if _canonical(v.judge) in run_judges:
            raise VerdictImportError(
                409,
                [*loc, "judge"],
                f"{v.judge!r} is a judge this run calls: imported verdicts need a judge name of their own",
            )
        row_scale = (v.scale_min, v.scale_max) if v.scale_min is not None and v.scale_max is not None else scale
        if v.mode == "single":
            if row_scale is None:
                raise VerdictImportError(
                    422, [*loc, "scale_min"], "a score needs its scale: give scale_min and scale_max"
                )
            if rubric_scale is not None and tuple(row_scale) != tuple(rubric_scale):
                raise VerdictImportError(
                    422,
                    [*loc, "scale_min"],
                    f"rubric {rubric!r} scores on {rubric_scale[0]:g}..{rubric_scale[1]:g}, these scores on "
                    f"{row_scale[0]:g}..{row_scale[1]:g}",
                )
            if v.score is not None and not row_scale[0] <= v.score <= row_scale[1]:
                raise VerdictImportError(
                    422, [*loc, "score"], f"{v.score:g} is outside the scale {row_scale[0]:g}..{row_scale[1]:g}"
                )
        plan = PlannedJudgment(
            v.item_id, v.mode, v.system, v.system_b, v.order, rubric, IMPORTED_VERSION, v.aspect, v.judge, 0
        )
        key = plan.dedup_key(run.id)
        if key in seen:
            where = " ".join(str(p) for p in seen[key])
            raise VerdictImportError(422, loc, f"the same verdict as {where} (item, systems, order, aspect, judge)")
        seen[key] = loc
        planned.append((loc, v, key, row_scale if v.mode == "single" else None))

    keys = list(seen)
    existing: dict[str, str | None] = {}
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        query = select(Judgment.dedup_key, Judgment.source).where(Judgment.dedup_key.in_(chunk))
        existing.update((key, source_hash) for key, source_hash in session.execute(query).tuples())
    item_pks = item_pks_for(session, run.id)
    params = {"imported": True, "format": source.format, "file": source.name, "sha256": source.sha256}
    now = utcnow()
    rows: list[dict[str, Any]] = []
    unchanged = 0
    for loc, v, key, row_scale in planned:
        if key in existing:
            if existing[key] == source.sha256:
                unchanged += 1
                continue
            whence = f"an import of another file (sha256 {existing[key]})" if existing[key] else "the service's own"
            raise VerdictImportError(
                409,
                loc,
                f"judge {v.judge!r} already has this verdict in run {run.id}, from {whence}; nothing was stored "
                "(import it under another judge name)",
            )
        texts = candidates[v.item_id]
        preference, outcome = _PREFERENCE[v.verdict] if v.verdict else (None, None)
        rows.append(
            {
                "dedup_key": key,
                "run_id": run.id,
                "item_pk": item_pks[v.item_id],
                "item_key": v.item_id,
                "mode": v.mode,
                "system_a": v.system,
                "system_b": v.system_b,
                "order": v.order,
                "rubric_id": rubric,
                "rubric_version": IMPORTED_VERSION,
                "aspect": v.aspect,
                "judge": v.judge,
                "judge_params": params,
                "sample_index": 0,
                "status": "unparseable" if v.unparseable else "done",
                "score": v.score,
                "verdict": v.verdict,
                "preference": preference,
                "outcome": outcome,
                "explanation": v.explanation,
                "details": {**v.details, "imported": True} if v.details else {"imported": True},
                "len_a": len(texts[v.system]),
                "len_b": len(texts[v.system_b]) if v.system_b else None,
                **fresh_judgment_fields(now),
                "source": source.sha256,
                "scale_min": row_scale[0] if row_scale else None,
                "scale_max": row_scale[1] if row_scale else None,
            }
        )
    if max_judgments is not None and run.n_judgments + len(rows) > max_judgments:
        raise VerdictImportError(
            422,
            ["verdicts"],
            f"run {run.id} holds {run.n_judgments} judgments: {len(rows)} more verdicts exceed the limit of "
            f"{max_judgments} per run (DJ_MAX_JUDGMENTS)",
        )
    for start in range(0, len(rows), INSERT_CHUNK):
        insert_judgment_rows(session, rows[start : start + INSERT_CHUNK])
    if rows:
        session.execute(update(Run).where(Run.id == run.id).values(n_judgments=Run.n_judgments + len(rows)))
    judges = sorted({v.judge for _, v in verdicts})
    return len(rows), unchanged, judges


def _callable_judge_refusal(name: str) -> str | None:
    """An imported verdict's judge is a name, never called; a name that is also a judge string the workers would
    call must pass the judge check a run's judges pass (planning.judge_refusal), so no row anywhere names a judge
    the allowlist refuses."""
    try:
        parse_judge(name)
    except ValueError:
        return None  # a label ("gpt-4 (paper)"), not a judge string
    refusal = judge_refusal(name)
    return None if refusal is None else f"{name!r} is a judge string this service refuses: {refusal}"


def imported_judges(session: Session, run_id: str) -> dict[str, list[str]]:
    """Judge name -> the SHA-256 of every file its verdicts in the run were imported from."""
    rows = session.execute(
        select(Judgment.judge, Judgment.source)
        .where(Judgment.run_id == run_id, Judgment.source.is_not(None))
        .distinct()
    ).tuples()
    out: dict[str, list[str]] = {}
    for judge, source in rows:
        out.setdefault(judge, []).append(str(source))
    return {judge: sorted(sources) for judge, sources in sorted(out.items())}
