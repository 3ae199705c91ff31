"""Issue 39 (D): ``GET /v1/runs/{id}/judgments?format=jsonl|csv|parquet`` streams every matching judgment as the
judgments frame of docs/data-contract.md, in keyset pages, with flat memory; ``format=json`` keeps its pages and
gains a cursor. Each format reads back equal to the stored rows; filters apply to all; a cursor page does not
shift when rows are written; bad input is a 422 naming the field; another project's run is a 404; no column
beyond the contract leaves."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import tracemalloc
from pathlib import Path
from typing import Any, cast

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest
from sqlalchemy import insert, select
from typer.testing import CliRunner

from dialogue_judge.cli import app as cli_app
from dialogue_judge.cli import runs as cli_runs
from dialogue_judge.client import ApiClient
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment
from judge_api.repository import claims, exports, judgments_frame
from tests.api.conftest import Api, run_body

FORMATS = ("jsonl", "csv", "parquet")
NUMERIC = {"score", "preference", "len_a", "len_b", "latency_ms", "cost_usd", "scale_min", "scale_max"}
NUMERIC |= {"list_cost_usd", "cache_saved_usd", "judgment_id", "sample_index", "input_tokens", "output_tokens"}
NUMERIC |= {"cached_input_tokens", "cache_write_tokens", "provider_calls"}


def _judge_half(run_id: str) -> None:
    """Write verdicts for most judgments as a worker does: scores, preferences, a few failures; some stay pending."""
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.system_b).where(Judgment.run_id == run_id).order_by(Judgment.id)
        ).all()
    engine = get_engine()
    chosen = rows[: len(rows) * 3 // 4]
    token, claimed = claims.claim_many(engine, [r.id for r in chosen], 600.0)
    rng = random.Random(7)
    verdicts = []
    for jid, system_b in chosen:
        if jid not in claimed:
            continue
        if rng.random() < 0.1:
            values: dict[str, Any] = {"status": "failed", "error": "provider said no"}
        elif system_b is None:
            values = {"status": "done", "score": float(rng.randint(1, 10)), "cost_usd": rng.uniform(0, 0.01)}
        else:
            p = rng.choice([-2, -1, 1, 2])
            values = {"status": "done", "preference": float(p), "outcome": {2: "win", -2: "loss"}.get(p, "tie")}
        values.update(input_tokens=rng.randint(10, 99), output_tokens=3, latency_ms=12.5, provider_calls=1)
        verdicts.append((jid, token, values))
    assert all(claims.write_verdicts(engine, verdicts))


def _submit(api: Api, n_items: int = 10, key: str | None = None) -> str:
    body = run_body(n_items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    body["aspects"] = ["consistency", "overall"]
    body["items"] = [{**it, "candidates": {"a": "A: Rex.", "b": "B: Max, ok", "c": 'C "?"'}} for it in body["items"]]
    run_id = str(api.submit(key, body)["id"])
    _judge_half(run_id)
    return run_id


@pytest.fixture
def run(api: Api) -> str:
    return _submit(api)


def _expected(run_id: str) -> list[dict[str, Any]]:
    """The stored rows through the report's frame reader (another code path than the export's)."""
    with session_scope() as session:
        frame = judgments_frame(session, run_id)
    return [_normal(r) for r in frame[exports.EXPORT_COLUMNS].to_dict("records")]


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    """One row with comparable values: numbers as floats, missing as None, text as str, cached as bool."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value == "":
            out[key] = None
        elif key in NUMERIC:
            out[key] = float(value)
        elif key == "cached":
            out[key] = value if isinstance(value, bool) else str(value).lower() in ("true", "1")
        else:
            out[key] = str(value)
    return out


def _read(fmt: str, body: bytes) -> list[dict[str, Any]]:
    if fmt == "jsonl":
        return [_normal(json.loads(line)) for line in body.decode().splitlines() if line]
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(body.decode()))
        assert reader.fieldnames == exports.EXPORT_COLUMNS
        return [_normal(row) for row in reader]
    table = pq.read_table(io.BytesIO(body))
    assert table.schema.names == exports.EXPORT_COLUMNS
    return [_normal(row) for row in table.to_pylist()]


