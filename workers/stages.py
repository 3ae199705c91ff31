"""What the stages of the judge path hand each other: a loaded judgment (``Loaded``) and its prepared request
(``Prepared``), what the claim paid for (``Paid``), a judgment asked (``Asked``), and the batch stage's port
(``BatchStagePort``, ``Submitted``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from judge_api.judges import JudgeSpec
from judge_api.repository.claims import JudgmentTask
from judge_api.rubrics import Rubric
from workers.clients import JudgeRequest
from workers.singleflight import Lease
from workers.writer import VerdictWrite


@dataclass
class Loaded:
    judgment: JudgmentTask
    ready: Prepared | None = None
    settled: dict[str, Any] | None = None  # the values of a judgment that cannot be asked (e.g. rubric gone)
    known_miss: bool = False  # its key was just looked up in the cache and was not there
    stashed: bool = False  # a paid reply for its key waits in the stash
    lock_tried: bool = False  # the batch asked for its single-flight lock (JudgeEngine._take_locks) ...
    lock: Lease | None = None  # ... and this is it (None: another worker holds the key or has just filled it)
    park_when_held: bool = False  # on a call slot: a key held elsewhere raises KeyHeld (workers.keywait), no wait


@dataclass
class Prepared:
    rubric: Rubric
    spec: JudgeSpec
    request: JudgeRequest
    key: str
    base: dict[str, Any]
    context: dict[str, Any] | None = None  # what a parser checks the reply against (fact_check)


@dataclass
class Submitted:
    """What the submit step did with the claimed judgments handed to it."""

    batched: set[int] = field(default_factory=set)
    realtime: list[Loaded] = field(default_factory=list)  # to judge now (the server has no batch API)
    settled: dict[int, str] = field(default_factory=dict)  # failed/cancelled/pending without a batch


class BatchStagePort(Protocol):
    """What the engine asks of the batch stage (``workers.batches.BatchStage``, which builds on the engine)."""

    def submit(self, mine: list[Loaded], token: str) -> Submitted: ...

    def poll_due(self) -> int: ...


@dataclass
class Paid:
    """Replies a claimed judgment paid for under its own single-flight locks, written with its verdict."""

    token: str = ""
    judgment_id: int = 0
    known_miss: bool = False
    stashed: bool = False
    lock_tried: bool = False  # the first request's lock was asked for with the batch's (leases[0] if taken)
    leases: list[Lease] = field(default_factory=list)
    cache_rows: list[dict[str, Any]] = field(default_factory=list)
    stash_keys: list[str] = field(default_factory=list)  # stashed replies whose calls this claim records

    @property
    def claim(self) -> tuple[str, int]:
        return self.token, self.judgment_id


@dataclass
class Asked:
    """A claimed judgment asked: its verdict handed to the write stage."""

    write: VerdictWrite
    paid: Paid
