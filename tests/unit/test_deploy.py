"""The deployment files: docker compose cannot run here (no engine), so its structure is checked instead."""

from __future__ import annotations

import itertools
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
    for folder in ("judge_api", "workers", "dashboard", "dialogue_judge", "rubrics", "strategies"):
        assert f"COPY {folder} ./{folder}" in dockerfile


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    first_screen = readme.split("---", 1)[0]
    assert "./scripts/demo.sh" in first_screen and "./scripts/test.sh" in first_screen
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci and "scripts/services.sh" in ci


def test_metrics_profile_scrapes_the_api_and_every_worker() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["prometheus"]["profiles"] == ["metrics"] and services["grafana"]["profiles"] == ["metrics"]
    worker_command = services["worker"]["command"]
    port = int(worker_command[worker_command.index("--metrics-port") + 1])
    mounts = {m.split(":")[1]: ROOT / m.split(":")[0] for m in services["prometheus"]["volumes"] if m.startswith("./")}
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["dialogue-judge-api"]["static_configs"][0]["targets"] == ["api:8000"]
    worker_sd = jobs["dialogue-judge-worker"]["dns_sd_configs"][0]
    assert worker_sd["names"] == ["worker"] and worker_sd["port"] == port  # every replica of --scale worker=N
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
    grafana_mounts = {m.split(":")[1]: ROOT / m.split(":")[0] for m in services["grafana"]["volumes"]}
    provisioning = grafana_mounts["/etc/grafana/provisioning"]
    providers = yaml.safe_load((provisioning / "dashboards" / "dialogue-judge.yml").read_text())["providers"]
    assert providers[0]["options"]["path"] in grafana_mounts
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"


def test_grafana_dashboard_panels_query_metrics_the_service_exports() -> None:
    """Every panel's query names only metrics that judge_api.metrics defines (or the API's queue collector), and
    the dashboard shows throughput, latency, 429s, cost and queue depth."""
    import json
    import re

    from prometheus_client import REGISTRY

    import judge_api.metrics  # noqa: F401  (registers the metrics)

    exported = set()
    for family in REGISTRY.collect():
        if family.name.startswith("dj_"):
            exported |= {family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_count"}
            exported.add(f"{family.name}_sum")
    exported |= {"dj_queue_depth", "dj_pending_judgments", "dj_oldest_pending_age_seconds", "dj_workers_alive"}
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "dialogue-judge.json").read_text())
    datasource_uid = yaml.safe_load(
        (ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"][0]["uid"]
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    queried: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource_uid
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            names = set(re.findall(r"\bdj_[a-z_]+", target["expr"]))
            assert names and names <= exported, names - exported
            queried |= names
    for needed in (
        "dj_judgments_total",  # throughput
        "dj_judge_call_duration_seconds_bucket",  # latency
        "dj_provider_rate_limited_total",  # 429s
        "dj_judge_cost_usd_total",  # cost
        "dj_queue_depth",
    ):
        assert needed in queried, needed


def test_metric_names_follow_prometheus_conventions() -> None:
    from prometheus_client import REGISTRY

    import judge_api.metrics

    families = [f for f in REGISTRY.collect() if f.name.startswith("dj_")]
    assert len(families) >= 12
    for family in families:
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
        if "duration" in family.name or "age" in family.name:
            assert family.name.endswith("_seconds"), family.name
    from prometheus_client.metrics import MetricWrapperBase

    defined = [m for m in vars(judge_api.metrics).values() if isinstance(m, MetricWrapperBase)]
    assert len(defined) == len(families)
    for metric in defined:  # bounded label sets: never a run or judgment id
        assert set(metric._labelnames) <= {"judge", "status", "outcome", "kind", "direction"}, metric._name


def test_the_monitor_alert_rule_ships_and_names_the_gauge() -> None:
    """deploy/prometheus-alerts.yml is mounted where prometheus.yml loads it, and its rule reads the gauge the API
    exports (judge_api/metrics.py AlertCollector)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = {
        m.split(":")[1]: ROOT / m.split(":")[0]
        for m in compose["services"]["prometheus"]["volumes"]
        if m.startswith("./")
    }
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    rules = yaml.safe_load(mounts["/etc/prometheus/alerts.yml"].read_text())
    (rule,) = [r for group in rules["groups"] for r in group["rules"]]
    assert "dialogue_judge_monitor_alert" in rule["expr"] and rule["expr"].endswith("== 1")
    assert {"monitor", "rule_index"} == set(rule["expr"].split("(")[1].split(")")[0].replace(" ", "").split(","))
    source = (ROOT / "judge_api" / "metrics.py").read_text()
    assert '"dialogue_judge_monitor_alert"' in source and 'labels=["monitor", "rule_index"]' in source


def _default(value: str) -> str:
    """A compose value with every ``${VAR:-default}`` replaced by its default (what runs when VAR is unset)."""
    import re

    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", re.sub(r"\$\{[A-Z0-9_]+\}", "", value))


def test_the_dashboard_is_safe_by_default() -> None:
    """Issue 42, finding 8: compose publishes the dashboard on loopback only, with its API URL fixed and no key of its
    own unless the operator gives one (then each visitor signs in with theirs)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    dashboard = compose["services"]["dashboard"]
    for mapping in dashboard.get("ports", []):
        published = _default(str(mapping))
        host = published.rpartition(":")[0]
        address = host.rpartition(":")[0] if host.count(":") else ""
        assert address == "127.0.0.1", f"the dashboard is published on {published!r}: bind it to 127.0.0.1"
    environment = dashboard["environment"]
    assert environment["DJ_API_URL"] == "http://api:8000"  # fixed by the deployment, not by visitors
    assert _default(str(environment.get("DJ_API_KEY", ""))) == ""  # no key unless the operator sets one
    assert "--server.address" in dashboard["command"]


def test_the_compose_dashboard_runs_with_the_stacks_options() -> None:
    """Issue 39: compose's dashboard runs with the options ``up`` and the benchmarks give it (no file watcher: it walks
    every module after each page's script), each option with its value."""
    from dialogue_judge.stack import DASHBOARD_OPTIONS

    command = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["dashboard"]["command"]
    given = dict(itertools.pairwise(command))
    for option, value in zip(DASHBOARD_OPTIONS[::2], DASHBOARD_OPTIONS[1::2], strict=True):
        assert given.get(option) == value, f"compose's dashboard lacks {option} {value}"
