"""The progress bar both gate backends draw on stderr while judgments finish (on by default on a terminal)."""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(enabled: bool | None) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if enabled is None:
        enabled = sys.stderr.isatty()
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
        disable=not enabled,
    )
