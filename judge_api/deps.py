"""FastAPI dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy.orm import Session

from judge_api.db import session_factory


def get_session() -> Iterator[Session]:
    session = session_factory()()
    try:
        yield session
    finally:
        session.close()
