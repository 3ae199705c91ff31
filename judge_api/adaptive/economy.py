"""What an adaptive run's status says: its economy (calls used against the fixed plan's, the stopping reason, the
ranking with intervals) from the planning state the steps store, and the one-line message. Pure."""

from __future__ import annotations

from typing import Any

from judge_api.schemas import RunEconomy


def economy(config: dict[str, Any], state: dict[str, Any] | None) -> RunEconomy | None:
    """None for a run that is not adaptive; before the first step, an economy with nothing measured yet."""
    pairing = config.get("pairing") == "adaptive"
    sampling = (config.get("options") or {}).get("samples") == "adaptive"
    if not (pairing or sampling):
        return None
    state = state or {}
    out: dict[str, Any] = {"finished": bool(state.get("finished")), "rounds": int(state.get("round") or 0)}
    if pairing and state.get("pairing"):
        p = dict(state["pairing"])
        rr = int(p.get("round_robin_calls") or 0)
        p["share"] = round(int(p.get("calls") or 0) / rr, 4) if rr else None
        out["pairing"] = p
    if sampling and state.get("samples"):
        out["samples"] = state["samples"]
    return RunEconomy.model_validate(out)


def message(summary_economy: RunEconomy | None) -> str | None:
    """One line for the run status: why adaptive planning stopped and what it saved, or that it goes on."""
    if summary_economy is None:
        return None
    parts = []
    pairing = summary_economy.pairing
    if pairing is not None:
        used = f"{pairing.calls:,} of {pairing.round_robin_calls:,} round-robin calls"
        if pairing.share is not None:
            used += f" ({100 * pairing.share:.1f} %)"
        ranking = " > ".join(r.system for r in pairing.ranking)
        if pairing.stop:
            parts.append(f"adaptive pairing stopped: {pairing.stop_message} ({pairing.stop}); {used}; {ranking}")
        else:
            open_gaps = [f"{g.upper}/{g.lower}" for g in pairing.gaps if not g.separated]
            parts.append(f"adaptive pairing: {used} so far; undecided: {', '.join(open_gaps) or 'none'}")
    samples = summary_economy.samples
    if samples is not None:
        parts.append(
            f"adaptive samples: {samples.samples:,} for {samples.judgments:,} judgments "
            f"({100 * samples.saving:.1f} % fewer than {samples.fixed} each)"
        )
    if not parts and not summary_economy.finished:
        parts.append("adaptive run: planning")
    return "; ".join(parts) or None