def _export(api: Api, run_id: str, fmt: str, key: str | None = None, **params: Any) -> bytes:
    response = api.client.get(f"/v1/runs/{run_id}/judgments", params={"format": fmt, **params}, headers=api.as_key(key))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(exports.MEDIA_TYPES[fmt].split(";")[0])
    extension = {"jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}[fmt]
    assert response.headers["content-disposition"] == f'attachment; filename="{run_id}-judgments.{extension}"'
    return response.content


def test_each_format_reads_back_equal_to_the_stored_rows(api: Api, run: str) -> None:
    for fmt in FORMATS:
        _round_trip(api, run, fmt)


def _round_trip(api: Api, run: str, fmt: str) -> None:
    expected = _expected(run)
    assert len(expected) == 10 * (3 + 2 * 3)  # 3 single + 3 pairs x 2 orders per item
    assert {r["status"] for r in expected} == {"done", "failed", "pending"}
    assert any(r["preference"] is not None for r in expected) and any(r["score"] is not None for r in expected)
    original = exports.EXPORT_CHUNK, exports.ROW_GROUP
    exports.EXPORT_CHUNK, exports.ROW_GROUP = 7, 20  # many keyset pages and row groups, the last ones partly full
    try:
        body = _export(api, run, fmt)
    finally:
        exports.EXPORT_CHUNK, exports.ROW_GROUP = original
    assert _read(fmt, body) == expected
    if fmt == "parquet":
        groups = pq.ParquetFile(io.BytesIO(body)).metadata
        sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
        full, rest = divmod(len(expected), 21)  # pages of 7 gathered until 20 rows or more
        assert sizes == [21] * full + ([rest] if rest else [])


def test_judgments_csv_is_the_same_stream(api: Api, run: str) -> None:
    response = api.client.get(f"/v1/runs/{run}/judgments.csv")
    assert response.status_code == 200
    assert response.content == _export(api, run, "csv")
    assert int(response.headers["x-total-count"]) == len(_expected(run))
    done = api.client.get(f"/v1/runs/{run}/judgments", params={"format": "jsonl", "status": "done", "limit": 5})
    assert done.headers["x-total-count"] == "5" and len(done.content.splitlines()) == 5


def test_filters_apply_to_every_format(api: Api, run: str) -> None:
    for fmt in FORMATS:
        _filters(api, run, fmt)


def _filters(api: Api, run: str, fmt: str) -> None:
    expected = _expected(run)
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"system": "c"}, lambda r: "c" in (r["system_a"], r["system_b"])),
        ({"mode": "pairwise", "status": "done"}, lambda r: r["mode"] == "pairwise" and r["status"] == "done"),
        (
            {"item_id": "item-3", "aspect": "consistency"},
            lambda r: (r["item_id"], r["aspect"]) == ("item-3", "consistency"),
        ),
        ({"status": "failed"}, lambda r: r["status"] == "failed"),
        ({"judge": "nobody"}, lambda r: False),
    ]
    for params, keep in cases:
        wanted = [r for r in expected if keep(r)]
        got = _read(fmt, _export(api, run, fmt, **params))
        assert got == wanted, params
    first = expected[5]["judgment_id"]
    assert _read(fmt, _export(api, run, fmt, cursor=int(first), limit=4)) == expected[6:10]


def test_json_pages_keep_offset_and_add_a_stable_cursor(api: Api, run: str) -> None:
    url = f"/v1/runs/{run}/judgments"
    by_offset = api.client.get(url, params={"limit": 20, "offset": 20, "system": "a"}).json()
    assert by_offset["offset"] == 20 and by_offset["limit"] == 20 and len(by_offset["items"]) == 20
    assert api.client.get(url).json()["limit"] == 100  # the default page is unchanged

    seen: list[int] = []
    page = api.client.get(url, params={"limit": 25, "system": "a"}).json()
    total = page["total"]
    first_page_ids = [j["id"] for j in page["items"]]
    seen += first_page_ids
    # a row the cursor passed is deleted: later pages neither repeat nor skip a row
    with session_scope() as session:
        session.delete(session.get(Judgment, first_page_ids[3]))
    while page["next_cursor"] is not None:
        assert page["next_cursor"] == page["items"][-1]["id"]
        page = api.client.get(url, params={"limit": 25, "system": "a", "cursor": page["next_cursor"]}).json()
        seen += [j["id"] for j in page["items"]]
    assert len(seen) == len(set(seen)) == total
    assert seen == sorted(seen)
    assert all("a" in (j["system_a"], j["system_b"]) for j in page["items"])
    assert page["total"] == total - 1


