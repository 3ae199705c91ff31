"""API keys: stored hashed, scoped (submit, read, admin) and bound to a project.

A key sees only its project's runs: another project's ids answer 404, not 403, so ids do not leak. With auth
off (``DJ_AUTH=false``, the embedded default) every request acts as the default project with every scope, and
only loopback clients are served: a request from any other address gets 401 saying how to turn auth on.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from dataclasses import dataclass

from fastapi import HTTPException, status
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


# Starlette's TestClient (and ASGI tools such as schemathesis) report this pseudo host; a TCP peer never can.
_IN_PROCESS_HOSTS = frozenset({"testclient", "localhost"})
AUTH_OFF_NOTICE = (
    "auth is off (DJ_AUTH=false): serving loopback clients only, every request acts as "
    "project 'default' with every scope"
)


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1, IPv4-mapped loopback, Unix sockets (no host) and in-process test clients."""
    if host is None or host in _IN_PROCESS_HOSTS:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"})


def authenticate(session: Session, header: str | None, client_host: str | None = None) -> Principal:
    if not get_settings().auth_enabled:
        if not is_loopback(client_host):
            raise _unauthorized(
                "auth is off on this server (DJ_AUTH=false), so it only serves loopback clients; "
                "set DJ_AUTH=true and create keys with 'dialogue-judge keys create' to serve other hosts"
            )
        return Principal(DEFAULT_PROJECT, frozenset(SCOPES))
    if not header:
        raise _unauthorized("missing 'Authorization: Bearer <api key>' header")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("the Authorization header must be 'Bearer <api key>'")
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(token)))
    if row is None:
        raise _unauthorized("invalid API key")
    if row.revoked_at is not None:
        raise _unauthorized(f"this API key was revoked on {row.revoked_at:%Y-%m-%d %H:%M} UTC")
    return Principal(row.project_id, frozenset(row.scopes), row.id)
