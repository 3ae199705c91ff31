"""A fake API for the dashboard tests, behind ``httpx.MockTransport``, in these states:

``data``: two finished runs (6 items x 3 systems; single scores on three aspects, pairwise in both orders, a
few failed / unparseable rows, human ratings) whose report is computed by the real ``build_report``;
``facts``: one run judged with the fact-check rubric (2 items x 2 systems, labels with evidence in ``details``,
served by ``/facts`` as the API does);
``memory``: one run judged with the memory-audit rubric (3 items x 2 systems, planted labels, one audit
unparseable) whose report's ``memory_audit`` section is computed by the real ``build_report``;
``unparseable``: a run like ``data``'s whose every judgment came back unparseable, the same with human ratings, a
healthy run to compare it with, and a fact-check run whose every verdict is unparseable;
``calibrated``: the Calibrated page's runs (``calibrated_fakes``: rated with a label queue, too few labels, no
ratings); ``empty``: no runs at all; ``error``: every request answers HTTP 500; ``unreachable``: every request fails to
connect.
"""

from __future__ import annotations

import io
import json
import re
from itertools import combinations
from typing import Any
from urllib.parse import parse_qs

import calibrated_fakes as cal
import httpx
import pandas as pd
import pytest

from dashboard import api
from dialogue_judge.client import ApiClient
from judge_api.repository import item_aggregates
from judge_api.stats import compare

JUDGE = "openai-compatible:sim@http://127.0.0.1:9/v1"
QUALITY = {"rsum": [85, 78, 90, 70, 88, 82], "memgpt": [60, 72, 55, 65, 58, 75], "vanilla": [40, 35, 52, 45, 30, 48]}
ASPECTS = ("engagingness", "coherence", "consistency")
RUN_A, RUN_B = "run_aaaa", "run_bbbb"
RUN_F = "run_ffff"
RUN_M = "run_mmmm"
RUN_R = "run_rrrr"
FRAME_COLUMNS = [
    "judgment_id", "run_id", "item_id", "mode", "system_a", "system_b", "aspect", "judge", "rubric_id",
    "rubric_version", "order", "sample_index", "status", "score", "preference", "outcome", "len_a", "len_b",
    "input_tokens", "output_tokens", "latency_ms", "cost_usd", "cached", "scale_min", "scale_max", "confidence",
]  # fmt: skip


def make_items(n: int = 6) -> list[dict[str, Any]]:
    return [
        {
            "id": f"msc-{i}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago.", "session": 1},
                {"speaker": "bot", "text": "How lovely! What breed?", "session": 1},
                {"speaker": "user", "text": "A beagle. Do you remember my dog's name?", "session": 2},
            ],
            "persona": {"user": ["I have a dog called Rex."], "bot": ["I like animals."]},
            "memory": "User has a beagle called Rex.",
            "reference": None,
            "candidates": {s: f"Answer from {s} about Rex. <<q={q[i]}>>" for s, q in QUALITY.items()},
            "meta": {},
        }
        for i in range(n)
    ]


def _row(run_id: str, jid: int, **kw: Any) -> dict[str, Any]:
    base = {
        "id": jid, "run_id": run_id, "system_b": None, "order": None, "rubric_version": "v1", "judge": JUDGE,
        "judge_params": {}, "sample_index": 0, "prompt_hash": "h", "score": None, "verdict": None,
        "preference": None, "outcome": None, "input_tokens": 200, "output_tokens": 20, "latency_ms": 12.0,
        "cost_usd": 0.0001, "attempts": 1, "status": "done", "error": None, "cached": False,
        "injection_flags": [], "updated_at": None,
    }  # fmt: skip
    base.update(kw)
    base["raw_output"] = base.get("raw_output") or f"{base.get('explanation') or ''} Rating: [[{base['score']}]]"
    return base


