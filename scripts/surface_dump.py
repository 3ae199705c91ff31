"""Dump the public surface (the API's OpenAPI schema, sorted JSON, and the ``--help`` of ``dialogue-judge`` and of
every sub-command) to stdout, so a refactor can be shown to leave it byte-identical: run it before and after, diff.

    PYTHONPATH=<checkout> python scripts/surface_dump.py > surface.txt
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# a fixed, plain terminal: help text wraps and renders the same in every run
os.environ.update(
    {"COLUMNS": "120", "LINES": "50", "TERM": "dumb", "NO_COLOR": "1", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
)
os.environ.pop("FORCE_COLOR", None)


def commands(command: Any, path: list[str]) -> list[list[str]]:
    """Every command path below ``command``, in the order ``--help`` lists them."""
    found = [path]
    for name in command.list_commands(None) if hasattr(command, "commands") else []:
        found += commands(command.commands[name], [*path, name])
    return found


def main() -> int:
    import typer
    from typer.testing import CliRunner

    from dialogue_judge.cli import app as cli
    from judge_api.app import app as api

    print("== openapi")
    print(json.dumps(api.openapi(), sort_keys=True, indent=1))
    runner = CliRunner()
    for path in commands(typer.main.get_command(cli), []):
        shown = runner.invoke(cli, [*path, "--help"], prog_name="dialogue-judge", color=False)
        print(f"== dialogue-judge {' '.join(path)} --help (exit {shown.exit_code})")
        print(shown.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
