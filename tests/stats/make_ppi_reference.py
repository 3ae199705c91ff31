"""Write ``data/ppi_reference.json``: ppi-python's PPI++ figures on the fixed inputs of ``test_stats_ppi.py``.

ppi-python ships a top-level ``tests`` package that would shadow this project's, so it is not a dependency: install
it aside and point this script at it, then commit the file it writes::

    pip install --no-deps --target /tmp/ppi ppi-python==0.2.3   # its imports: numba, statsmodels, scikit-learn
    PPI_PY_PATH=/tmp/ppi python tests/stats/make_ppi_reference.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(os.environ["PPI_PY_PATH"])  # appended: this project's ``tests`` package stays first
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ppi_py
from ppi_cases import CASES, FIXED_LAMBDAS, case_inputs


def _scalar(value: Any) -> float:
    return float(np.asarray(value).reshape(-1)[0])


def main() -> None:
    out: dict[str, Any] = {"ppi_python": "0.2.3", "cases": []}
    for case in CASES:
        y, yhat, unl = case_inputs(case)
        alpha = 1 - case["ci"]
        low, high = ppi_py.ppi_mean_ci(y, yhat, unl, alpha=alpha)
        c_low, c_high = ppi_py.classical_mean_ci(y, alpha=alpha)
        fixed = {}
        for lam in FIXED_LAMBDAS:
            f_low, f_high = ppi_py.ppi_mean_ci(y, yhat, unl, alpha=alpha, lam=lam)
            fixed[str(lam)] = [_scalar(f_low), _scalar(f_high)]
        out["cases"].append(
            {
                **case,
                "estimate": _scalar(ppi_py.ppi_mean_pointestimate(y, yhat, unl)),
                "ppi_ci": [_scalar(low), _scalar(high)],
                "classical_ci": [_scalar(c_low), _scalar(c_high)],
                "fixed_lambda_ci": fixed,
            }
        )
    target = Path(__file__).with_name("data") / "ppi_reference.json"
    target.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
