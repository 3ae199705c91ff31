"""API keys: stored hashed, scoped (submit, read, admin) and bound to a project.

A key sees only its project's runs: another project's ids answer 404, not 403, so ids do not leak. With auth off
(the embedded default, loopback only) every request acts as the default project with every scope.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from judge_api.config import get_settings
from judge_api.models import ApiKey, utcnow
from judge_api.repository import DEFAULT_PROJECT, ensure_project

SCOPES = ("submit", "read", "admin")
KEY_PREFIX = "djk_"


@dataclass(frozen=True)
class Principal:
    project_id: str
    scopes: frozenset[str]
    key_id: str | None = None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(session: Session, project_id: str, name: str, scopes: list[str]) -> tuple[ApiKey, str]:
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)} (got {scopes})")
    ensure_project(session, project_id)
    key_id = secrets.token_hex(6)
    secret = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(24)}"
    row = ApiKey(id=key_id, project_id=project_id, name=name, key_hash=hash_key(secret), scopes=list(scopes))
    session.add(row)
    session.flush()
    return row, secret


def revoke_key(session: Session, key_id: str) -> bool:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    return True


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at)))


def authenticate(session: Session, header: str | None) -> Principal:
    if not get_settings().auth_enabled:
        return Principal(DEFAULT_PROJECT, frozenset(SCOPES))
    if not header:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing 'Authorization: Bearer <api key>' header",
                            headers={"WWW-Authenticate": "Bearer"})
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "the Authorization header must be 'Bearer <api key>'",
                            headers={"WWW-Authenticate": "Bearer"})
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(token.strip())))
    if row is None or row.revoked_at is not None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key",
                            headers={"WWW-Authenticate": "Bearer"})
    return Principal(row.project_id, frozenset(row.scopes), row.id)


def require(scope: str):  # type: ignore[no-untyped-def]
    from judge_api.deps import get_session

    def dependency(request: Request, session: Session = Depends(get_session)) -> Principal:
        principal = authenticate(session, request.headers.get("authorization"))
        if scope not in principal.scopes and "admin" not in principal.scopes:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"this API key lacks the '{scope}' scope")
        request.state.principal = principal
        return principal

    return dependency
