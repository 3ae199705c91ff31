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

from bisect import bisect_left
from collections import defaultdict
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
    return _assemble(exchanges, numbers, history, matched_at, own_session, new_users)


def _assemble(
    exchanges: Sequence[Exchange],
    numbers: Sequence[int],
    history: Sequence[Exchange],
    matched_at: Sequence[int | None],
    own_session: int,
    new_users: Sequence[str],
) -> Rebuilt:
    """The dialogue of the earlier spans' ``exchanges`` (sessions ``numbers``) with the history's unmatched exchanges
    placed after the earlier span matched before them (first when none), then the new user message(s)."""
    missing = sum(1 for m in matched_at if m is None)
    placed: list[tuple[tuple[int, int, int], Exchange, int]] = [
        ((j, 0, 0), exchange, numbers[j]) for j, exchange in enumerate(exchanges)
    ]
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


class ConversationIndex:
    """The spans of one conversation sorted once and their own exchanges split once, so that rebuilding each of its
    responses costs its own history, not the whole conversation again: ``rebuild`` called for every span of a
    conversation of N spans was cubic in N (2,000 spans: 13.5 s), ``ConversationIndex(...).rebuild`` for each is the
    size of the dialogues it returns. Equal to ``rebuild`` (tests/otlp/test_conversation_index.py)."""

    def __init__(self, conversation: Sequence[LlmCall], gap_s: float) -> None:
        self.gap_s = gap_s
        self.calls = sorted(conversation, key=lambda c: (c.started_ns, c.span_id))
        self.order = [(c.started_ns, c.span_id) for c in self.calls]
        self.exchanges = [own_exchange(c) for c in self.calls]
        self.numbers = sessions_of([c.started_ns for c in self.calls], gap_s)
        self.positions: dict[tuple[tuple[str, ...], str], list[int]] = defaultdict(list)
        for j, exchange in enumerate(self.exchanges):
            self.positions[_match_key(exchange)].append(j)
        self.first_at: dict[str, int] = {}
        for j, c in enumerate(self.calls):
            self.first_at.setdefault(c.response_id, j)

    def rebuild(self, call: LlmCall) -> Rebuilt:
        """``rebuild(call, conversation, gap_s)`` for a call of this conversation (or one that has not arrived)."""
        if not call.conversation_id:
            return rebuild(call, (), self.gap_s)
        end = bisect_left(self.order, (call.started_ns, call.span_id))
        if self.first_at.get(call.response_id, end) < end:  # the same response stored at another time: the plain rule
            return rebuild(call, self.calls, self.gap_s)
        history, new_users = split(call.messages)
        if end == 0:
            own_session = 1
        else:
            gap = call.started_ns - self.calls[end - 1].started_ns > self.gap_s * NS
            own_session = self.numbers[end - 1] + (1 if gap else 0)
        numbers = self.numbers
        matched_at: list[int | None] = []
        cursor = 0
        for exchange in history:
            candidates = self.positions.get(_match_key(exchange), [])
            at = bisect_left(candidates, cursor)
            found = candidates[at] if at < len(candidates) and candidates[at] < end else None
            matched_at.append(found)
            if found is not None:
                cursor = found + 1
        return _assemble(self.exchanges[:end], numbers[:end], history, matched_at, own_session, new_users)


def _match_key(exchange: Exchange) -> tuple[tuple[str, ...], str]:
    return tuple(u.strip() for u in exchange.users), exchange.bot.strip()


def _turns(exchanges: Sequence[Exchange], sessions: Sequence[int | None]) -> list[Turn]:
    turns: list[Turn] = []
    for exchange, session in zip(exchanges, sessions, strict=True):
        turns += [Turn("user", u, session) for u in exchange.users]
        turns.append(Turn("bot", exchange.bot, session))
    return turns
