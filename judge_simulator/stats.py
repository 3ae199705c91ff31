"""Call accounting for ``GET /_sim/stats`` and ``GET /_sim/requests``.

Only model calls (``POST /v1/chat/completions`` and ``POST /v1/messages``) are counted;
``GET /v1/models`` (used as the readiness probe), the control endpoints and requests rejected
before a model is known (unparseable body, missing ``model``/``messages``: 400) are not. A call whose
client disconnected before the answer (e.g. a hang that outlived the client timeout) is recorded
with status 499, the nginx convention for "client closed request".
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from .caching import Bill

CLIENT_CLOSED = 499


@dataclass
class CallRecord:
    """One model call as shown by ``GET /_sim/requests`` (the request body is kept verbatim so
    tests can assert what a client actually sent)."""

    seq: int
    endpoint: str
    model: str
    body: Any
    rule: str | None = None
    fault: str | None = None
    status: int | None = None
    started: float = field(default_factory=time.time)
    duration_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "endpoint": self.endpoint,
            "model": self.model,
            "rule": self.rule,
            "fault": self.fault,
            "status": self.status,
            "started": self.started,
            "duration_s": self.duration_s,
            "body": self.body,
        }


class Stats:
    """Counters since start or the last ``POST /_sim/reset``."""

    def __init__(self, log_size: int = 1000) -> None:
        self._log_size = log_size
        self.reset()

    def reset(self) -> None:
        self.total = 0
        self.by_model: Counter[str] = Counter()
        self.by_endpoint: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.by_fault: Counter[str] = Counter()
        self.by_rule: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.since = time.time()
        self.log: deque[CallRecord] = deque(maxlen=self._log_size)
        self.bill = Bill()

    def begin(self, endpoint: str, model: str, body: Any) -> CallRecord:
        """Count a call as it arrives and as in flight."""
        self.total += 1
        self.by_model[model] += 1
        self.by_endpoint[endpoint] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        record = CallRecord(seq=self.total, endpoint=endpoint, model=model, body=body)
        self.log.append(record)
        return record

    def finish(self, record: CallRecord, status: int) -> None:
        """Record the status a call ended with and take it out of flight."""
        record.status = status
        record.duration_s = round(time.time() - record.started, 6)
        self.by_status[str(status)] += 1
        if record.fault:
            self.by_fault[record.fault] += 1
        if record.rule:
            self.by_rule[record.rule] += 1
        self.in_flight = max(self.in_flight - 1, 0)

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready view for ``GET /_sim/stats``."""
        return {
            "total_calls": self.total,
            "by_model": dict(self.by_model),
            "by_endpoint": dict(self.by_endpoint),
            "by_status": dict(self.by_status),
            "by_fault": dict(self.by_fault),
            "by_rule": dict(self.by_rule),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "since": self.since,
            "bill": self.bill.snapshot(),
        }

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` calls, oldest first."""
        items = list(self.log)[-limit:] if limit > 0 else []
        return [r.as_dict() for r in items]
