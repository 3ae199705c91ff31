"""The CLI's command surface: every command and sub-command of ``dialogue-judge`` is registered, in the order
``--help`` lists them, with the same arguments and options (flags, not help text). The CLI is a package of command
modules assembled in ``dialogue_judge/cli/__init__.py`` (issue 26, rooms); a command left unregistered, registered
twice or out of order, or an option lost on the way, fails here. A deliberate change to the surface updates
``SURFACE``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from typing import Any

import typer

from dialogue_judge.cli import app
from judge_api.config import REPO_ROOT

# command path -> its parameters in declaration order: ARGUMENT, or an option's flags joined by "/"
SURFACE: dict[str, str] = {
    "up": (
        "--api-port --dashboard-port --local-judge/--no-local-judge --local-judge-port --workers "
        "--dashboard/--no-dashboard --home"
    ),
    "demo": "--keep-running/--no-keep-running --file --judge --rubric --api-port",
    "api": "--host --port --workers",
    "worker": "--concurrency --pool --name --metrics-port",
    "submit": (
        "FILE --rubric/-r --judge/-j --mode/-m --baseline --pairing --confidence --max-calls --top-k --orders "
        "--aspect --samples --max-samples --sample-boundary --temperature --structured/--no-structured --reask "
        "--scoring --metric --metrics --tokenize --panel-judge --panel-aggregate --panel-quorum --budget --name "
        "--system --cache --wait/--no-wait --estimate --batch --batch-retry --format --api --api-key --retry-for"
    ),
    "report": "RUN_ID --format --n-boot --panel-judge --panel-aggregate --panel-quorum --human-prefix --api --api-key",
    "retry": "RUN_ID --unparseable --api --api-key",
    "requeue": "--all-pending/--no-all-pending",
    "rubrics": "",
    "simulator": "",
    "import-ratings": "RUN_ID FILE --format --scale-min --scale-max --api --api-key",
    "import-verdicts": (
        "RUN_ID FILE --format --judge --aspect --turn --item-id --scale-min --scale-max --rubric --api --api-key"
    ),
    "agreement": "RUN_ID --format --human-prefix --api --api-key",
    "calibrated": "RUN_ID --ci --format --n-boot --human-prefix --api --api-key",
    "label-queue": ("RUN_ID --n --strategy --seed --show --csv --scale-min --scale-max --format --api --api-key"),
    "convert": "DATASET FILE --limit --every-turn",
    "generate": "ITEMS --system/-s --output/-o --concurrency --max-tokens --memory-out --progress/--no-progress",
    "memory-audit": "FILE --format --n-boot --seed --judge/-j --rubric/-r --cache-dir --no-cache --workers",
    "import-mtbench": "FOLDER --turn --project",
    "gate": (
        "--baseline/-b --candidate/-c --baseline-responder --candidate-responder --generated-dir --judge/-j "
        "--metric --panel-aggregate --rubric/-r --aspect --mode/-m --items --max-drop --max-loss-rate --alpha "
        "--budget --seed --batch --sequential/--no-sequential --workers --api --api-key --cache-dir --no-cache "
        "--max-failed --baseline-system --candidate-system --name --worst --markdown --junit --json --structured "
        "--reask --progress/--no-progress --timeout --calibrate --calibrate-missing --calibrate-min-labels"
    ),
    "keys": "",
    "keys create": "--project --name --scope",
    "keys list": "",
    "keys revoke": "KEY_ID",
    "runs": "--limit --api --api-key",
    "runs delete": "RUN_IDS --api --api-key",
    "runs prune": "--older-than --dry-run --api --api-key",
    "runs export": "RUN_ID --out/-o --format --system --judge --aspect --status --mode --item-id --api --api-key",
    "runs import": "BUNDLE --api --api-key",
    "facts": "",
    "facts extract": (
        "FILE --judge/-j --output/-o --rubric/-r --cache-dir --no-cache --workers --allow-failed "
        "--progress/--no-progress"
    ),
    "monitor": "",
    "monitor create": (
        "--name --rubric/-r --judge/-j --aspect --sample-rate --daily-budget --retention-days --file --api --api-key"
    ),
    "monitor list": "--api --api-key",
    "monitor show": "MONITOR_ID --api --api-key",
    "monitor delete": "MONITOR_ID --api --api-key",
    "monitor log": "MONITOR_ID FILE --batch --api --api-key",
    "monitor series": "MONITOR_ID --bucket --by --aspect --rubric --since --format --api --api-key",
}


def _parameters(command: Any) -> str:
    return " ".join(
        p.name.upper() if p.param_type_name == "argument" else "/".join([*p.opts, *p.secondary_opts])
        for p in command.params
    )


def _walk(command: Any, path: list[str], found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if path:
        found.append((" ".join(path), _parameters(command)))
    for name in command.list_commands(None) if hasattr(command, "commands") else []:
        _walk(command.commands[name], [*path, name], found)
    return found


def test_every_command_is_registered_in_order_with_its_options() -> None:
    found = _walk(typer.main.get_command(app), [], [])
    assert [path for path, _ in found] == list(SURFACE)  # the order --help lists them in
    assert dict(found) == SURFACE


def test_the_console_script_and_python_m_run_the_same_app() -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["dialogue-judge"].partition(":")
    entry = getattr(importlib.import_module(module), function)
    assert entry.__module__ == "dialogue_judge.cli" and app is importlib.import_module(module).app
    shown = subprocess.run(
        [sys.executable, "-m", "dialogue_judge.cli", "runs", "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "python -m dialogue_judge.cli runs" in shown.stdout and "export" in shown.stdout
