"""``dialogue-judge``: run the stack, submit runs, read reports, import ratings, manage keys, gate a build.

Exit codes: 0 success, 1 a gate found a regression, 2 bad input or the service could not do what was asked,
3 ``submit --wait``: the run finished with nothing usable (outcome 'failed': every judgment failed, could not be
parsed or was cancelled); a 'partial' run exits 0 with a warning.

One module per command group (``processes``, ``submit``, ``runs``, ``reports``, ``calibration``, ``admin``, ``rubrics``,
``importing``, ``generate``, ``facts``, ``gate``, ``monitor``), all built on ``support``; this module only assembles
them into the app the console script runs.
"""

from __future__ import annotations

import typer

from dialogue_judge.cli import (
    admin,
    calibration,
    facts,
    gate,
    generate,
    importing,
    monitor,
    processes,
    reports,
    rubrics,
    runs,
    submit,
)

app = typer.Typer(
    help="dialogue-judge: LLM-judge evaluation of dialogue consistency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# The order here is the order ``dialogue-judge --help`` lists the commands in (the groups come after them).
app.command("up")(processes.up)
app.command("demo")(processes.demo)
app.command("api")(processes.api)
app.command("worker")(processes.worker)
app.command("submit")(submit.submit)
app.command("report")(reports.report)
app.command("retry")(runs.retry)
app.command("requeue")(admin.requeue)
app.command("rubrics")(rubrics.rubrics)
app.command("simulator", context_settings=processes.SIMULATOR_CONTEXT)(processes.simulator)
app.command("import-ratings")(importing.import_ratings)
app.command("import-verdicts")(importing.import_verdicts)
app.command("agreement")(reports.agreement)
app.command("calibrated")(calibration.calibrated)
app.command("label-queue")(calibration.label_queue)
app.command("convert")(importing.convert)
app.command("generate")(generate.generate)
app.command("memory-audit")(facts.memory_audit_cmd)
app.command("import-mtbench")(importing.import_mtbench_cmd)
app.command("gate")(gate.gate)

app.add_typer(admin.keys_app, name="keys")
app.add_typer(runs.runs_app, name="runs")
app.add_typer(facts.facts_app, name="facts")
app.add_typer(monitor.monitor_app, name="monitor")


def main() -> None:
    app()
