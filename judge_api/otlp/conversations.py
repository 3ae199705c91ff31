"""A conversation rebuilt from its LLM spans (docs/monitoring.md#conversations-rebuilt). Pure.

A span's input messages end with the user's new message(s); what comes before them, split at each assistant
message, are exchanges (user messages, then the bot's answer) the application sent as history. The span's own
exchange is its new user message(s) and its output. The dialogue a response is judged against is the conversation's
earlier exchanges in time order: those of the earlier spans of its conversation id, with the exchanges of its own
history that no earlier span accounts for put where they fall; then its new user message(s). Sessions are numbered
from 1 by the gaps in time between the conversation's spans (a gap over ``session_gap_s`` starts a new one).

A response is complete when every exchange of its history is one of an earlier span that has arrived: until then its
earlier turns are missing (spans arrive out of order, in separate exports) and it waits, a bounded time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from judge_api.otlp.genai import LlmCall, Message

NS = 1_000_000_000


@dataclass(frozen=True)
class Exchange:
    users: tuple[str, ...]
    bot: str


@dataclass(frozen=True)
class Turn:
    speaker: str  # user, bot
    text: str
    session: int | None


@dataclass(frozen=True)
class Rebuilt:
    dialogue: list[Turn]
    complete: bool
    missing: int
    """Exchanges of the span's history no earlier span of the conversation accounts for (yet)."""
    sessions: int
    session: int | None
    """The response's own session (None: the span has no conversation id, sessions are unknown)."""


def split(messages: Sequence[Message]) -> tuple[list[Exchange], tuple[str, ...]]:
    """The history exchanges of a span's input messages and its new user message(s) (system and tool messages are
    left out: system messages are the instructions)."""
    history: list[Exchange] = []
    users: list[str] = []
    for message in messages:
        if message.role == "user" and message.text:
            users.append(message.text)
        elif message.role == "assistant" and message.text:
            history.append(Exchange(tuple(users), message.text))
            users = []
    return history, tuple(users)


def own_exchange(call: LlmCall) -> Exchange:
    return Exchange(split(call.messages)[1], call.output)


def sessions_of(starts: Sequence[int], gap_s: float) -> list[int]:
    """Session numbers (from 1) of spans started at ``starts`` (sorted, nanoseconds)."""
    numbers: list[int] = []
    for index, start in enumerate(starts):
        if index == 0:
            numbers.append(1)
        else:
            numbers.append(numbers[-1] + (1 if start - starts[index - 1] > gap_s * NS else 0))
    return numbers


def rebuild(call: LlmCall, conversation: Sequence[LlmCall], gap_s: float) -> Rebuilt:
    """The dialogue of ``call``'s response, from its own messages and the spans of its conversation that have
    arrived (``conversation``: any of them, ``call`` itself and later ones included; only earlier ones count)."""
    history, new_users = split(call.messages)
    if not call.conversation_id:
        turns = _turns(history, [None] * len(history)) + [Turn("user", u, None) for u in new_users]
        return Rebuilt(turns, True, 0, 1, None)
    key = (call.started_ns, call.span_id)
    earlier = sorted(
        (c for c in conversation if (c.started_ns, c.span_id) < key and c.response_id != call.response_id),
        key=lambda c: (c.started_ns, c.span_id),
    )
    numbers = sessions_of([c.started_ns for c in earlier] + [call.started_ns], gap_s)
    own_session = numbers[-1]
    exchanges = [own_exchange(c) for c in earlier]
    keys = [_match_key(e) for e in exchanges]
    # the history's exchanges matched, in order, to earlier spans' exchanges (up to whitespace around each text: an
    # app keeps the model's "answer\n" as "answer")
    matched_at: list[int | None] = []
    cursor = 0
    for exchange in history:
        key_of = _match_key(exchange)
        found = next((j for j in range(cursor, len(exchanges)) if keys[j] == key_of), None)
        matched_at.append(found)
        if found is not None:
            cursor = found + 1
    missing = sum(1 for m in matched_at if m is None)
    # unmatched history exchanges go after the earlier span matched before them (first when none)
    placed: list[tuple[tuple[int, int, int], Exchange, int]] = []
    for j, exchange in enumerate(exchanges):
        placed.append(((j, 0, 0), exchange, numbers[j]))
    previous = -1
    for index, (exchange, found) in enumerate(zip(history, matched_at, strict=True)):
        if found is not None:
            previous = found
            continue
        following = next((m for m in matched_at[index + 1 :] if m is not None), None)
        if previous >= 0:
            session = numbers[previous]
        elif following is not None:
            session = numbers[following]
        else:
            session = own_session
        placed.append(((previous, 1, index), exchange, session))
    placed.sort(key=lambda p: p[0])
    turns = _turns([p[1] for p in placed], [p[2] for p in placed])
    turns += [Turn("user", u, own_session) for u in new_users]
    return Rebuilt(turns, missing == 0, missing, own_session, own_session)


def _match_key(exchange: Exchange) -> tuple[tuple[str, ...], str]:
    return tuple(u.strip() for u in exchange.users), exchange.bot.strip()


def _turns(exchanges: Sequence[Exchange], sessions: Sequence[int | None]) -> list[Turn]:
    turns: list[Turn] = []
    for exchange, session in zip(exchanges, sessions, strict=True):
        turns += [Turn("user", u, session) for u in exchange.users]
        turns.append(Turn("bot", exchange.bot, session))
    return turns
