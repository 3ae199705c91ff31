"""API keys: Bearer on every /v1 route, scopes, projects (404 across projects), revocation, hashed storage, and the
open-on-loopback-only embedded default."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from judge_api.auth import hash_key, is_loopback

from .conftest import Api, ApiFactory, item, run_body, served_routes


def v1_routes(api: Api) -> list[tuple[str, str]]:
    app = api.client.app
    assert isinstance(app, FastAPI)
    return [(method, path) for method, path in served_routes(app) if path.startswith("/v1")]


def fill(path: str, run_id: str) -> str:
    return path.replace("{run_id}", run_id)


def reason(response: Any) -> str:
    """The error's text: FastAPI's ``detail``, or the ``message`` of the OTLP receiver's google.rpc.Status."""
    body = response.json()
    return str(body["detail"] if isinstance(body["detail"], str) else body["message"])


def test_every_v1_route_needs_a_bearer_key(secured: Api) -> None:
    run_id = secured.submit("alpha")["id"]
    routes = v1_routes(secured)
    assert len(routes) >= 12  # every route of the API is covered, including ones added later
    for method, path in routes:
        url = fill(path, run_id)
        missing = secured.client.request(method, url)
        assert missing.status_code == 401, (method, path, missing.text)
        assert "Authorization: Bearer" in reason(missing)
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong_scheme = secured.client.request(method, url, headers={"Authorization": f"Basic {secured.keys['alpha']}"})
        assert wrong_scheme.status_code == 401 and "Bearer <api key>" in reason(wrong_scheme)
        bogus = secured.client.request(method, url, headers={"Authorization": "Bearer djk_nope_nope"})
        assert bogus.status_code == 401 and reason(bogus) == "invalid API key"
    # health checks stay open (load balancers call them)
    assert secured.client.get("/healthz").status_code == 200
    assert secured.client.get("/healthz").json()["auth"] == "on"


def test_scopes_403_with_a_clear_message(secured: Api) -> None:
    run_id = secured.submit("alpha")["id"]
    read_only = secured.as_key("alpha-read")
    before = secured.row_counts()
    denied = secured.client.post("/v1/runs", json=run_body(), headers=read_only)
    assert denied.status_code == 403
    assert denied.json()["detail"].startswith("this API key lacks the 'submit' scope")
    assert "it has: read" in denied.json()["detail"]
    assert secured.client.post(f"/v1/runs/{run_id}/retry", headers=read_only).status_code == 403
    ratings = {
        "ratings": [
            {
                "item_id": "item-0",
                "system": "a",
                "aspect": "consistency",
                "rater": "r1",
                "value": 50,
                "scale_min": 1,
                "scale_max": 100,
            }
        ]
    }
    assert secured.client.post(f"/v1/runs/{run_id}/human-ratings", json=ratings, headers=read_only).status_code == 403
    assert secured.row_counts() == before
    # read works for the read-only key, admin may do everything in its project
    assert secured.client.get(f"/v1/runs/{run_id}", headers=read_only).status_code == 200
    admin = secured.as_key("alpha-admin")
    assert secured.client.post(f"/v1/runs/{run_id}/human-ratings", json=ratings, headers=admin).status_code == 201
    assert secured.client.post("/v1/runs", json=run_body(), headers=admin).status_code == 202


def test_other_projects_ids_are_404_not_403(secured: Api) -> None:
    alpha_run = secured.submit("alpha")["id"]
    beta_run = secured.submit("beta")["id"]
    beta = secured.as_key("beta")
    before = secured.row_counts()
    for method, path in v1_routes(secured):
        if "{run_id}" not in path:
            continue
        body: dict[str, Any] | None = None
        if path.endswith("human-ratings") and method == "POST":
            body = {
                "ratings": [
                    {
                        "item_id": "item-0",
                        "system": "a",
                        "aspect": "consistency",
                        "rater": "x",
                        "value": 10,
                        "scale_min": 1,
                        "scale_max": 100,
                    }
                ]
            }
        if path.endswith("label-queue") and method == "POST":
            body = {"n": 1}
        foreign = secured.client.request(method, fill(path, alpha_run), headers=beta, json=body)
        unknown = secured.client.request(method, fill(path, "run_doesnotexist00"), headers=beta, json=body)
        assert foreign.status_code == 404, (method, path, foreign.text)
        # exactly the answer an id that does not exist gets: nothing tells beta that alpha's run exists
        assert foreign.json()["detail"] == unknown.json()["detail"].replace("run_doesnotexist00", alpha_run)
    assert secured.row_counts() == before  # the foreign retry / ratings stored nothing
    listed = secured.client.get("/v1/runs", headers=beta).json()
    assert [r["id"] for r in listed["items"]] == [beta_run] and listed["total"] == 1
    own = secured.client.get(f"/v1/runs/{beta_run}/judgments", headers=beta).json()
    assert own["total"] == 4 and {j["run_id"] for j in own["items"]} == {beta_run}
    # the alpha keys see alpha only
    alpha_list = secured.client.get("/v1/runs", headers=secured.as_key("alpha-read")).json()
    assert [r["id"] for r in alpha_list["items"]] == [alpha_run]