def make_judgments(run_id: str, shift: float = 0.0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    jid = 1000 if run_id == RUN_B else 1
    for i in range(6):
        for aspect in ASPECTS:
            for system, q in QUALITY.items():
                score: float | None = q[i] + (shift if system == "memgpt" else 0)
                status = "done"
                if (i, aspect, system) == (5, "coherence", "vanilla"):
                    status, score = "unparseable", None
                rows.append(
                    _row(
                        run_id,
                        jid,
                        item_id=f"msc-{i}",
                        mode="single",
                        system_a=system,
                        rubric_id="rsum-single",
                        aspect=aspect,
                        score=score,
                        status=status,
                        explanation=f"{system} on {aspect}: reasonable answer.",
                        raw_output="I cannot decide." if status == "unparseable" else None,
                    )
                )
                jid += 1
        for a, b in combinations(QUALITY, 2):
            for order in ("ab", "ba"):
                diff = QUALITY[a][i] - QUALITY[b][i]
                pref = 2.0 if diff > 15 else 1.0 if diff > 0 else -1.0 if diff > -15 else -2.0
                if (i, a, b, order) == (1, "rsum", "memgpt", "ba"):
                    pref = -2.0  # an order flip
                outcome = {2.0: "win", 1.0: "tie", -1.0: "tie", -2.0: "loss"}[pref]
                shown = f"Response {'1' if (order == 'ab') == (pref > 0) else '2'} is better"
                rows.append(
                    _row(
                        run_id,
                        jid,
                        item_id=f"msc-{i}",
                        mode="pairwise",
                        system_a=a,
                        system_b=b,
                        order=order,
                        rubric_id="rsum-pairwise",
                        aspect="overall",
                        verdict=shown,
                        preference=pref,
                        outcome=outcome,
                        score=None,
                        explanation=f"Order {order}: {a if pref > 0 else b} engages more.",
                    )
                )
                jid += 1
    return rows


def make_ratings() -> list[dict[str, Any]]:
    out = []
    for i in range(6):
        for system, q in QUALITY.items():
            out.append(
                {
                    "item_id": f"msc-{i}",
                    "system": system,
                    "system_b": None,
                    "aspect": "consistency",
                    "rater": "h1",
                    "kind": "score",
                    "value": float(min(100, q[i] + (25 if i == 2 else 3))),
                    "scale_min": 1.0,
                    "scale_max": 100.0,
                    "turn": None,
                    "tie_inconsistent": False,
                }
            )
        out.append(
            {
                "item_id": f"msc-{i}",
                "system": "rsum",
                "system_b": "vanilla",
                "aspect": "overall",
                "rater": "h1",
                "kind": "preference",
                "value": -1.0 if i == 0 else 1.0,
                "scale_min": -1.0,
                "scale_max": 1.0,
                "turn": None,
                "tie_inconsistent": False,
            }
        )
    return out


def judgments_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows).rename(columns={"id": "judgment_id"})
    df["len_a"] = df["system_a"].map(lambda s: len(f"Answer from {s} about Rex. <<q=50>>"))
    df["len_b"] = df["system_b"].map(lambda s: len(f"Answer from {s} about Rex. <<q=50>>") if s else None)
    df["scale_min"], df["scale_max"], df["confidence"] = 1.0, 100.0, 1.0
    return df[FRAME_COLUMNS]


