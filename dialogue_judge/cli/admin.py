"""``dialogue-judge keys create | list | revoke`` and ``requeue``: operating a deployment directly on its database
(DATABASE_URL) and broker (REDIS_URL), not through the API."""

from __future__ import annotations

import typer

from dialogue_judge.cli.support import console, fail

keys_app = typer.Typer(help="API keys (stored hashed; scopes: submit, read, admin).", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    project: str = typer.Option("default"),
    name: str = typer.Option("key"),
    scope: list[str] = typer.Option(["submit", "read"], "--scope"),
) -> None:
    """Create a key; the secret is printed once and stored only as a hash."""
    from judge_api.auth import create_key
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    try:
        with session_scope() as session:
            row, secret = create_key(session, project, name, list(scope))
            key_id = row.id
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"id {key_id}  project {project}  scopes {','.join(scope)}")
    console.print(secret, highlight=False)


@keys_app.command("list")
def keys_list() -> None:
    from judge_api.auth import list_keys
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    with session_scope() as session:
        for row in list_keys(session):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            console.print(f"{row.id}  {row.project_id:<16} {row.name:<20} {','.join(row.scopes):<20} {state}")


@keys_app.command("revoke")
def keys_revoke(key_id: str) -> None:
    from judge_api.auth import revoke_key
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    with session_scope() as session:
        if not revoke_key(session, key_id):
            raise fail(f"no active key {key_id!r}")
    console.print(f"revoked {key_id}")


def requeue(
    all_pending: bool = typer.Option(True, help="every pending judgment, not only stale ones"),
) -> None:
    """Re-enqueue judgments still pending in the database (after a Redis restart). Uses DATABASE_URL/REDIS_URL."""
    from judge_api.config import get_settings
    from judge_api.migrate import upgrade
    from judge_api.sweeper import requeue_stale

    settings = get_settings()
    if not settings.resolved_redis_url():
        raise fail("REDIS_URL is not set")
    upgrade(settings.resolved_database_url())
    try:
        sent = requeue_stale(settings, everything_pending=all_pending)
    except Exception as exc:
        raise fail(f"could not re-enqueue: {exc}") from None
    console.print(f"re-enqueued {sent} judgments")
