"""``Idempotency-Key`` on run submission: a retried ``POST /v1/runs`` (or ``/v1/runs/jsonl``) returns the run the
first request created instead of creating a second one.

The convention is Stripe's: a key names one logical request. The same key with the same request gets the stored
run back; the same key with a different request is a conflict (409); a request that fails validation stores no
key (fix it and send it again with the same key). Keys belong to a project (two projects may use the same key)
and are kept for ``DJ_IDEMPOTENCY_TTL`` (at least 24 h); an older key is forgotten and may be reused.

Race safety is the database's: the key row is inserted in the transaction that stores the run, and its primary key
(project, key) lets only one of two concurrent requests commit. The other rolls back (nothing of it is stored) and
answers with the winner's run. This module holds the rules (the header's format, the request's fingerprint, what
matches); the rows are read and written by ``judge_api.repository.idempotency_keys``.
"""

from __future__ import annotations

import hashlib
import re

from judge_api.repository.idempotency_keys import StoredKey
from judge_api.schemas import RunCreate

HEADER = "Idempotency-Key"
MAX_LENGTH = 255
_ALLOWED = re.compile(r"[A-Za-z0-9._:~+/=-]+")


class KeyFormatError(ValueError):
    """The header's value is not a usable key; the message says why."""


class KeyConflict(Exception):
    """The key was used for another request; the message says which and how it differs."""


def parse_key(raw: str | None) -> str | None:
    """The key of an ``Idempotency-Key`` header value (None: no header). A value in double quotes (the IETF
    draft's structured-field string) is taken without them."""
    if raw is None:
        return None
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value:
        raise KeyFormatError("must not be empty")
    if len(value) > MAX_LENGTH:
        raise KeyFormatError(f"is {len(value)} characters long; at most {MAX_LENGTH} are allowed")
    if not _ALLOWED.fullmatch(value):
        bad = sorted({c for c in value if not _ALLOWED.fullmatch(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        raise KeyFormatError(
            f"contains characters that are not allowed ({shown}); use letters, digits and - _ . : ~ + / = "
            "(a UUID is a good key)"
        )
    return value


def request_hash(request: RunCreate) -> str:
    """The fingerprint of a validated run request. Its canonical JSON keeps the order of mappings (the order of an
    item's candidates decides the pairs' presentation), so only a request that plans the same run matches. Fields
    at their default are left out: a deploy that adds a defaulted field does not turn a client's retry of the same
    body into a conflict, and a field sent at its default is the same request as one left out."""
    return hashlib.sha256(request.model_dump_json(exclude_defaults=True).encode("utf-8")).hexdigest()


def legacy_request_hash(request: RunCreate) -> str:
    """The fingerprint keys stored before defaulted fields were left out (every field in): a retry of such a key,
    within its time to live, still matches."""
    # the fields added since (webhooks) are left out when unset, as they were absent then
    added = {name for name in ("callback_url", "callback_secret") if getattr(request, name) is None}
    return hashlib.sha256(request.model_dump_json(exclude=added).encode("utf-8")).hexdigest()


def check_match(stored: StoredKey, key: str, endpoint: str, fingerprint: str, *also: str) -> str:
    """The stored run's id if this request is the one the key was first used for; else :class:`KeyConflict`."""
    when = stored.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    if stored.endpoint != endpoint:
        raise KeyConflict(
            f"{HEADER} {key!r} was used at {when} for POST {stored.endpoint} (run {stored.run_id}), not for "
            f"POST {endpoint}; send a new key for a new request"
        )
    if stored.request_hash not in (fingerprint, *also):
        raise KeyConflict(
            f"{HEADER} {key!r} was used at {when} for a request with a different body (run {stored.run_id}); "
            "a retry must send the same body, and a new request needs a new key"
        )
    return stored.run_id
