"""The cyclic garbage collector paused while a request builds a large submission.

Planning and storing hundreds of thousands of judgments creates millions of objects that live until the request
ends. Each time the survivors grow by a quarter, the collector walks all of them once, holding the GIL: pauses of
0.2-0.5 s in which no other request of the process runs, thread pool or not (issue 42, finding 7). The objects are
freed by reference counting when the request ends, so nothing is gained by collecting meanwhile; the collector runs
again as soon as the last such request is done.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_holders = 0
_was_enabled = True


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block; nested and concurrent blocks share one pause."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


def call_paused(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with the collector paused (for ``run_in_threadpool``)."""
    with collector_paused():
        return fn(*args)
