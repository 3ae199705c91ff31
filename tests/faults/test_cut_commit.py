"""A verdict write whose connection is cut while its commit is under way (a database outage that starts at that
moment) is retried by the writer; the retry must recognise its own committed rows rather than take them for lost
claims, whose calls the writer adds to the row again (a database outage once recorded 1,988 calls for the 1,950
the provider saw). Issue 29, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from judge_api import planning, repository
from judge_api.config import reset_settings_cache
from judge_api.db import get_engine, session_scope
from judge_api.migrate import upgrade
from judge_api.models import Judgment, utcnow
from judge_api.repository import claims
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate

VALUES = {"status": "done", "score": 3.0, "provider_calls": 1, "attempts": 1, "error": None}


@pytest.fixture
def judgment(settings_env: pytest.MonkeyPatch, db_url: str) -> int:
    settings_env.setenv("DATABASE_URL", db_url)
    reset_settings_cache()
    upgrade(db_url)
    request = RunCreate.model_validate(
        {
            "items": [{"id": "i0", "candidates": {"a": "x"}}],
            "rubrics": ["rsum-single"],
            "aspects": ["consistency"],
            "judges": ["openai:gpt-4o"],
        }
    )
    with session_scope() as session:
        planned = planning.plan_run(request, get_registry(), 100)
        run = repository.create_run(session, request, planned, rubrics=[get_registry().get("rsum-single")])
        return claims.pending_judgment_ids(session, run.id)[0]


def calls(judgment_id: int) -> int:
    with session_scope() as session:
        return int(session.scalar(select(Judgment.provider_calls).where(Judgment.id == judgment_id)) or 0)


def test_a_retried_write_knows_its_own_commit_by_its_stamp(judgment: int) -> None:
    engine = get_engine()
    token, _ = claims.claim_many(engine, [judgment], 30.0)
    stamp = utcnow()
    assert claims.write_verdicts(engine, [(judgment, token, VALUES)], stamp=stamp) == [True]
    # the commit went through but its answer was lost: the writer tries the same group again
    assert claims.write_verdicts(engine, [(judgment, token, VALUES)], stamp=stamp) == [True]
    assert calls(judgment) == 1  # written once, and not reported as a lost claim whose call is counted again


def test_a_claim_really_lost_is_still_reported_lost(judgment: int) -> None:
    engine = get_engine()
    token, _ = claims.claim_many(engine, [judgment], 30.0)
    other, _ = claims.claim_many(engine, [judgment], -1.0)  # its lease lapsed: another worker took it
    assert other != token
    assert claims.write_verdicts(engine, [(judgment, other, VALUES)], stamp=utcnow()) == [True]
    assert claims.write_verdicts(engine, [(judgment, token, VALUES)], stamp=utcnow()) == [False]
    assert calls(judgment) == 1
