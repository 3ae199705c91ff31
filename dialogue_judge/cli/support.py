"""What every command module of the CLI shares: the consoles, ``fail`` (a message and exit code 2), ``emit``
(machine-readable output), the API client from the options or the environment, and reading an items file. Every
module of ``dialogue_judge.cli`` may import it; it imports none of them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from dialogue_judge.client import ApiClient

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def emit(text: str) -> None:
    """Machine-readable output goes to stdout as is (rich would wrap long lines)."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def api_client(api: str | None, api_key: str | None) -> ApiClient:
    return ApiClient(
        api or os.environ.get("DJ_API_URL", "http://127.0.0.1:8000"), api_key or os.environ.get("DJ_API_KEY")
    )


def read_items(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise fail(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(f"{path}: not valid JSON: {exc}") from None
        items = data.get("items", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise fail(f"{path}: expected a list of items or {{'items': [...]}}")
        return items
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise fail(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    if not items:
        raise fail(f"{path}: no items")
    return items