def summary(run_id: str, rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    counts = {
        s: sum(r["status"] == s for r in rows)
        for s in ("pending", "running", "done", "failed", "unparseable", "cancelled")
    }
    return {
        "id": run_id, "name": name, "status": "done", "created_at": "2026-01-01T10:00:00",
        "finished_at": "2026-01-01T10:01:00", "rubrics": ["rsum-single", "rsum-pairwise"], "judges": [JUDGE],
        "mode": ["single", "pairwise"], "n_items": 6, "n_judgments": len(rows), "counts": counts,
        "progress": 1.0, "cost_usd": 0.0123, "input_tokens": 200 * len(rows), "output_tokens": 20 * len(rows),
        "provider_calls": len(rows), "cached": 0, "budget_usd": None, "budget_exhausted": False, "message": None,
    }  # fmt: skip


RUBRICS: list[dict[str, Any]] = [
    {"id": "rsum-single", "version": "v1", "kind": "single", "description": "", "origin": None,
     "aspects": list(ASPECTS), "scale": [1, 100], "parser": "bracket_score", "structured_output": False},
    {"id": "rsum-pairwise", "version": "v1", "kind": "pairwise", "description": "", "origin": None,
     "aspects": ["overall"], "scale": None, "parser": "pairwise_4way", "structured_output": False},
    {"id": "memory-audit", "version": "v1", "kind": "facts", "description": "", "origin": None,
     "aspects": ["memory"], "scale": [1, 100], "parser": "memory_audit", "structured_output": False},
    {"id": "fact-check", "version": "v1", "kind": "facts", "description": "", "origin": None,
     "aspects": ["consistency"], "scale": [1, 100], "parser": "fact_check", "structured_output": False},
]  # fmt: skip


FACT_RESPONSES = {  # item -> system -> (response, [(fact id, label, evidence)])
    "msc-f0": {
        "keeper": ("How is your dog Rex? I like animals too.",
                   [("user.1", "supported", "your dog Rex"), ("bot.1", "supported", "I like animals")]),
        "breaker": ("How is your cat Rex? I never liked animals.",
                    [("user.1", "contradicted", "your cat Rex"), ("bot.1", "contradicted", "I never liked animals")]),
    },
    "msc-f1": {
        "keeper": ("Your dog Rex is fine. I hate animals.",
                   [("rex", "supported", "Your dog Rex"), ("bot.1", "contradicted", "I hate animals")]),
        "breaker": ("Is your cat Rex well?", [("rex", "contradicted", "your cat Rex"), ("bot.1", "not_addressed", "")]),
    },
}  # fmt: skip
FACT_SHEETS = {
    "msc-f0": [
        {"id": "user.1", "text": "I have a dog called Rex.", "source": "persona.user"},
        {"id": "bot.1", "text": "I like animals.", "source": "persona.bot"},
    ],
    "msc-f1": [
        {"id": "rex", "text": "The user has a dog called Rex.", "source": "session 1 turn 1"},
        {"id": "bot.1", "text": "I like animals.", "source": "persona.bot"},
    ],
}


def make_fact_items() -> list[dict[str, Any]]:
    items = make_items(2)
    for item, item_id in zip(items, FACT_RESPONSES, strict=True):
        item["id"] = item_id
        item["candidates"] = {system: text for system, (text, _) in FACT_RESPONSES[item_id].items()}
        if item_id == "msc-f1":
            item["facts"] = FACT_SHEETS[item_id]
    return items


def make_fact_judgments() -> list[dict[str, Any]]:
    rows = []
    jid = 5000
    for item_id, systems in FACT_RESPONSES.items():
        sources = {f["id"]: f["source"] for f in FACT_SHEETS[item_id]}
        for system, (_, labels) in systems.items():
            facts = [{"id": f, "label": lab, "evidence": ev, "source": sources[f]} for f, lab, ev in labels]
            contradicted = sum(lab == "contradicted" for _, lab, _ in labels)
            supported = sum(lab == "supported" for _, lab, _ in labels)
            addressed = supported + contradicted
            retention = supported / addressed if addressed else None
            details = {
                "facts": facts,
                "contradiction_count": contradicted,
                "contradiction_rate": contradicted / len(labels),
                "retention_rate": retention,
            }
            score = 100.0 if retention is None else float(int(1 + 99 * retention + 0.5))
            rows.append(
                _row(RUN_F, jid, item_id=item_id, mode="single", system_a=system, rubric_id="fact-check",
                     aspect="consistency", score=score, details=details,
                     explanation=f"The response contradicts {contradicted} of {len(labels)} facts.")
            )  # fmt: skip
            jid += 1
    return rows


AuditLabels = tuple[list[str], list[str]] | None
MEMORY_AUDITS: dict[str, dict[str, AuditLabels]] = {  # system -> item -> (gold, generated labels); None: unparseable
    # faithful: P (1 + 1) / 2 = 1, R (1 + 1/2) / 2 = 3/4, F1 (1 + 2/3) / 2 = 5/6; errors: missing 1
    "faithful": {"msc-m0": (["recalled"] * 3, ["supported"] * 3), "msc-m1": (["recalled", "missing"], ["supported"])},
    # swapper: P (1/4 + 1/2) / 2 = 3/8, R (1/3 + 1/2) / 2 = 5/12, F1 (2/7 + 1/2) / 2 = 11/28;
    # errors fabricated 1, wrong relationship 3, missing 3 -> shares 1/7, 3/7, 3/7
    "swapper": {
        "msc-m0": (["missing", "recalled", "missing"],
                   ["wrong_relationship", "wrong_relationship", "supported", "fabricated"]),
        "msc-m1": (["recalled", "missing"], ["supported", "wrong_relationship"]),
        "msc-m2": None,
    },
}  # fmt: skip


def make_memory_judgments() -> list[dict[str, Any]]:
    from workers.memoryaudit import memory_figures

    rows = []
    jid = 7000
    for system, audits in MEMORY_AUDITS.items():
        for item_id, labels in audits.items():
            row = {"item_id": item_id, "mode": "single", "system_a": system, "rubric_id": "memory-audit",
                   "aspect": "memory"}  # fmt: skip
            if labels is None:
                rows.append(_row(RUN_M, jid, **row, status="unparseable", raw_output="I cannot audit this."))
            else:
                details = memory_figures(*labels)
                rows.append(_row(RUN_M, jid, **row, score=float(details["memory_score"]), details=details))
            jid += 1
    return rows


MON = "mon_aaaa"


def make_monitor(paused: bool = False) -> dict[str, Any]:
    status = {
        "state": "paused_budget" if paused else "active",
        "message": "sampling paused: budget reached; it resumes at 2026-11-21 00:00 UTC" if paused else "sampling 0.5",
        "paused_until": "2026-11-21T00:00:00" if paused else None,
        "spent_today_usd": 1.25,
        "responses_today": 400,
        "sampled_today": 200,
        "pending_judgments": 3,
    }
    return {
        "id": MON, "name": "prod-bot", "run_id": RUN_A, "rubrics": ["rsum-single", "fact-check"], "judges": [JUDGE],
        "aspects": ["consistency"], "options": {}, "sample_rate": 0.5, "daily_budget_usd": 20.0,
        "retention_days": 90, "alerts": [], "callback_url": None, "callback_secret_set": False,
        "created_at": "2026-11-20T08:00:00", "updated_at": "2026-11-20T08:00:00", "status": status,
    }  # fmt: skip


def make_alerts() -> list[dict[str, Any]]:
    """An open alert of v2 against v1 and an earlier, resolved one, as GET /v1/monitors/{id}/alerts gives them."""
    worst = [
        {"response_id": f"msc-{k}", "system": "bot", "version": "v2", "segment": None,
         "timestamp": "2026-11-20T10:00:00Z", "score": 20.0 + k, "explanation": "forgot the dog's name",
         "response": "Who is Rex?"}
        for k in range(3)
    ]  # fmt: skip
    evidence = {
        "decision": "regression", "n": 150, "decided_at": 142, "n_baseline": 160, "n_candidate": 150,
        "baseline_mean": 75.2, "candidate_mean": 69.9, "difference": 5.3, "ci_low": 1.2, "ci_high": 9.8,
        "confidence": 0.95, "margin": 0.0, "p_value": 0.01, "slices": {"by": "version", "baseline": "v1",
        "candidate": "v2"}, "worst": worst,
    }  # fmt: skip
    return [
        {"id": "alr_open", "monitor_id": MON, "rule": "v-regression", "kind": "compare", "status": "open",
         "opened_at": "2026-11-20T11:00:00Z", "resolved_at": None, "evidence": evidence, "resolution": None},
        {"id": "alr_old", "monitor_id": MON, "rule": "v-regression", "kind": "compare", "status": "resolved",
         "opened_at": "2026-11-19T08:00:00Z", "resolved_at": "2026-11-19T12:00:00Z", "evidence": evidence,
         "resolution": {"reason": "160 pairs judged since the alert opened show no regression (it needed 150)"}},
    ]  # fmt: skip


def monitor_verdicts() -> pd.DataFrame:
    """Verdicts of the fake monitor: v1 and v2 over four hours, v2 lower, fact-check with contradictions."""
    rows = []
    for i in range(48):
        version = "v1" if (i // 4) % 2 else "v2"  # each hour has six of each
        for rubric in ("rsum-single", "fact-check"):
            rows.append(
                {"ts": pd.Timestamp(f"2026-11-20T{8 + i % 4:02d}:{i:02d}:00"), "system": "bot", "version": version,
                 "segment": "", "rubric_id": rubric, "aspect": "consistency", "judge": JUDGE,
                 "score": float(60 + (i * 7) % 30 - (10 if version == "v2" else 0)),
                 "contradiction_rate": (0.5 if version == "v2" and i % 3 == 0 else 0.0) if rubric == "fact-check"
                 else None}
            )  # fmt: skip
    return pd.DataFrame(rows)


def monitor_series(q: dict[str, list[str]]) -> dict[str, Any]:
    from judge_api.stats.series import series_of_verdicts

    frame = monitor_verdicts()
    for key, column in (("rubric", "rubric_id"), ("aspect", "aspect")):
        if key in q:
            frame = frame[frame[column] == q[key][-1]]
    by = q.get("by") or ["version"]
    out = series_of_verdicts(frame, q.get("bucket", ["1h"])[-1], by)
    rows = []
    for r in out.to_dict("records"):
        r["bucket_start"] = pd.Timestamp(r["bucket_start"]).isoformat()
        r["segment"] = r["segment"] or None
        rows.append(r)
    return {"monitor_id": MON, "bucket": q.get("bucket", ["1h"])[-1], "by": by, "confidence": 0.95, "rows": rows}


def unparsed(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as a judgment whose reply could not be parsed: no score, verdict or details."""
    cleared = {"score": None, "preference": None, "outcome": None, "verdict": None, "details": None}
    return {**row, "status": "unparseable", **cleared}


class FakeApi:
    """Answers the dashboard's requests from in-memory runs; records the POST bodies."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.posts: list[tuple[str, Any]] = []
        self.requests: list[str] = []
        self.aggregate_requests: list[str] = []
        self.items = make_items()
        self.runs: dict[str, dict[str, Any]] = {}
        self.ratings: dict[str, list[dict[str, Any]]] = {}
        if state == "data":
            for run_id, name, shift in ((RUN_A, "candidate", -10.0), (RUN_B, "baseline", 0.0)):
                rows = make_judgments(run_id, shift)
                self.runs[run_id] = {"rows": rows, "summary": summary(run_id, rows, name)}
                self.ratings[run_id] = make_ratings() if run_id == RUN_A else []
        if state == "unparseable":  # judgments exist, none gave a verdict (issue 26.2)
            rows = [unparsed(r) for r in make_judgments(RUN_A)]
            self.runs[RUN_A] = {"rows": rows, "summary": summary(RUN_A, rows, "all unparseable")}
            self.ratings[RUN_A] = []
            baseline = make_judgments(RUN_B)  # a healthy run to compare it with (the newest comparable one)
            self.runs[RUN_B] = {"rows": baseline, "summary": summary(RUN_B, baseline, "baseline")}
            self.ratings[RUN_B] = []
            rated = [unparsed(r) for r in make_judgments(RUN_R)]  # humans rated it: only the judge's scores are missing
            self.runs[RUN_R] = {"rows": rated, "summary": summary(RUN_R, rated, "all unparseable, rated")}
            self.ratings[RUN_R] = make_ratings()
            facts = [unparsed(r) for r in make_fact_judgments()]  # a fact-check run, every verdict unparseable
            fact_summary = {**summary(RUN_F, facts, "fact-check, all unparseable"), "rubrics": ["fact-check"]}
            self.runs[RUN_F] = {"rows": facts, "summary": fact_summary}
            self.ratings[RUN_F] = []
        if state == "facts":
            self.items = make_fact_items()
            rows = make_fact_judgments()
            self.runs[RUN_F] = {"rows": rows, "summary": summary(RUN_F, rows, "fact-check")}
            self.ratings[RUN_F] = []
        if state == "memory":
            rows = make_memory_judgments()
            self.runs[RUN_M] = {
                "rows": rows,
                "summary": {**summary(RUN_M, rows, "memory"), "rubrics": ["memory-audit"]},
            }
            self.ratings[RUN_M] = []
        if state == "calibrated":
            self.items = cal.make_items()
            for k, (run_id, name, rated) in enumerate(
                ((cal.RUN_C, "rated", cal.N_RATED), (cal.RUN_N, "few labels", 5), (cal.RUN_E, "unrated", 0))
            ):
                rows = cal.make_judgments(run_id, _row, 1 + 1000 * k)
                self.runs[run_id] = {"rows": rows, "summary": {**summary(run_id, rows, name), "n_items": cal.N_ITEMS}}
                self.ratings[run_id] = cal.make_ratings(rated)
        self.monitors = [make_monitor()] if state == "data" else []
        self.alerts = make_alerts() if state == "data" else []
        self._reports: dict[str, dict[str, Any]] = {}
        self.report_error = False
        self.auth: str | None = None

    def report(self, run_id: str) -> dict[str, Any]:
        from judge_api.stats.memory import audit_rows
        from judge_api.stats.report import build_report

        ratings = self.ratings[run_id]
        key = f"{run_id}:{len(ratings)}"
        if key not in self._reports:
            rows = self.runs[run_id]["rows"]
            frame = judgments_frame(rows)
            rframe = pd.DataFrame(ratings) if ratings else None
            audits = audit_rows(r for r in rows if r["rubric_id"] == "memory-audit")
            report = build_report(frame, rframe, n_boot=50, memory_audit=audits)
            self._reports[key] = {"run": self.runs[run_id]["summary"], **report}
        return self._reports[key]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        self.auth = request.headers.get("authorization")
        if self.state == "error":
            return httpx.Response(500, json={"detail": "database is down"})
        if self.state == "unreachable":
            raise httpx.ConnectError("connection refused", request=request)
        path, query = request.url.path, parse_qs(request.url.query.decode())
        q = {k: v[-1] for k, v in query.items()}
        if path == "/v1/rubrics":
            return httpx.Response(200, json=RUBRICS)
        version = re.fullmatch(r"/v1/rubrics/([^/]+)/versions/([^/]+)", path)
        if version:
            rubric_id, wanted = version.groups()
            if wanted != "v1" or rubric_id not in {r["id"] for r in RUBRICS}:
                return httpx.Response(404, json={"detail": f"rubric {rubric_id!r} has no version {wanted!r}"})
            content = {
                "id": rubric_id,
                "messages": [{"role": "system", "text": "You are an impartial judge."},
                             {"role": "user", "template": "prompt.j2"}],
                "templates": {"prompt.j2": f"Rate the {rubric_id} response: {{{{ response }}}}"},
            }  # fmt: skip
            return httpx.Response(
                200, json={"id": rubric_id, "version": wanted, "current": False, "stored_at": None, "content": content}
            )
        if path == "/v1/runs" and request.method == "GET":
            items = [r["summary"] for r in self.runs.values()]
            offset, limit = int(q.get("offset", 0)), int(q.get("limit", 50))
            return httpx.Response(
                200,
                json={"total": len(items), "offset": offset, "limit": limit, "items": items[offset : offset + limit]},
            )
        if path == "/v1/runs/jsonl" and request.method == "POST":
            key = request.headers.get("idempotency-key")
            self.posts.append((path, {"body": request.content.decode(), "query": query, "key": key}))
            if "run_new" not in self.runs:  # the started run is listed and readable from now on, as the API's
                self.runs["run_new"] = {"rows": [], "summary": {**summary("run_new", [], "items"), "n_items": 1}}
                self.ratings["run_new"] = []
            return httpx.Response(
                202,
                json={"id": "run_new", "status": "queued", "n_items": 1, "n_judgments": 3, "url": "/v1/runs/run_new"},
            )
        if path == "/v1/monitors":
            return httpx.Response(200, json={"total": len(self.monitors), "offset": 0, "limit": 500,
                                             "items": self.monitors})  # fmt: skip
        if path == f"/v1/monitors/{MON}/alerts" and self.monitors:
            return httpx.Response(200, json={"total": len(self.alerts), "offset": 0, "limit": 200,
                                             "items": self.alerts})  # fmt: skip
        if path == f"/v1/monitors/{MON}/series" and self.monitors:
            return httpx.Response(200, json=monitor_series(query))
        if path == f"/v1/monitors/{MON}/responses" and self.monitors:
            start = pd.Timestamp(q["start"])
            start = start.tz_convert(None) if start.tz else start
            verdicts = monitor_verdicts()
            chosen = verdicts[(verdicts["ts"].dt.floor("h") == start) & (verdicts["rubric_id"] == "rsum-single")]
            if "version" in q:
                chosen = chosen[chosen["version"] == q["version"]]
            items = [
                {"response_id": f"msc-{k % 6}", "ts": r["ts"].isoformat(), "system": "bot", "version": r["version"],
                 "segment": None, "run_id": RUN_A,
                 "verdicts": [{"rubric_id": "rsum-single", "aspect": "consistency", "judge": JUDGE, "status": "done",
                               "score": r["score"]}]}
                for k, r in enumerate(chosen.to_dict("records"))
            ]  # fmt: skip
            return httpx.Response(200, json={"monitor_id": MON, "run_id": RUN_A, "items": items})
        match = re.fullmatch(r"/v1/runs/([^/]+)(/.*)?", path)
        if not match or match.group(1) not in self.runs:
            return httpx.Response(404, json={"detail": f"run {path} not found"})
        run_id, rest = match.group(1), match.group(2) or ""
        run = self.runs[run_id]
        if rest == "":
            return httpx.Response(200, json=run["summary"])
        if rest == "/report":
            if self.report_error:
                return httpx.Response(500, text="Internal Server Error")
            return httpx.Response(200, json=self.report(run_id))
        if rest == "/judgments":
            return httpx.Response(200, json=self.judgments(run["rows"], q))
        if rest == "/facts":
            return httpx.Response(200, json=self.facts(run["rows"], q))
        if rest in ("/item-scores", "/order-outcomes"):
            self.aggregate_requests.append(f"{rest}?{request.url.query.decode()}")
            return httpx.Response(200, json=self.aggregates(rest, run["rows"], self.ratings[run_id], q))
        if rest in ("/score-deltas", "/worse-items"):
            self.aggregate_requests.append(f"{rest}?{request.url.query.decode()}")
            if q.get("baseline") not in self.runs:
                return httpx.Response(404, json={"detail": f"run {q.get('baseline')!r} not found"})
            return httpx.Response(200, json=self.comparison(rest, self.runs[q["baseline"]]["rows"], run["rows"], q))
        if rest == "/judgments.csv":
            buffer = io.StringIO()
            judgments_frame(run["rows"]).to_csv(buffer, index=False)
            return httpx.Response(200, text=buffer.getvalue(), headers={"content-type": "text/csv"})
        if rest == "/items":
            wanted = query.get("item_id")
            items = [i for i in self.items if not wanted or i["id"] in wanted]
            offset, limit = int(q.get("offset", 0)), int(q.get("limit", 100))
            return httpx.Response(
                200,
                json={"total": len(items), "offset": offset, "limit": limit, "items": items[offset : offset + limit]},
            )
        if rest == "/human-ratings" and request.method == "GET":
            only = query.get("item_id")  # as the API: only these items' ratings when asked
            ratings = [r for r in self.ratings[run_id] if not only or r["item_id"] in only]
            return httpx.Response(200, json={"run_id": run_id, "total": len(ratings), "items": ratings})
        if rest == "/human-ratings" and request.method == "POST":
            body = json.loads(request.content)
            self.posts.append((path, body))
            for r in body["ratings"]:
                self.ratings[run_id].append(
                    {
                        "system_b": None,
                        "turn": None,
                        "tie_inconsistent": False,
                        "scale_min": 1.0,
                        "scale_max": 100.0,
                        **r,
                    }
                )
            return httpx.Response(201, json={"run_id": run_id, "created": len(body["ratings"]), "updated": 0})
        if rest == "/agreement":
            if not self.ratings[run_id]:
                return httpx.Response(409, json={"detail": "this run has no human ratings yet"})
            return httpx.Response(
                200,
                json={
                    "run_id": run_id,
                    "n_ratings": len(self.ratings[run_id]),
                    "agreement": self.report(run_id)["agreement"],
                },
            )
        if rest == "/label-queue" and request.method == "GET":
            if run_id != cal.RUN_C:
                return httpx.Response(404, json={"detail": "this run has no label queue"})
            return httpx.Response(200, json=cal.label_queue(run_id, self.ratings[run_id]))
        if rest == "/retry":
            return httpx.Response(200, json={"run_id": run_id, "requeued": 1})
        return httpx.Response(404, json={"detail": "Not Found"})

    @staticmethod
    def facts(rows: list[dict[str, Any]], q: dict[str, str]) -> dict[str, Any]:
        """``/facts`` as the API answers it: one row per labelled fact of the done fact-check judgments."""
        out = []
        for row in rows:
            texts = {f["id"]: f["text"] for f in FACT_SHEETS.get(row["item_id"], [])}
            for fact in (row.get("details") or {}).get("facts") or []:
                out.append(
                    {"judgment_id": row["id"], "item_id": row["item_id"], "system": row["system_a"],
                     "judge": row["judge"], "rubric_id": row["rubric_id"], "aspect": row["aspect"],
                     "sample_index": 0, "fact_id": fact["id"], "text": texts.get(fact["id"]),
                     "source": fact["source"], "label": fact["label"], "evidence": fact["evidence"]}
                )  # fmt: skip
        for key in ("label", "system", "item_id"):
            if key in q:
                out = [r for r in out if r[key] == q[key]]
        if "source" in q:
            wanted = q["source"]
            out = [r for r in out if r["source"] == wanted or r["source"].startswith((wanted + " ", wanted + "."))]
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", 100))
        return {"total": len(out), "offset": offset, "limit": limit, "items": out[offset : offset + limit]}

    @staticmethod
    def aggregates(
        rest: str, rows: list[dict[str, Any]], ratings: list[dict[str, Any]], q: dict[str, str]
    ) -> dict[str, Any]:
        """``/item-scores`` and ``/order-outcomes`` as the API answers them: the rows grouped as the database groups
        them (per key and rubric scale, per key and order), merged by the API's own code."""
        kind = "score" if rest == "/item-scores" else "preference"
        rated = {r["item_id"] for r in ratings if r.get("kind", "score") == kind}
        chosen = [r for r in rows if r["status"] == "done" and (q.get("rated") != "true" or r["item_id"] in rated)]
        for name, column in (("item_id", "item_id"), ("system", "system_a"), ("aspect", "aspect"), ("judge", "judge")):
            if name in q:
                chosen = [r for r in chosen if r[column] == q[name]]
        groups: dict[tuple[Any, ...], list[float]] = {}
        extra: dict[str, Any] = {}
        if kind == "score":
            for r in chosen:
                if r["mode"] == "single" and r["score"] is not None:
                    key = (r["item_id"], r["system_a"], r["aspect"], r["judge"], r["rubric_id"], 1.0, 100.0)
                    g = groups.setdefault(key, [r["id"], 0.0, 0])
                    g[0], g[1], g[2] = min(g[0], r["id"]), g[1] + r["score"], g[2] + 1
            out = item_aggregates.merge_item_scores([(*k, *v) for k, v in groups.items()], {})
        else:  # the dashboard's own frame path (tests/api/test_item_aggregates.py holds the API's SQL to it)
            from dashboard import analysis

            orders = analysis.order_outcomes(judgments_frame(chosen)) if chosen else pd.DataFrame()
            records = orders.astype(object).where(orders.notna(), None).to_dict("records") if len(orders) else []
            both = [r for r in records if r["outcome_ab"] is not None and r["outcome_ba"] is not None]
            pairs: dict[tuple[str, str, str], list[int]] = {}
            for r in both:
                counts = pairs.setdefault((r["system_a"], r["system_b"], r["aspect"]), [0, 0])
                counts[0], counts[1] = counts[0] + 1, counts[1] + int(r["flipped"])
            out = [r for r in records if r["flipped"]] if q.get("flipped") == "true" else records
            extra = {"n_keys": len(records), "n_both": len(both), "n_flipped": sum(int(r["flipped"]) for r in both),
                     "by_pair": [{"system_a": a, "system_b": b, "aspect": aspect, "n": n, "flips": f}
                                 for (a, b, aspect), (n, f) in sorted(pairs.items())]}  # fmt: skip
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", 1000))
        return {"total": len(out), "offset": offset, "limit": limit, "items": out[offset : offset + limit], **extra}

    @staticmethod
    def comparison(
        rest: str, base_rows: list[dict[str, Any]], cand_rows: list[dict[str, Any]], q: dict[str, str]
    ) -> dict[str, Any]:
        """``/score-deltas`` and ``/worse-items`` as the API answers them: each run's scores summed per key as the
        database sums them, compared by the API's own code (``judge_api.stats.compare``)."""

        def means(rows: list[dict[str, Any]]) -> pd.DataFrame:
            sums: dict[tuple[str, str, str, str], list[float]] = {}
            for r in rows:
                if r["mode"] == "single" and r["status"] == "done" and r["score"] is not None:
                    total = sums.setdefault((r["item_id"], r["system_a"], r["aspect"], r["judge"]), [0.0, 0])
                    total[0], total[1] = total[0] + r["score"], total[1] + 1
            return compare.item_means(compare.sums_frame([(*k, *v) for k, v in sums.items()]))

        base, cand = means(base_rows), means(cand_rows)
        if rest == "/score-deltas":
            out = compare.score_deltas(base, cand, n_boot=int(q.get("n_boot", 1000)), seed=int(q.get("seed", 0)))
            return {"items": out.astype(object).where(out.notna(), None).to_dict("records")}
        worse = compare.worse_items(base, cand)
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", 50))
        page = worse.iloc[offset : offset + limit]
        return {"total": len(worse), "offset": offset, "limit": limit, "items": page.to_dict("records")}

    @staticmethod
    def judgments(rows: list[dict[str, Any]], q: dict[str, str]) -> dict[str, Any]:
        out = rows
        for key in ("status", "aspect", "item_id", "mode"):
            if key in q:
                out = [r for r in out if r[key] == q[key]]
        if "system" in q:
            out = [r for r in out if q["system"] in (r["system_a"], r["system_b"])]
        if "score_min" in q:
            out = [r for r in out if r["score"] is not None and r["score"] >= float(q["score_min"])]
        if "score_max" in q:
            out = [r for r in out if r["score"] is not None and r["score"] <= float(q["score_max"])]
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", 100))
        return {"total": len(out), "offset": offset, "limit": limit, "items": out[offset : offset + limit]}


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeApi) -> FakeApi:
    def make_client(conn: api.Conn, timeout: float = 120.0) -> ApiClient:
        client = ApiClient(conn.url, conn.key, timeout=timeout)
        client._http = httpx.Client(
            base_url=client.base_url, transport=httpx.MockTransport(fake.handler), headers=client._http.headers
        )
        return client

    monkeypatch.setattr(api, "make_client", make_client)
    monkeypatch.setenv("DJ_API_URL", "http://fake-api")
    return fake
