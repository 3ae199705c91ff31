"""Where the time between the provider's answer and the reply stash goes (issue 26.6).

A worker killed after the provider has answered but before the reply is in the stash pays for it again. This runs
the fault benchmark's no-fault scenario (``bench/bench_faults.py``: real API, N Celery workers x M threads, Redis,
PostgreSQL, the simulator) with workers that log, for every paid judge call, when the HTTP body was read (the
SDK's transport returned), when the judge client returned the parsed reply and when the stash write was issued.
Compared with when the simulator finished each reply (its call log, same clock), it prints min / median / mean /
p90 / p99 / max in ms of:

* simulator finished -> stash write issued (the whole window), split into
* simulator finished -> HTTP body read (the reply's way into the worker: network, waking the thread, the GIL),
* HTTP body read -> the client returned the parsed reply (the SDK's JSON decoding, the reply's fields),
* the client returned the reply -> stash write issued (the worker's own code before the stash).

The workers are instrumented by a ``sitecustomize`` on their PYTHONPATH (written to a temporary folder), which
wraps ``httpx.Client.send`` (and ``httpx2``'s), ``OpenAIJudgeClient.complete``, ``RedisReplyStash.put`` and
``JudgeEngine._paid_call``; nothing of the service is changed.

Usage::

    python bench/bench_stash_window.py --judgments 800 --latency 'fixed(0.5)'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_faults  # noqa: E402

from dialogue_judge.testing import LiveService  # noqa: E402
from judge_simulator.process import SimulatorProcess  # noqa: E402

SITECUSTOMIZE = """
import importlib.abc
import os
import sys
import threading
import time

_PATH = os.environ.get("DJ_BENCH_STASH_WINDOW_LOG")
_local = threading.local()


def _after(cls, name, mark):
    original = getattr(cls, name)

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        setattr(_local, mark, time.time())
        return result

    setattr(cls, name, wrapped)


def _before(cls, name, mark):
    original = getattr(cls, name)

    def wrapped(*args, **kwargs):
        setattr(_local, mark, time.time())
        return original(*args, **kwargs)

    setattr(cls, name, wrapped)


def _patch_execute(module):
    import hashlib
    import json

    original = module.JudgeEngine._paid_call

    def paid_call(self, spec, request, key, tally, paid):
        for mark in ("body", "parsed", "stash"):
            setattr(_local, mark, None)
        reply = original(self, spec, request, key, tally, paid)
        digest = hashlib.sha256(json.dumps(request.messages, sort_keys=True).encode()).hexdigest()
        with open(_PATH, "a") as log:
            log.write(f"{digest} {_local.body} {_local.parsed} {_local.stash}\\n")
        return reply

    module.JudgeEngine._paid_call = paid_call


_HOOKS = {
    "httpx": lambda m: _after(m.Client, "send", "body"),
    "httpx2": lambda m: _after(m.Client, "send", "body"),
    "workers.clients": lambda m: _after(m.OpenAIJudgeClient, "complete", "parsed"),
    "workers.stash": lambda m: _before(m.RedisReplyStash, "put", "stash"),
    "workers.execute": _patch_execute,
}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                run = spec.loader.exec_module

                def exec_module(module, _run=run, _name=name):
                    _run(module)
                    _HOOKS[_name](module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if _PATH:
    sys.meta_path.insert(0, _Finder())
"""


def summary(name: str, values: list[float]) -> str:
    xs = sorted(values)

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return (
        f"  {name:<52} min {xs[0]:7.2f}  median {statistics.median(xs):7.2f}  mean {statistics.mean(xs):7.2f}  "
        f"p90 {q(0.9):7.2f}  p99 {q(0.99):8.2f}  max {xs[-1]:8.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", type=int, default=800)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--latency", default="fixed(0.5)", help="simulator latency per call (default fixed(0.5))")
    ours = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="dj-stash-window-"))
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log_path = folder / "calls.log"
    os.environ["DJ_BENCH_STASH_WINDOW_LOG"] = str(log_path)
    plain_env = LiveService.env

    def env(self: LiveService) -> dict[str, str]:
        values = plain_env(self)
        values["PYTHONPATH"] = f"{folder}{os.pathsep}{values['PYTHONPATH']}"
        return values

    LiveService.env = env  # type: ignore[method-assign]
    calls: list[dict[str, Any]] = []
    plain_drive = bench_faults.drive

    def drive(name: str, args: argparse.Namespace, service: LiveService, workers: Any, *rest: Any) -> dict[str, Any]:
        sim: SimulatorProcess = rest[0]
        result = plain_drive(name, args, service, workers, *rest)
        calls.extend(sim.requests(3 * args.judgments))
        return result

    bench_faults.drive = drive
    faults_args = argparse.Namespace(
        judgments=ours.judgments,
        workers=ours.workers,
        threads=ours.threads,
        latency=ours.latency,
        at=0.3,
        restart_after=3.0,
        redis_restarts=1,
        outage=15.0,
        storm=0.1,
        timeout=1200.0,
    )
    print(
        f"stash window ({os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        f"{ours.judgments} judgments, {ours.workers} workers x {ours.threads} threads, latency {ours.latency}",
        flush=True,
    )
    bench_faults.run_scenario("none", faults_args)
    finished = {
        hashlib.sha256(json.dumps(c["body"]["messages"], sort_keys=True).encode()).hexdigest(): c["started"]
        + c["duration_s"]
        for c in calls
        if c["status"] == 200
    }
    whole, way_in, decode, ours_ms = [], [], [], []
    for line in log_path.read_text().splitlines():
        digest, *marks = line.split()
        if "None" in marks or digest not in finished:
            continue
        body, parsed, stash = (float(m) for m in marks)
        done = finished[digest]
        whole.append((stash - done) * 1000)
        way_in.append((body - done) * 1000)
        decode.append((parsed - body) * 1000)
        ours_ms.append((stash - parsed) * 1000)
    if not whole:
        print("  no paid call was logged", file=sys.stderr)
        return 1
    print(f"  ms over {len(whole)} paid replies")
    print(summary("simulator finished -> stash write issued", whole))
    print(summary("  simulator finished -> HTTP body read", way_in))
    print(summary("  HTTP body read -> client returned the parsed reply", decode))
    print(summary("  client returned the reply -> stash write issued", ours_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
