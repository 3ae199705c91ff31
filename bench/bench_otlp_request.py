"""The OTLP receiver's request path alone (issue 38's p99 target): ``POST /v1/otlp/v1/traces`` in-process
(FastAPI's TestClient), SQLite in a temp dir, no processor running (``DJ_OTLP_PROCESS=workers``, no Redis), the
512-span protobuf batches of ``bench_otlp.py``. Prints min / p50 / p99 of a batch and spans/s over ``--requests``.
Run it from a checkout of main and of a branch side by side to compare the request paths.

Usage::

    python bench/bench_otlp_request.py --requests 60
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-otlp-request-"))
    os.environ.update(
        {
            "DATABASE_URL": f"sqlite:///{home / 'bench.db'}",
            "DJ_HOME": str(home / "home"),
            "DJ_AUTH": "false",
            "DJ_MAX_ITEMS": "20000",
            "DJ_OTLP_PROCESS": "workers",
        }
    )
    os.environ.pop("REDIS_URL", None)
    import bench_otlp
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.migrate import upgrade

    upgrade(os.environ["DATABASE_URL"])
    with TestClient(create_app()) as client:
        monitor = client.post(
            "/v1/monitors",
            json={
                "name": "bench",
                "rubrics": ["rsum-single"],
                "judges": [bench_otlp.JUDGE],
                "aspects": ["consistency"],
                "sample_rate": 0.05,
            },
        ).json()["id"]
        batches = bench_otlp.Batches(monitor)
        bodies = [batches.take()[0] for _ in range(args.requests + 3)]
        latencies: list[float] = []
        for index, body in enumerate(bodies):
            started = time.perf_counter()
            answer = client.post("/v1/otlp/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
            answer.raise_for_status()
            if index >= 3:  # the first three warm up
                latencies.append((time.perf_counter() - started) * 1000)
    rate = bench_otlp.BATCH * len(latencies) / (sum(latencies) / 1000)
    print(
        f"request path alone, {len(latencies)} batches of {bench_otlp.BATCH}: min {min(latencies):.1f} ms, "
        f"p50 {statistics.median(latencies):.1f} ms, p99 {bench_otlp.percentile(latencies, 99):.1f} ms, "
        f"{rate:.0f} spans/s (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
