"""Write the golden reports of ``report_golden_cases.CASES`` (run once on main before the columnar report, issue 39).

    PYTHONPATH=$PWD python tests/stats/make_report_golden.py

Each file is ``build_report``'s output as JSON (floats written with Python's repr, so they read back exactly)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from judge_api.stats.report import build_report  # noqa: E402
from tests.stats.report_golden_cases import CASES  # noqa: E402

OUT = HERE / "data" / "report_golden"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in CASES.items():
        frame, ratings, kwargs = make()
        report = build_report(frame, ratings, **kwargs)
        (OUT / f"{name}.json").write_text(json.dumps(report, allow_nan=False, sort_keys=False, indent=None))
        print(name, len(frame), "rows")


if __name__ == "__main__":
    main()
