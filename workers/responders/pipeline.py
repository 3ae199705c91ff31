"""Run a memory strategy (judge_api.strategies) for one item: the item's inputs, then each declared step.

Sessions: the turns' ``session`` numbers split the dialogue; the last number is the current session, the others
are the earlier sessions (oldest first). Turns without a number belong to the current session. The dialogue ends
with the user's turn to answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2

from judge_api.prompting import RubricSandbox
from judge_api.strategies import Strategy
from workers.responders.parsers import PARSERS, memory_text

# sandboxed like the rubrics' templates (judge_api.prompting): a template reads its inputs and nothing else
_env = RubricSandbox(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)

# (messages, max_tokens) -> the chat model's reply text
Ask = Callable[[list[dict[str, str]], int], str]


class StrategyRunError(Exception):
    """The strategy cannot answer this item (no user turn to answer, a template error)."""


@dataclass
class PipelineResult:
    response: str
    memory: str | None
    trace: list[dict[str, Any]] = field(default_factory=list)


def _line(turn: dict[str, Any], labels: dict[str, str]) -> str:
    speaker = str(turn.get("speaker"))
    return f"{labels.get(speaker, speaker)}: {' '.join(str(turn.get('text', '')).split())}"


def item_inputs(item: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The inputs every template sees (judge_api.strategies.ITEM_INPUTS), without the per-session ones."""
    turns: list[dict[str, Any]] = list(item.get("dialogue") or [])
    if not turns or turns[-1].get("speaker") != "user":
        raise StrategyRunError("the item's dialogue must end with the user's turn to answer")
    numbers = [int(t["session"]) for t in turns if t.get("session") is not None]
    current = max(numbers) if numbers else None
    current_turns = [t for t in turns if t.get("session") is None or t.get("session") == current]
    persona = item.get("persona") or {}
    user_lines = [" ".join(str(p).split()) for p in persona.get("user") or []]
    bot_lines = [" ".join(str(p).split()) for p in persona.get("bot") or []]
    return {
        "dialog": "\n".join(_line(t, labels) for t in turns),
        "dialog_lines": [_line(t, labels) for t in turns],
        "current_session": "\n".join(_line(t, labels) for t in current_turns),
        "current_lines": [_line(t, labels) for t in current_turns[:-1]],
        "last_user": " ".join(str(turns[-1].get("text", "")).split()),
        "persona": "\n".join(
            f"{labels.get(side, side)}: {' '.join(lines)}"
            for side, lines in (("user", user_lines), ("bot", bot_lines))
            if lines
        ),
        "persona_user": " ".join(user_lines),
        "persona_bot": " ".join(bot_lines),
        "item_memory": item.get("memory") or "",
        "labels": labels,
    }


def previous_sessions(item: dict[str, Any], labels: dict[str, str]) -> list[tuple[int, list[str]]]:
    """The earlier sessions, oldest first: (number, one 'Label: text' line per turn)."""
    turns: list[dict[str, Any]] = list(item.get("dialogue") or [])
    numbers = sorted({t["session"] for t in turns if t.get("session") is not None})
    return [(number, [_line(t, labels) for t in turns if t.get("session") == number]) for number in numbers[:-1]]


def _template(strategy: Strategy, name: str) -> jinja2.Template:
    return _env.from_string(strategy.templates[name])


def run_strategy(strategy: Strategy, item: dict[str, Any], ask: Ask) -> PipelineResult:
    labels = strategy.speaker_labels
    inputs = item_inputs(item, labels)
    state: dict[str, Any] = json.loads(json.dumps(strategy.initial))  # a fresh copy per item
    trace: list[dict[str, Any]] = []
    sessions = previous_sessions(item, labels)
    for step in strategy.steps:
        rounds: list[dict[str, Any]] = (
            [
                {"session": "\n".join(lines), "session_lines": lines, "session_number": number}
                for number, lines in sessions
            ]
            if step.over == "previous_sessions"
            else [{"session": "", "session_lines": [], "session_number": None}]
        )
        for extra in rounds:
            context = {**inputs, **extra, **state}
            if step.when and not _env.compile_expression(step.when)(**context):
                trace.append({"step": step.name, "skipped": step.when})
                break
            try:
                messages = []
                if step.system:
                    messages.append({"role": "system", "content": _template(strategy, step.system).render(**context)})
                messages.append({"role": "user", "content": _template(strategy, step.template).render(**context)})
            except jinja2.TemplateError as exc:
                raise StrategyRunError(f"strategy {strategy.id!r} step {step.name!r}: {exc}") from None
            reply = ask(messages, step.max_tokens)
            state[step.into] = PARSERS[step.parse](reply, state.get(step.into), context)
            trace.append(
                {
                    "step": step.name,
                    "session": extra["session_number"],
                    "prompt_hash": hashlib.sha256(json.dumps(messages).encode()).hexdigest()[:16],
                    "reply": reply,
                }
            )
    response = state["response"]
    return PipelineResult(
        response=response, memory=memory_text(state.get(strategy.memory)) if strategy.memory else None, trace=trace
    )