def test_revoked_key_is_401(secured: Api) -> None:
    from judge_api.auth import revoke_key
    from judge_api.db import session_scope
    from judge_api.models import ApiKey

    headers = secured.as_key("beta")
    assert secured.client.get("/v1/runs", headers=headers).status_code == 200
    with session_scope() as session:
        key_id = session.query(ApiKey).filter(ApiKey.name == "beta").one().id
        assert revoke_key(session, key_id)
    response = secured.client.get("/v1/runs", headers=headers)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]
    assert secured.client.post("/v1/runs", json=run_body(), headers=headers).status_code == 401


def test_keys_are_stored_hashed(secured: Api) -> None:
    engine = create_engine(secured.database_url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, key_hash, name, scopes FROM api_keys")).all()
        dump = "\n".join(
            str(r)
            for table in ("api_keys", "projects")
            for r in connection.execute(text(f"SELECT * FROM {table}")).all()
        )
    engine.dispose()
    assert len(rows) == 4
    for name, secret in secured.keys.items():
        assert secret not in dump
        random_part = secret[len("djk_") + 12 + 1 :]  # djk_<key id>_<random>
        assert len(random_part) >= 30 and random_part not in dump
        row = next(r for r in rows if r.name == name)
        assert row.key_hash == hash_key(secret) and len(row.key_hash) == 64


def test_keys_cli_create_list_revoke(secured: Api) -> None:
    from typer.testing import CliRunner

    from dialogue_judge.cli import app as cli

    runner = CliRunner()
    created = runner.invoke(cli, ["keys", "create", "--project", "gamma", "--name", "ci", "--scope", "read"])
    assert created.exit_code == 0, created.output
    secret = created.output.strip().splitlines()[-1].strip()
    key_id = created.output.split()[1]
    assert secret.startswith("djk_")
    response = secured.client.get("/v1/runs", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200 and response.json()["total"] == 0
    listed = runner.invoke(cli, ["keys", "list"])
    assert key_id in listed.output and "gamma" in listed.output and secret not in listed.output
    revoked = runner.invoke(cli, ["keys", "revoke", key_id])
    assert revoked.exit_code == 0
    assert secured.client.get("/v1/runs", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    bad_scope = runner.invoke(cli, ["keys", "create", "--scope", "superuser"])
    assert bad_scope.exit_code != 0 and "scopes must be" in bad_scope.output


def test_auth_off_serves_loopback_only_and_says_so(api_factory: ApiFactory) -> None:
    api = api_factory(auth=False)
    assert "loopback" in api.client.get("/healthz").json()["auth"]
    assert api.client.get("/v1/runs").status_code == 200  # TestClient is in-process
    from fastapi.testclient import TestClient

    remote = TestClient(api.client.app, client=("203.0.113.7", 5555), raise_server_exceptions=False)
    response = remote.get("/v1/runs")
    assert response.status_code == 401
    assert "DJ_AUTH=true" in response.json()["detail"] and "loopback" in response.json()["detail"]
    assert remote.post("/v1/runs", json=run_body()).status_code == 401
    loopback6 = TestClient(api.client.app, client=("::1", 5555))
    assert loopback6.get("/v1/runs").status_code == 200


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        (None, True),
        ("testclient", True),
        ("10.0.0.1", False),
        ("192.168.1.2", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("example.org", False),
        ("", False),
    ],
)
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_with_auth_on_remote_clients_are_served_with_a_key(secured: Api) -> None:
    from fastapi.testclient import TestClient

    remote = TestClient(secured.client.app, client=("203.0.113.7", 5555))
    assert remote.get("/v1/runs", headers=secured.as_key("alpha")).status_code == 200
    assert remote.get("/v1/runs").status_code == 401


def test_items_and_ratings_of_another_project_are_invisible(secured: Api) -> None:
    body = run_body(items=[item(0), item(1)])
    alpha_run = secured.submit("alpha", body)["id"]
    alpha = secured.as_key("alpha")
    ratings = {
        "ratings": [
            {
                "item_id": "item-0",
                "system": "a",
                "aspect": "consistency",
                "rater": "r",
                "value": 5,
                "scale_min": 1,
                "scale_max": 5,
            }
        ]
    }
    assert secured.client.post(f"/v1/runs/{alpha_run}/human-ratings", json=ratings, headers=alpha).status_code == 201
    beta = secured.as_key("beta")
    for suffix in ("items", "human-ratings", "judgments", "judgments.csv", "agreement", "report"):
        assert secured.client.get(f"/v1/runs/{alpha_run}/{suffix}", headers=beta).status_code == 404
    assert secured.client.get(f"/v1/runs/{alpha_run}/items", headers=alpha).json()["total"] == 2
