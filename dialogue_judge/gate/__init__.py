"""``dialogue-judge gate``: fail a build when responses got less consistent, and not on judge noise.

Exit codes (``GateResult.exit_code``):

* **0** no regression: every gated aspect's confidence interval lies on the safe side of the tolerance;
* **1** a regression: some aspect's interval lies beyond the tolerance (stated with effect size, CI and p-value);
* **2** the gate could not decide or could not run: bad input, mismatched items, judge unreachable, too many
  unparseable or failed verdicts, budget exhausted before a decision, or an interval that still contains the
  tolerance when the items ran out. Never a silent pass.

Flow: read both sides (``inputs``) -> one request with the systems ``baseline`` and ``candidate`` -> judge it in a
seeded random item order, in batches, in this process (``backends.LocalBackend`` over ``standalone``; SQLite, no
Redis) or on a running service (``backends.ApiBackend``: one run per batch) -> after each batch
``decision.GateDecider`` applies the sequential procedure of ``stats`` per aspect and stops when the verdict is
settled -> with ``calibrate: human``, ``calibrate`` decides instead on the calibrated (PPI++) drop from the two
runs' human labels -> ``result.GateResult`` -> Markdown, JUnit XML and JSON (``reports``). ``runner`` holds that
loop.

Modules, each importing only those listed before it (``tests/gate/test_gate_imports.py`` keeps it so):
``inputs``, ``stats``, ``outcome``, ``progress`` (no gate imports) -> ``reports``, ``config``, ``calibrate`` ->
``result`` -> ``decision`` -> ``standalone`` -> ``backends`` -> ``runner``. This package namespace re-exports what
the CLI and the pytest plugin use; import anything else from its module.
"""

from __future__ import annotations

from dialogue_judge.gate.config import GateConfig
from dialogue_judge.gate.inputs import GateInputError
from dialogue_judge.gate.reports import write_outputs
from dialogue_judge.gate.result import EXIT_CODES, AspectReport, CallStats, GateResult, Status
from dialogue_judge.gate.runner import parse_aspects, run_cli, run_gate

__all__ = [
    "EXIT_CODES",
    "AspectReport",
    "CallStats",
    "GateConfig",
    "GateInputError",
    "GateResult",
    "Status",
    "parse_aspects",
    "run_cli",
    "run_gate",
    "write_outputs",
]
