"""What came out of the gate: ``GateResult``, the decided ``GateOutcome`` with its renderings (``markdown()``,
``junit_xml()``, ``to_dict()``), and the exit code of each status.

The data lives in ``dialogue_judge.gate.outcome`` and the rendering in ``dialogue_judge.gate.reports``; this module
only joins them, so it imports both and neither imports it.
"""

from __future__ import annotations

from typing import Any

from dialogue_judge.gate.outcome import EXIT_CODES, AspectReport, CallStats, GateOutcome, Status
from dialogue_judge.gate.reports import to_json_dict, to_junit, to_markdown

__all__ = ["EXIT_CODES", "AspectReport", "CallStats", "GateOutcome", "GateResult", "Status"]


class GateResult(GateOutcome):
    """A ``GateOutcome`` that renders itself (the gate's public result object)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (``--json``): every field plus ``exit_code``; non-finite numbers become null."""
        return to_json_dict(self)

    def markdown(self) -> str:
        return to_markdown(self)

    def junit_xml(self) -> str:
        return to_junit(self)
