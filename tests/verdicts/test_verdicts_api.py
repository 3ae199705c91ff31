"""``POST /v1/runs/{id}/verdicts`` on the real app and database: files and JSON rows stored as imported judgments,
the report and agreement computed on them (checked against scipy and a hand-computed kappa), bad rows refused with
the row and field and nothing stored, a repeated import storing nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from tests.api.conftest import JUDGE, Api, ApiFactory

DATA = Path(__file__).parent / "data"
QUESTIONS = range(81, 89)
MODELS = ("gpt-4", "vicuna-13b-v1.2", "llama-13b")
N_BINS = 5


def mtbench_run_body(**overrides: Any) -> dict[str, Any]:
    items = [
        {
            "id": f"mtbench-{q}-t1",
            "dialogue": [{"speaker": "user", "text": f"Question {q}"}],
            "candidates": {m: f"Answer of {m} to question {q}." + " more" * (i * 3) for i, m in enumerate(MODELS)},
        }
        for q in QUESTIONS
    ]
    body = {"items": items, "rubrics": ["rsum-single"], "judges": [JUDGE], "aspects": ["consistency"]}
    return {**body, **overrides}


def post_file(api: Api, run_id: str, name: str, content: bytes | None = None, **params: Any) -> Any:
    data = (DATA / name).read_bytes() if content is None else content
    query = {"name": name, **{k: v for k, v in params.items() if v is not None}}
    headers = {"content-type": "text/csv" if name.endswith(".csv") else "application/octet-stream"}
    return api.client.post(f"/v1/runs/{run_id}/verdicts", content=data, params=query, headers=headers)


def human_ratings() -> list[dict[str, Any]]:
    with (DATA / "human_scores.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{**r, "value": float(r["value"]), "scale_min": 1.0, "scale_max": 5.0} for r in rows]


def expected_score_agreement(judge_scores: dict[tuple[str, str], float], scale: tuple[float, float]) -> dict[str, Any]:
    """The figures computed here, independently of judge_api.stats: scipy's correlations of the judge's score with
    the mean human score per (item, system), and the quadratic-weighted kappa on five bins of both unit scales."""
    humans: dict[tuple[str, str], list[float]] = {}
    for r in human_ratings():
        humans.setdefault((r["item_id"], r["system"]), []).append(r["value"])
    keys = sorted(set(judge_scores) & set(humans))
    judge = np.array([judge_scores[k] for k in keys])
    human = np.array([np.mean(humans[k]) for k in keys])
    human_unit = np.array([np.mean([(v - 1) / 4 for v in humans[k]]) for k in keys])
    judge_unit = (judge - scale[0]) / (scale[1] - scale[0])

    def bins(unit: np.ndarray) -> np.ndarray:
        return np.minimum(np.floor(unit * N_BINS), N_BINS - 1).astype(int)

    observed = np.zeros((N_BINS, N_BINS))
    for a, b in zip(bins(judge_unit), bins(human_unit), strict=True):
        observed[a, b] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    weights = np.array([[(i - j) ** 2 for j in range(N_BINS)] for i in range(N_BINS)], dtype=float)
    return {
        "n": len(keys),
        "spearman": sps.spearmanr(judge, human).statistic,
        "pearson": sps.pearsonr(judge, human).statistic,
        "kendall": sps.kendalltau(judge, human).statistic,
        "qwk": 1 - (weights * observed).sum() / (weights * expected).sum(),
    }


def fastchat_scores() -> dict[tuple[str, str], float]:
    lines = [json.loads(line) for line in (DATA / "gpt-4_single.jsonl").read_text().splitlines()]
    return {
        (f"mtbench-{r['question_id']}-t1", r["model"]): r["score"] for r in lines if r["turn"] == 1 and r["score"] != -1
    }


def csv_scores() -> dict[tuple[str, str], float]:
    with (DATA / "my_judge_scores.csv").open(newline="", encoding="utf-8-sig") as handle:
        return {(r["item_id"], r["system"]): float(r["score"]) for r in csv.DictReader(handle)}


@pytest.fixture
def mt_run(api: Api) -> str:
    return str(api.submit(body=mtbench_run_body())["id"])


def test_imported_scores_and_human_ratings_give_the_agreement_scipy_gives(api: Api, mt_run: str) -> None:
    single = post_file(api, mt_run, "gpt-4_single.jsonl", turn=1)
    assert single.status_code == 201, single.text
    body = single.json()
    assert (body["created"], body["unchanged"], body["judges"], body["format"]) == (24, 0, ["gpt-4"], "fastchat-single")
    scores = post_file(api, mt_run, "my_judge_scores.csv")
    assert scores.status_code == 201, scores.text
    assert scores.json()["ignored_columns"] == ["comment"] and scores.json()["created"] == 24
    ratings = api.client.post(f"/v1/runs/{mt_run}/human-ratings", json={"ratings": human_ratings()})
    assert ratings.status_code == 201, ratings.text

    agreement = api.client.get(f"/v1/runs/{mt_run}/agreement").json()["agreement"]
    rows = {r["judge"]: r for r in agreement["scores"]}
    assert set(rows) == {"gpt-4", "my-judge"}  # the run's own judge has judged nothing yet
    for judge, judge_scores, scale in (("gpt-4", fastchat_scores(), (1, 10)), ("my-judge", csv_scores(), (1, 100))):
        expected = expected_score_agreement(judge_scores, scale)
        row = rows[judge]
        assert row["imported"] is True and row["n"] == expected["n"]
        for name in ("spearman", "pearson", "kendall", "qwk"):
            assert row[name] == pytest.approx(expected[name], abs=1e-9), (judge, name)
    assert rows["gpt-4"]["n"] == 23  # FastChat's score -1 is an unparseable judgment, not a score

    report = api.client.get(f"/v1/runs/{mt_run}/report", params={"n_boot": 20}).json()
    imported = report["counts"]["imported"]
    assert set(imported) == {"gpt-4", "my-judge"} and all(len(v) == 1 and len(v[0]) == 64 for v in imported.values())
    assert report["counts"]["by_status"]["unparseable"] == 1
    assert report["panel"] is None  # the default panel is the run's own judges: imported ones join only when named
    cost = report["cost"]  # an imported verdict is no provider call and stays out of the means
    assert (cost["n_finished"], cost["n_imported"], cost["n_provider_calls"], cost["mean_cost_usd"]) == (
        48,
        48,
        0,
        None,
    )
    summary = report["run"]
    assert summary["n_judgments"] == 8 * 3 + 48 and summary["counts"]["pending"] == 24
    assert summary["status"] != "done"  # the imported verdicts do not finish the run's own judging
    named = api.client.get(
        f"/v1/runs/{mt_run}/report", params={"n_boot": 20, "panel_judge": ["gpt-4", "my-judge"]}
    ).json()
    assert named["panel"]["members"] == ["gpt-4", "my-judge"]


def test_imported_pairwise_verdicts_get_preferences_ranking_bias_and_kappa(api: Api, mt_run: str) -> None:
    response = post_file(api, mt_run, "gpt-4_pair.jsonl")
    assert response.status_code == 201, response.text
    assert response.json()["created"] == 24
    lines = [json.loads(line) for line in (DATA / "gpt-4_pair.jsonl").read_text().splitlines()]
    code = {"model_1": 1, "model_2": -1, "tie": 0}
    # the combined verdict per pair: both games agree -> that, disagree -> tie, one game an error -> the other
    judge_votes = {}
    for r in lines:
        games = [code[w] for w in (r["g1_winner"], r["g2_winner"]) if w != "error"]
        judge_votes[(f"mtbench-{r['question_id']}-t1", r["model_1"], r["model_2"])] = (
            games[0] if len(set(games)) == 1 else 0
        )
    votes = []
    for n, ((item_id, a, b), vote) in enumerate(sorted(judge_votes.items())):
        human = vote if n % 3 else -vote if vote else 1  # every third human vote disagrees
        votes.append(
            {
                "item_id": item_id,
                "system": a,
                "system_b": b,
                "aspect": "overall",
                "rater": "expert_1",
                "kind": "preference",
                "value": human,
            }
        )
    stored = api.client.post(f"/v1/runs/{mt_run}/human-ratings", json={"ratings": votes})
    assert stored.status_code == 201, stored.text
    report = api.client.get(f"/v1/runs/{mt_run}/report", params={"n_boot": 20}).json()
    row = next(r for r in report["agreement"]["preferences"]["judge_vs_human"] if r["judge"] == "gpt-4")
    # both sides oriented to the alphabetical order of the pair (FastChat's convention, stats/agreement.py)
    pairs = [
        (
            judge_votes[(v["item_id"], v["system"], v["system_b"])] * (1 if v["system"] < v["system_b"] else -1),
            v["value"] * (1 if v["system"] < v["system_b"] else -1),
        )
        for v in votes
    ]
    confusion = np.zeros((3, 3))
    for j, h in pairs:
        confusion[j + 1, int(h) + 1] += 1
    expected_kappa = 1 - (1 - np.trace(confusion) / len(pairs)) / (
        1 - (confusion.sum(1) @ confusion.sum(0)) / len(pairs) ** 2
    )
    assert row["imported"] is True
    assert (row["s1"]["agree"], row["s1"]["total"]) == (sum(j == h for j, h in pairs), len(pairs))
    assert row["kappa_s1"] == pytest.approx(expected_kappa, abs=1e-9)
    ranked = [r for r in report["ranking"] if r["judge"] == "gpt-4"]
    assert {r["system"] for r in ranked} == set(MODELS)
    assert min(ranked, key=lambda r: r["rank"])["system"] == "gpt-4"
    position = report["bias"]["per_judge"]["gpt-4"]["position"]
    assert position["n"] > 0  # both presentation orders were imported, so position bias is measured
    swap = report["bias"]["per_judge"]["gpt-4"]["swap"]
    assert (swap["n"], swap["flips"]) == (11, 1)  # one game was an error; one pair flipped with the order


def test_importing_the_same_file_again_stores_nothing(api: Api, mt_run: str) -> None:
    assert post_file(api, mt_run, "gpt-4_single.jsonl", turn=1).json()["created"] == 24
    before = api.row_counts()
    again = post_file(api, mt_run, "gpt-4_single.jsonl", turn=1)
    assert again.status_code == 201 and (again.json()["created"], again.json()["unchanged"]) == (0, 24)
    assert api.row_counts() == before
    # the same verdicts from another file are a conflict, not a silent second copy
    edited = (DATA / "gpt-4_single.jsonl").read_bytes().replace(b'"score": 7', b'"score": 8')
    conflict = post_file(api, mt_run, "gpt-4_single.jsonl", content=edited, turn=1)
    assert conflict.status_code == 409, conflict.text
    assert "already has this verdict" in conflict.text and api.row_counts() == before
    # under another judge name it is another judge
    other = post_file(api, mt_run, "gpt-4_single.jsonl", content=edited, turn=1, judge="gpt-4-rerun")
    assert other.status_code == 201 and other.json()["created"] == 24


def test_json_rows_with_their_source(api: Api, mt_run: str) -> None:
    rows = [
        {"item_id": "mtbench-81-t1", "system": "gpt-4", "judge": "mine", "score": 4, "scale_min": 1, "scale_max": 5},
        {
            "item_id": "mtbench-81-t1",
            "system": "gpt-4",
            "system_b": "llama-13b",
            "judge": "mine",
            "verdict": "A",
            "order": "ba",
            "explanation": "A is better",
        },
    ]
    first = api.client.post(f"/v1/runs/{mt_run}/verdicts", json={"verdicts": rows, "source": {"name": "mine.jsonl"}})
    assert first.status_code == 201, first.text
    assert first.json()["created"] == 2 and len(first.json()["source"]["sha256"]) == 64
    again = api.client.post(f"/v1/runs/{mt_run}/verdicts", json={"verdicts": rows})
    assert again.json()["unchanged"] == 2
    judgments = api.client.get(f"/v1/runs/{mt_run}/judgments", params={"judge": "mine"}).json()["items"]
    pair = next(j for j in judgments if j["mode"] == "pairwise")
    assert (pair["preference"], pair["outcome"], pair["order"], pair["status"]) == (2.0, "win", "ba", "done")
    assert pair["judge_params"]["imported"] is True and pair["rubric_version"] == "imported"


def test_alpacaeval_annotations_through_the_api(api: Api) -> None:
    records = json.loads((DATA / "alpacaeval_annotations.json").read_text())
    items = [
        {
            "id": f"alp-{n}",
            "dialogue": [{"speaker": "user", "text": a["instruction"]}],
            "candidates": {a["generator_1"]: a["output_1"], a["generator_2"]: a["output_2"]},
        }
        for n, a in enumerate(records)
    ]
    run = api.submit(body={"items": items, "rubrics": ["rsum-pairwise"], "judges": [JUDGE], "mode": ["pairwise"]})
    response = post_file(api, run["id"], "alpacaeval_annotations.json")
    assert response.status_code == 201, response.text
    assert response.json()["created"] == 4 and response.json()["judges"] == ["alpaca_eval_gpt4_turbo_fn"]
    report = api.client.get(f"/v1/runs/{run['id']}/report", params={"n_boot": 20}).json()
    prefs = [p for p in report["preferences"] if p["judge"] == "alpaca_eval_gpt4_turbo_fn"]
    assert prefs and sum(p["n"] for p in prefs) == 3  # the annotation without a preference is unparseable


def _row(**fields: Any) -> dict[str, Any]:
    row = {"item_id": "mtbench-81-t1", "system": "gpt-4", "judge": "ext", "score": 50, "scale_min": 1, "scale_max": 100}
    return {k: v for k, v in {**row, **fields}.items() if v is not None}


@pytest.mark.parametrize(
    ("rows", "status", "loc", "message"),
    [
        ([_row(), _row(item_id="mtbench-99-t1")], 422, ["verdicts", 1, "item_id"], "is not in run"),
        ([_row(system="gpt-5")], 422, ["verdicts", 0, "system"], "'gpt-5' is not a candidate of item"),
        (
            [_row(system_b="gpt-5", score=None, scale_min=None, scale_max=None, verdict="A")],
            422,
            ["verdicts", 0, "system_b"],
            "not a candidate",
        ),
        ([_row(scale_min=None, scale_max=None)], 422, ["verdicts", 0, "scale_min"], "a score needs its scale"),
        ([_row(scale_min=1, scale_max=10)], 422, ["verdicts", 0], "score: 50 is outside the scale 1..10"),
        ([_row(judge=JUDGE)], 409, ["verdicts", 0, "judge"], "is a judge this run calls"),
        ([_row(judge="panel")], 422, ["verdicts", 0, "judge"], "pseudo-judge"),
        ([_row()] * 2, 422, ["verdicts", 1], "the same verdict as verdicts 0"),
        (
            [_row(score=None, scale_min=None, scale_max=None, system_b="llama-13b", verdict="C")],
            422,
            ["verdicts", 0, "verdict"],
            "Input should be",
        ),
        ([_row(system_b="llama-13b")], 422, ["verdicts", 0], "is A, B or tie, not a score"),
        ([_row(score=None)], 422, ["verdicts", 0], "needs a score"),
        ([_row(explanation="a\x00b")], 422, ["verdicts", 0, "explanation"], "NUL"),
    ],
)
def test_a_bad_row_is_refused_with_its_row_and_field_and_nothing_is_stored(
    api: Api, mt_run: str, rows: list[dict[str, Any]], status: int, loc: list[Any], message: str
) -> None:
    before = api.row_counts()
    response = api.client.post(f"/v1/runs/{mt_run}/verdicts", json={"verdicts": rows})
    assert response.status_code == status, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", *loc] and message in detail["msg"]
    assert api.row_counts() == before


@pytest.mark.parametrize(
    ("name", "content", "params", "loc", "message"),
    [
        (
            "bad.csv",
            b"item_id,system,judge,score,scale_min,scale_max\nmtbench-81-t1,gpt-4,j,5,1,10\nmtbench-81-t1,"
            b"nobody,j,5,1,10\n",
            {},
            ["row 3", "system"],
            "'nobody' is not a candidate",
        ),
        ("bad.csv", b"item_id,system,judge,score\nmtbench-81-t1,gpt-4,j,5\n", {}, ["row 2", "scale_min"], "scale"),
        ("bad.csv", b"item_id,system,judge,score\nmtbench-81-t1,gpt-4,j,x\n", {}, ["row 2", "score"], "not a number"),
        ("gpt-4_single.jsonl", None, {"turn": 3}, ["file"], "no verdicts of turn 3"),
        ("gpt-4_single.jsonl", None, {}, ["line 25", "item_id"], "'mtbench-81-t2' is not in run"),
        ("gpt-4_single.jsonl", None, {"turn": 1, "judge": JUDGE}, ["line 1", "judge"], "is a judge this run calls"),
    ],
)
def test_a_bad_file_is_refused_with_its_row_and_field(
    api: Api, mt_run: str, name: str, content: bytes | None, params: dict[str, Any], loc: list[Any], message: str
) -> None:
    before = api.row_counts()
    response = post_file(api, mt_run, name, content, **params)
    assert response.status_code in (409, 422), response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", *loc] and message in detail["msg"], detail
    assert api.row_counts() == before


def test_a_source_name_that_cannot_be_stored_is_refused(api: Api, mt_run: str) -> None:
    before = api.row_counts()
    body = {"verdicts": [_row()], "source": {"name": "a\x00b"}}
    response = api.client.post(f"/v1/runs/{mt_run}/verdicts", json=body)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "source", "name"]
    content = (DATA / "my_judge_scores.csv").read_bytes()
    response = api.client.post(
        f"/v1/runs/{mt_run}/verdicts", content=content, params={"format": "csv", "name": "a\x00b.csv"}
    )
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "name"]
    assert api.row_counts() == before


def test_another_projects_run_is_not_found(api_factory: ApiFactory) -> None:
    secured = api_factory(auth=True)
    secured.create_key("alpha", ["submit", "read"], "alpha")
    secured.create_key("beta", ["submit", "read"], "beta")
    run = secured.submit("alpha", mtbench_run_body())
    response = secured.client.post(
        f"/v1/runs/{run['id']}/verdicts",
        content=(DATA / "gpt-4_single.jsonl").read_bytes(),
        params={"turn": 1},
        headers=secured.as_key("beta"),
    )
    assert response.status_code == 404


def test_fastchat_verdicts_join_an_imported_mtbench_run_without_touching_its_figures(
    api: Api, shared_dir: Path
) -> None:
    """The documented path: `import-mtbench` makes the run (items mtbench-<question>-t1, GPT-4's verdicts from
    lmsys/mt_bench_human_judgments and the expert votes), a FastChat pairwise file joins it under its own judge
    name, and the published figures of the run's verdicts stay what they were (886/1343 S1, 727/859 S2)."""
    from dialogue_judge.importers import EXTERNAL_JUDGE, import_mtbench
    from judge_api.db import session_scope

    with session_scope() as session:
        run_id = import_mtbench(session, shared_dir / "data" / "mtbench_human_judgments", 1)
    response = post_file(api, run_id, "gpt-4_pair.jsonl", turn=1, judge="fastchat-gpt-4")
    assert response.status_code == 201, response.text
    assert response.json()["created"] == 24
    agreement = api.client.get(f"/v1/runs/{run_id}/agreement", params={"human_prefix": "expert_"}).json()
    rows = {r["judge"]: r for r in agreement["agreement"]["preferences"]["judge_vs_human"]}
    published = rows[EXTERNAL_JUDGE]
    assert (published["s1"]["agree"], published["s1"]["total"]) == (886, 1343)
    assert (published["s2"]["agree"], published["s2"]["total"]) == (727, 859)
    assert published["imported"] is True  # import-mtbench marks its verdicts with gpt4_pair.jsonl's SHA-256
    assert rows["fastchat-gpt-4"]["imported"] is True and rows["fastchat-gpt-4"]["s1"]["total"] > 0


def test_a_run_bundle_keeps_its_imported_verdicts_marked(api: Api, mt_run: str) -> None:
    assert post_file(api, mt_run, "my_judge_scores.csv").status_code == 201
    before = api.client.get(f"/v1/runs/{mt_run}/report", params={"n_boot": 20}).json()
    exported = api.client.get(f"/v1/runs/{mt_run}/export")
    assert exported.status_code == 200
    assert api.client.delete(f"/v1/runs/{mt_run}").status_code == 200
    restored = api.client.post("/v1/runs/import", content=exported.content)
    assert restored.status_code == 201, restored.text
    mt_run = restored.json()["run_id"]  # an import is a new run (issue 42, finding 11)
    after = api.client.get(f"/v1/runs/{mt_run}/report", params={"n_boot": 20}).json()
    assert after["counts"]["imported"] == before["counts"]["imported"] and after["counts"]["imported"]
    assert after["scores"] == before["scores"]  # the imported scale (1-100) came back with the scores
    again = post_file(api, mt_run, "my_judge_scores.csv")
    assert (again.json()["created"], again.json()["unchanged"]) == (0, 24)
