"""No heavy import on a report's request path: in a fresh interpreter, once the API has started, the first
GET /v1/runs/{id}/report (and /agreement) imports no module of the statistics stack (scipy, numpy, pandas, pyarrow,
judge_api.stats); the start-up did that, and built one small report so the first request costs what later ones do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dialogue_judge.testing import REPO_ROOT

SCRIPT = r"""
import json, random, sys
from fastapi.testclient import TestClient
from judge_api.repository import claims
from judge_api.app import create_app
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment
from sqlalchemy import select

loaded_by_import = {m for m in sys.modules if m.split(".")[0] in ("scipy", "pandas")}
client = TestClient(create_app())
with client:
    items = [
        {"id": f"i{i}", "dialogue": [{"speaker": "user", "text": f"My dog is called Rex {i}."}],
         "candidates": {"a": f"Rex {i}!", "b": f"Your dog {i}.", "c": f"Max {i}?"}}
        for i in range(30)
    ]
    judge = "openai-compatible:sim@http://127.0.0.1:9/v1"
    body = {"items": items, "rubrics": ["rsum-single", "rsum-pairwise"], "judges": [judge],
            "mode": ["single", "pairwise"]}
    run_id = client.post("/v1/runs", json=body).json()["id"]
    engine = get_engine()
    with session_scope() as session:
        rows = session.execute(select(Judgment.id, Judgment.system_b).where(Judgment.run_id == run_id)).all()
    token, claimed = claims.claim_many(engine, [r.id for r in rows], 600.0)
    rng = random.Random(0)
    verdicts = []
    for r in rows:
        if r.system_b is None:
            values = {"status": "done", "score": float(rng.randint(1, 100))}
        else:
            p = rng.choice([-2, -1, 1, 2])
            values = {"status": "done", "preference": float(p), "outcome": {2: "win", -2: "loss"}.get(p, "tie")}
        verdicts.append((r.id, token, values))
    assert all(claims.write_verdicts(engine, verdicts))
    ratings = [{"item_id": f"i{i}", "system": "a", "aspect": "coherence", "rater": "h1", "value": rng.randint(0, 2),
                "scale_min": 0, "scale_max": 2} for i in range(30)]
    assert client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    before = set(sys.modules)
    report = client.get(f"/v1/runs/{run_id}/report")
    agreement = client.get(f"/v1/runs/{run_id}/agreement")
    new = sorted(set(sys.modules) - before)
print(json.dumps({
    "loaded_by_import": sorted(loaded_by_import)[:5],
    "report": report.status_code, "n_rows": report.json()["counts"]["n_rows"],
    "scores": len(report.json()["scores"]), "agreement": agreement.status_code,
    "new_modules": new,
}))
"""

HEAVY = ("scipy", "numpy", "pandas", "pyarrow", "judge_api")


def test_the_first_report_imports_nothing_heavy(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(
        DJ_HOME=str(tmp_path / "home"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'dj.db'}",
        PYTHONPATH=str(REPO_ROOT),
        DJ_RUNS_PER_MINUTE="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded_by_import"], "importing judge_api.app loads the statistics stack"
    assert result["report"] == 200 and result["agreement"] == 200
    assert result["n_rows"] == 30 * (3 * 3 + 3 * 2) and result["scores"] == 9  # the report covered every section
    heavy = [m for m in result["new_modules"] if m.split(".")[0] in HEAVY]
    assert heavy == [], f"the first report imported {heavy}"