BAD_INPUT: list[tuple[dict[str, Any], str, str]] = [
    ({"format": "xlsx"}, "format", "'json', 'jsonl', 'csv' or 'parquet'"),
    ({"format": "csv", "status": "finished"}, "status", "'pending'"),
    ({"status": "finished"}, "status", "'unparseable'"),
    ({"format": "parquet", "mode": "both"}, "mode", "'single' or 'pairwise'"),
    ({"limit": 1001}, "limit", "less than or equal to 1000"),
    ({"format": "jsonl", "offset": 10}, "offset", "cursor"),
    ({"cursor": 3, "offset": 10}, "cursor", "not both"),
    ({"format": "csv", "cursor": -1}, "cursor", "greater than or equal to 0"),
    ({"format": "jsonl", "score_min": "nan"}, "score_min", "finite"),
]


def test_bad_input_is_a_422_naming_the_field(api: Api, run: str) -> None:
    before = api.row_counts()
    for params, field, message in BAD_INPUT:
        response = api.client.get(f"/v1/runs/{run}/judgments", params=params)
        assert response.status_code == 422, (params, response.text)
        detail = response.json()["detail"]
        assert detail[0]["loc"] == ["query", field], params
        assert message in detail[0]["msg"], params
    assert api.row_counts() == before


def test_another_projects_run_is_a_404_in_every_format(secured: Api) -> None:
    run_id = _submit(secured, 3, key="alpha")
    for fmt in ("json", *FORMATS):
        params = {"format": fmt}
        assert (
            secured.client.get(
                f"/v1/runs/{run_id}/judgments", params=params, headers=secured.as_key("beta")
            ).status_code
            == 404
        )
        own = secured.client.get(f"/v1/runs/{run_id}/judgments", params=params, headers=secured.as_key("alpha-read"))
        assert own.status_code == 200
    assert secured.client.get(f"/v1/runs/{run_id}/judgments", params={"format": "csv"}).status_code == 401


def test_no_column_beyond_the_data_contract(api: Api) -> None:
    body = run_body(2, callback_url=None)
    run_id = str(api.submit(None, body)["id"])
    _judge_half(run_id)
    with session_scope() as session:  # internal columns hold values an export must not carry
        for judgment in session.scalars(select(Judgment).where(Judgment.run_id == run_id)):
            judgment.cache_key = "f" * 64
            judgment.prompt_hash = "e" * 64
            judgment.raw_output = "internal reply sk-live-123"
    forbidden = {"project_id", "cache_key", "prompt_hash", "raw_output", "dedup_key", "claim_token", "callback"}
    for fmt in FORMATS:
        content = _export(api, run_id, fmt)
        rows = _read(fmt, content)
        assert rows and all(list(r) == exports.EXPORT_COLUMNS for r in rows)
        assert not forbidden & set(rows[0])
        assert b"f" * 64 not in content and b"e" * 64 not in content and b"sk-live-123" not in content


def _peak_while_streaming(run_id: str, fmt: str) -> tuple[int, int]:
    """Peak traced memory while encoding the whole export, and the rows it holds."""
    conditions = exports.judgment_conditions(run_id)
    rows = 0
    tracemalloc.start()
    try:
        with session_scope() as session:
            for block in exports.ENCODERS[fmt](exports.export_rows(session, conditions, chunk=500)):
                rows += block.count(b"\n") if fmt != "parquet" else 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, rows


def test_memory_stays_flat_with_the_number_of_judgments(api: Api) -> None:
    """Streaming 5x the judgments holds about the same memory (one keyset page at a time)."""
    small = _bulk_run(api, 2_000)
    large = _bulk_run(api, 10_000)
    for fmt in FORMATS:
        small_peak, small_rows = _peak_while_streaming(small, fmt)
        large_peak, large_rows = _peak_while_streaming(large, fmt)
        if fmt != "parquet":
            assert (small_rows, large_rows) == (2_001 if fmt == "csv" else 2_000, 10_001 if fmt == "csv" else 10_000)
        assert large_peak < small_peak * 1.5 + 256 * 1024, (fmt, small_peak, large_peak)
        assert large_peak < 8 * 1024 * 1024, (fmt, large_peak)


