"""Import an external judge's verdicts and human votes as a run, so that agreement is computed by the service.

MT-Bench (Zheng et al. 2023): one run per turn; items are the 80 questions with the six models' answers as
candidates, GPT-4's pairwise verdicts become imported judgments (``source`` = the SHA-256 of ``gpt4_pair.jsonl``,
as ``POST /v1/runs/{id}/verdicts`` marks them) of the judge ``external:gpt4_pair`` (a verdict that flipped
with the order is stored as two disagreeing order rows, so it combines to an inconsistent tie), and every vote of
``human.jsonl`` becomes a human rating (raters ``expert_*`` and ``author_*``; pass ``human_prefix=expert_`` to the
agreement endpoint for the paper's expert-only figures).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.models import Judgment, fresh_judgment_fields, utcnow
from judge_api.planning import PlannedJudgment
from judge_api.schemas import HumanRatingIn, Item, RunCreate
from judge_api.stats import load_mtbench_gpt4_pair_judgments, load_mtbench_human

EXTERNAL_JUDGE = "external:gpt4_pair"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _first_shown_label(preference: float | None, order: str | None) -> str | None:
    if preference is None:
        return None
    first = preference if order != "ba" else -preference
    return {2.0: "[[A]]", -2.0: "[[B]]", 0.0: "[[C]]"}.get(first)


def mtbench_items(folder: Path, turn: int) -> list[Item]:
    questions = {q["question_id"]: q for q in _read_jsonl(folder / "questions.jsonl")}
    answers: dict[int, dict[str, str]] = {}
    for row in _read_jsonl(folder / "model_answers_6models.jsonl"):
        answers.setdefault(row["question_id"], {})[row["model"]] = row["turns_assistant"][turn - 1]
    items = []
    for question_id, question in sorted(questions.items()):
        dialogue = [{"speaker": "user", "text": text} for text in question["turns"][:turn]]
        candidates = {model: text for model, text in answers.get(question_id, {}).items() if text.strip()}
        if not candidates:
            continue
        items.append(
            Item.model_validate(
                {
                    "id": f"mtbench-{question_id}-t{turn}",
                    "dialogue": dialogue,
                    "candidates": candidates,
                    "meta": {
                        "source": "mt_bench",
                        "question_id": question_id,
                        "turn": turn,
                        "category": question["category"],
                    },
                }
            )
        )
    return items


def import_mtbench(session: Session, folder: Path, turn: int, project_id: str = repository.DEFAULT_PROJECT) -> str:
    """Store one MT-Bench turn as a run with GPT-4's verdicts and the human votes; returns the run id."""
    items = mtbench_items(folder, turn)
    item_ids = {item.id for item in items}
    verdicts = load_mtbench_gpt4_pair_judgments(folder / "gpt4_pair.jsonl", judge=EXTERNAL_JUDGE)
    verdicts = verdicts[verdicts["item_id"].isin(item_ids)]
    request = RunCreate(
        name=f"MT-Bench turn {turn}: GPT-4 pairwise verdicts + human votes",
        items=items,
        rubrics=["mtbench-pair-v2"],
        judges=["openai:gpt-4"],
        mode=["pairwise"],
        meta={"imported": "mt_bench_human_judgments", "turn": turn},
    )
    planned = [
        PlannedJudgment(
            str(r.item_id),
            "pairwise",
            str(r.system_a),
            str(r.system_b),
            str(r.order),
            "mtbench-pair-v2",
            "external",
            "overall",
            EXTERNAL_JUDGE,
            0,
        )
        for r in verdicts.itertuples()
    ]
    run = repository.create_run(session, request, [], project_id)
    run.n_judgments = len(planned)
    session.flush()
    item_pks = repository.item_pks_for(session, run.id)
    texts = {item.id: item.candidates for item in items}
    now = utcnow()
    # marked as imported like POST /v1/runs/{id}/verdicts marks them: the file's SHA-256 (docs/data-contract.md)
    sha256 = hashlib.sha256((folder / "gpt4_pair.jsonl").read_bytes()).hexdigest()
    params = {"imported": True, "format": "mt_bench_human_judgments", "file": "gpt4_pair.jsonl", "sha256": sha256}
    rows = []
    for plan, verdict in zip(planned, verdicts.itertuples(), strict=True):
        candidates = texts[plan.item_id]
        preference = None if math.isnan(verdict.preference) else float(verdict.preference)
        rows.append(
            {
                "dedup_key": plan.dedup_key(run.id),
                "run_id": run.id,
                "item_pk": item_pks[plan.item_id],
                "item_key": plan.item_id,
                "mode": "pairwise",
                "system_a": plan.system_a,
                "system_b": plan.system_b,
                "order": plan.order,
                "rubric_id": plan.rubric_id,
                "rubric_version": "external",
                "aspect": "overall",
                "judge": EXTERNAL_JUDGE,
                "judge_params": params,
                "source": sha256,
                "sample_index": 0,
                "status": "done",
                "verdict": _first_shown_label(preference, plan.order),
                "preference": preference,
                "outcome": verdict.outcome,
                "len_a": len(candidates.get(plan.system_a, "")),
                "len_b": len(candidates.get(plan.system_b or "", "")),
                **fresh_judgment_fields(now),
            }
        )
    for start in range(0, len(rows), 5000):
        session.execute(insert(Judgment), rows[start : start + 5000])
    votes = load_mtbench_human(folder / "human.jsonl")
    votes = votes[votes["item_id"].isin(item_ids)]
    ratings = [
        HumanRatingIn(
            item_id=v.item_id,
            system=v.system,
            system_b=v.system_b,
            aspect="overall",
            rater=v.rater,
            kind="preference",
            value=float(v.value),
            meta={"turn": int(v.turn)},
        )
        for v in votes.itertuples()
    ]
    repository.upsert_ratings(session, run.id, ratings)
    return run.id
