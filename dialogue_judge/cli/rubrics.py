"""``dialogue-judge rubrics``: the rubrics this installation can judge with."""

from __future__ import annotations

import typer

from dialogue_judge.cli.support import emit, err, fail


def rubrics() -> None:
    """List the rubrics (shipped ones and those in DJ_RUBRICS_PATH)."""
    from judge_api.prefixes import rubric_prefix
    from judge_api.rubrics import RubricError, get_registry

    try:
        registry = get_registry(refresh=True)
    except RubricError as exc:
        raise fail(str(exc)) from None
    for rubric in registry.all():
        scale = f"{rubric.scale[0]:g}-{rubric.scale[1]:g}" if rubric.scale else "pairwise"
        emit(
            f"{rubric.id:<22} {rubric.kind:<9} {scale:<9} v{rubric.version}  aspects: {', '.join(rubric.aspect_names)}"
            f"  cacheable prefix: {rubric_prefix(rubric)}"
        )
    for name, reason in sorted(registry.errors.items()):
        err.print(f"[red]skipped {name}:[/red] {reason}", highlight=False)
    if registry.errors:
        raise typer.Exit(2)
