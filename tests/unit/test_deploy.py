"""The deployment files: docker compose cannot run here (no engine), so its structure is checked instead."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_and_wiring() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "api", "worker", "dashboard", "local-judge"} <= set(services)
    api_env = services["api"]["environment"]
    assert api_env["DJ_AUTH"] == "true"  # compose enables auth
    assert api_env["DATABASE_URL"].startswith("postgresql+psycopg://") and "@postgres:5432/" in api_env["DATABASE_URL"]
    assert api_env["REDIS_URL"] == "redis://redis:6379/0"
    assert services["worker"]["environment"] == api_env
    for name in ("postgres", "redis", "api"):
        assert "healthcheck" in services[name], name
    assert services["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["worker"]["command"][:2] == ["dialogue-judge", "worker"]
    assert services["local-judge"]["profiles"] == ["local"]
    assert "--appendonly" in services["redis"]["command"]
    for value in api_env.values():  # no secret is baked into the file
        assert not str(value).startswith("sk-")


def test_dockerfile_targets_exist_for_compose() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    targets = {s["build"]["target"] for s in compose["services"].values() if "build" in s}
    for target in targets:
        assert f" AS {target}" in dockerfile
    for folder in ("judge_api", "workers", "dashboard", "dialogue_judge", "rubrics"):
        assert f"COPY {folder} ./{folder}" in dockerfile


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    first_screen = readme.split("---", 1)[0]
    assert "./scripts/demo.sh" in first_screen and "./scripts/test.sh" in first_screen
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci and "scripts/services.sh" in ci