def _bulk_run(api: Api, n: int) -> str:
    """A run of ``n`` finished single judgments, written straight to the table (the export reads the table)."""
    run_id = str(api.submit(None, run_body(1))["id"])
    with session_scope() as session:
        template = session.scalars(select(Judgment).where(Judgment.run_id == run_id)).first()
        assert template is not None
        item_pk = template.item_pk
        session.query(Judgment).filter(Judgment.run_id == run_id).delete()
    rng = random.Random(n)
    rows = [
        {
            "dedup_key": f"{run_id}-{i}",
            "run_id": run_id,
            "item_pk": item_pk,
            "item_key": f"item-{i // 3}",
            "mode": "single",
            "system_a": "abc"[i % 3],
            "aspect": "consistency",
            "judge": "openai:gpt-4o",
            "rubric_id": "rsum-single",
            "rubric_version": "v1",
            "sample_index": 0,
            "status": "done",
            "score": float(rng.randint(1, 100)),
            "len_a": 40,
            "input_tokens": 500,
            "output_tokens": 40,
            "latency_ms": 321.0,
            "cost_usd": 0.002,
            "cached": False,
            "judge_params": {},
        }
        for i in range(n)
    ]
    engine = get_engine()
    with engine.begin() as connection:
        connection.execute(insert(Judgment), rows)
    return run_id


def test_the_cli_export_writes_each_format_with_filters(
    api: Api, run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def client(api_url: str | None, api_key: str | None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)  # the TestClient serves the app in process
        return wrapped

    monkeypatch.setattr(cli_runs, "api_client", client)
    expected = _expected(run)
    for fmt in FORMATS:
        out = tmp_path / f"judgments.{fmt}"
        result = CliRunner().invoke(cli_app, ["runs", "export", run, "-o", str(out), "--format", fmt])
        assert result.exit_code == 0, result.output
        assert f"{len(expected)} judgments written to {out}" in result.stdout
        assert _read(fmt, out.read_bytes()) == expected
    out = tmp_path / "done-pairs.csv"
    args = ["runs", "export", run, "-o", str(out), "--format", "csv", "--mode", "pairwise", "--status", "done"]
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    wanted = [r for r in expected if r["mode"] == "pairwise" and r["status"] == "done"]
    assert wanted and _read("csv", out.read_bytes()) == wanted
    bundle = tmp_path / "run.jsonl"
    assert CliRunner().invoke(cli_app, ["runs", "export", run, "-o", str(bundle)]).exit_code == 0
    assert json.loads(bundle.read_text().splitlines()[0])  # the bundle, as before

    bad = tmp_path / "bad.csv"
    for args, message in (
        (["--format", "xlsx"], "--format must be one of bundle, jsonl, csv, parquet"),
        (["--format", "csv", "--status", "finished"], "status"),
        (["--system", "a"], "--system filters judgments"),
    ):
        result = CliRunner().invoke(cli_app, ["runs", "export", run, "-o", str(bad), *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output + (result.stderr or ""), (args, result.output)
        assert not bad.exists() and not bad.with_name("bad.csv.part").exists()


def test_postgres_exports_and_cursor_pages_read_back_equal(api_factory: Any, pg_url: str) -> None:
    """The same on PostgreSQL: each page is its own bounded query (no driver buffers the whole result)."""
    pg = api_factory(database_url=pg_url)
    run_id = _submit(pg, 4)
    expected = _expected(run_id)
    for fmt in FORMATS:
        assert _read(fmt, _export(pg, run_id, fmt, limit=len(expected) + 5)) == expected
    ids: list[int] = []
    cursor: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 9, **({"cursor": cursor} if cursor is not None else {})}
        page = pg.client.get(f"/v1/runs/{run_id}/judgments", params=params).json()
        ids += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == [int(r["judgment_id"]) for r in expected]
