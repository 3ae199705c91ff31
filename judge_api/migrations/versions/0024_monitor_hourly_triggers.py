"""monitor_hourly kept up to date by the database as verdicts are written (issue 39): triggers on judgments

A monitor's series read every finished verdict still stored plus the hourly sums retention had kept. Now
``monitor_hourly`` holds the sums of every finished verdict of a monitor, written by triggers on ``judgments`` in the
transaction that writes the verdict, whatever the path (the workers' verdict writer, imports, cache hits, a retry, a
raw ``UPDATE``): a judgment that becomes ``done`` adds its verdict to its hour and key, one that leaves ``done`` (a
retry) or changes its score, details or keys takes its old verdict back out. Deleting a judgment changes nothing:
retention deletes verdicts the sums keep, and deleting a monitor deletes its sums with it. ``verdicts`` counts the
verdicts of a row (a verdict without a score and without a contradiction rate adds to no other sum), so a row all of
whose verdicts were retried away is not a series row.

The upgrade adds ``verdicts``, adds the verdicts still stored to the sums retention kept (they were disjoint: retention
deleted what it folded) and creates the triggers.

Revision ID: 0024
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

KEY = "monitor_id, hour_start, system, version, segment, rubric_id, aspect, judge"
SUMS = ("verdicts", "n", "total", "total_sq", "fact_n", "fact_total")
ADD = ", ".join(f"{c} = monitor_hourly.{c} + excluded.{c}" for c in SUMS)
UPSERT = f"ON CONFLICT ({KEY}) DO UPDATE SET {ADD}"


def _sqlite_terms(j: str) -> dict[str, str]:
    """A judgment's (``j``: NEW, OLD or a table alias) contribution to each sum, in SQLite."""
    score_ok = f"({j}.score IS NOT NULL)"
    score = f"coalesce({j}.score, 0.0)"
    fact_ok = (
        f"(CASE WHEN json_valid({j}.details) THEN (CASE WHEN json_type({j}.details, '$.facts') = 'array' "
        f"AND json_type({j}.details, '$.contradiction_rate') IN ('integer', 'real', 'true', 'false') "
        "THEN 1 ELSE 0 END) ELSE 0 END)"
    )
    fact = f"(CASE WHEN {fact_ok} = 1 THEN json_extract({j}.details, '$.contradiction_rate') ELSE 0.0 END)"
    return {
        "hour": "strftime('%Y-%m-%d %H:00:00.000000', mr.ts)",  # SQLAlchemy's storage format of a DateTime
        "n": f"(CASE WHEN {score_ok} THEN 1 ELSE 0 END)",
        "total": score,
        "total_sq": f"{score} * {score}",
        "fact_n": fact_ok,
        "fact_total": fact,
    }


def _pg_terms(j: str) -> dict[str, str]:
    """The same in PostgreSQL (``details`` is ``json``; a NaN score counts as none, as pandas reads it)."""
    score_ok = f"({j}.score IS NOT NULL AND {j}.score <> 'NaN'::float8)"
    score = f"(CASE WHEN {score_ok} THEN {j}.score ELSE 0.0 END)"
    rate = f"({j}.details -> 'contradiction_rate')"
    fact_ok = (
        f"(CASE WHEN json_typeof({j}.details) = 'object' AND json_typeof({j}.details -> 'facts') = 'array' "
        f"AND json_typeof({rate}) IN ('number', 'boolean') THEN 1 ELSE 0 END)"
    )
    fact = (
        f"(CASE WHEN {fact_ok} = 0 THEN 0.0 WHEN json_typeof({rate}) = 'number' "
        f"THEN ({j}.details ->> 'contradiction_rate')::float8 "
        f"WHEN ({j}.details ->> 'contradiction_rate') = 'true' THEN 1.0 ELSE 0.0 END)"
    )
    # PostgreSQL raises on a float8 product that underflows or overflows (and folds NEW.score * NEW.score at plan
    # time, so an imported verdict of 1e-310 in any run failed its write): square as numpy does, 0 or infinity
    square = (
        f"(CASE WHEN abs({score}) < 1e-154 THEN 0.0 WHEN abs({score}) > 1e154 THEN 'Infinity'::float8 "
        f"ELSE {score} * {score} END)"
    )
    return {
        "hour": "date_trunc('hour', mr.ts)",
        "n": f"(CASE WHEN {score_ok} THEN 1 ELSE 0 END)",
        "total": score,
        "total_sq": square,
        "fact_n": fact_ok,
        "fact_total": fact,
    }


def _row_upsert(terms: dict[str, str], j: str, sign: str) -> str:
    """Add (``sign`` ``+``) or take back (``-``) one judgment's verdict: nothing unless it is ``done`` and of a
    monitor's run whose response row is stored (the series' join)."""
    return (
        f"INSERT INTO monitor_hourly ({KEY}, {', '.join(SUMS)}) "
        f"SELECT r.monitor_id, {terms['hour']}, mr.system, mr.version, mr.segment, {j}.rubric_id, {j}.aspect, "
        f"{j}.judge, {sign}1, {sign}{terms['n']}, {sign}{terms['total']}, {sign}({terms['total_sq']}), "
        f"{sign}{terms['fact_n']}, {sign}{terms['fact_total']} "
        "FROM runs AS r JOIN monitor_responses AS mr "
        f"ON mr.monitor_id = r.monitor_id AND mr.response_id = {j}.item_key "
        f"WHERE r.id = {j}.run_id AND r.monitor_id IS NOT NULL AND {j}.status = 'done' "
        f"{UPSERT}"
    )


def _grouped_upsert(terms: dict[str, str], source: str, sign: str = "") -> str:
    """Add (or with ``sign`` ``-`` take back) the verdicts of the judgments ``j`` of ``source`` (a table or a
    trigger's transition table)."""
    sums = ", ".join(f"{sign}sum({terms[c]})" for c in ("n", "total", "total_sq", "fact_n", "fact_total"))
    return (
        f"INSERT INTO monitor_hourly ({KEY}, {', '.join(SUMS)}) "
        f"SELECT r.monitor_id, {terms['hour']}, mr.system, mr.version, mr.segment, j.rubric_id, j.aspect, j.judge, "
        f"{sign}count(*), {sums} "
        f"FROM {source} AS j JOIN runs AS r ON r.id = j.run_id AND r.monitor_id IS NOT NULL "
        "JOIN monitor_responses AS mr ON mr.monitor_id = r.monitor_id AND mr.response_id = j.item_key "
        "WHERE j.status = 'done' "
        "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8 "
        f"{UPSERT}"
    )


def _monitor_run(j: str) -> str:
    """SQLite: the judgment is of a monitor's run, checked in the trigger's WHEN (one lookup), so that a verdict of
    any other run skips the trigger's upsert (its program costs ~15 us a row even when it selects nothing: measured
    interleaved, an insert of 5,000 done judgments of another run +18 us a row without this check, +3 us with it)."""
    return f"(SELECT monitor_id FROM runs WHERE id = {j}.run_id) IS NOT NULL"


_CHANGED = " OR ".join(
    f"OLD.{c} IS DISTINCT FROM NEW.{c}"
    for c in ("status", "score", "run_id", "item_key", "rubric_id", "aspect", "judge")
)


PRIMARY_KEY = "monitor_id, hour_start, version, rubric_id, aspect, judge, system, segment"
"""The series groups by (hour, version, rubric, aspect, judge) by default: in this order SQLite's GROUP BY streams
along the key instead of sorting every row of the range (about 2x at 90 days)."""

SQLITE_TABLE = f"""CREATE TABLE monitor_hourly_new (
    monitor_id VARCHAR(32) NOT NULL,
    hour_start DATETIME NOT NULL,
    system VARCHAR(100) NOT NULL,
    version VARCHAR(100) NOT NULL,
    segment VARCHAR(100) NOT NULL,
    rubric_id VARCHAR(64) NOT NULL,
    aspect VARCHAR(64) NOT NULL,
    judge VARCHAR(300) NOT NULL,
    verdicts INTEGER DEFAULT '0' NOT NULL,
    n INTEGER NOT NULL,
    total FLOAT NOT NULL,
    total_sq FLOAT NOT NULL,
    fact_n INTEGER NOT NULL,
    fact_total FLOAT NOT NULL,
    PRIMARY KEY ({PRIMARY_KEY}),
    FOREIGN KEY(monitor_id) REFERENCES monitors (id) ON DELETE CASCADE
) WITHOUT ROWID"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # the rows in the key (no rowid), the key in the series' order; a row retention folded had at least one
        # verdict: its count only has to be positive (it is never taken back)
        op.execute(SQLITE_TABLE)
        op.execute(
            f"INSERT INTO monitor_hourly_new ({KEY}, {', '.join(SUMS)}) SELECT {KEY}, max(n, fact_n, 1), n, total, "
            "total_sq, fact_n, fact_total FROM monitor_hourly"
        )
        op.execute("DROP TABLE monitor_hourly")
        op.execute("ALTER TABLE monitor_hourly_new RENAME TO monitor_hourly")
        terms = _sqlite_terms("j")
        op.execute(_grouped_upsert(terms, "judgments"))
        changed = _CHANGED.replace("IS DISTINCT FROM", "IS NOT") + " OR OLD.details IS NOT NEW.details"
        op.execute(
            "CREATE TRIGGER monitor_hourly_on_insert AFTER INSERT ON judgments "
            f"WHEN NEW.status = 'done' AND {_monitor_run('NEW')} BEGIN "
            f"{_row_upsert(_sqlite_terms('NEW'), 'NEW', '+')}; END"
        )
        op.execute(
            "CREATE TRIGGER monitor_hourly_on_update AFTER UPDATE ON judgments "
            f"WHEN (OLD.status = 'done' OR NEW.status = 'done') AND ({changed}) "
            f"AND ({_monitor_run('NEW')} OR {_monitor_run('OLD')}) BEGIN "
            f"{_row_upsert(_sqlite_terms('OLD'), 'OLD', '-')}; "
            f"{_row_upsert(_sqlite_terms('NEW'), 'NEW', '+')}; END"
        )
    elif dialect == "postgresql":
        op.add_column("monitor_hourly", sa.Column("verdicts", sa.Integer(), nullable=False, server_default="0"))
        op.execute("UPDATE monitor_hourly SET verdicts = greatest(n, fact_n, 1)")
        op.execute("ALTER TABLE monitor_hourly DROP CONSTRAINT monitor_hourly_pkey")
        op.execute(f"ALTER TABLE monitor_hourly ADD CONSTRAINT monitor_hourly_pkey PRIMARY KEY ({PRIMARY_KEY})")
        op.execute(_grouped_upsert(_pg_terms("j"), "judgments"))
        # inserts (imports, cache hits): a row trigger, as for updates. A statement trigger over a transition table
        # would not be cheaper here: psycopg's executemany (SQLAlchemy's bulk insert) runs one statement per row, and
        # measured side by side the two cost the same per verdict (bench/bench_monitor_series.py, docs/scaling.md)
        op.execute(
            "CREATE FUNCTION monitor_hourly_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"{_row_upsert(_pg_terms('NEW'), 'NEW', '+')}; RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER monitor_hourly_on_insert AFTER INSERT ON judgments FOR EACH ROW "
            "WHEN (NEW.status = 'done') EXECUTE FUNCTION monitor_hourly_on_insert()"
        )
        # updates (a verdict written, a retry): only the rows that enter, leave or change a verdict
        op.execute(
            "CREATE FUNCTION monitor_hourly_on_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF OLD.status = 'done' THEN {_row_upsert(_pg_terms('OLD'), 'OLD', '-')}; END IF; "
            f"IF NEW.status = 'done' THEN {_row_upsert(_pg_terms('NEW'), 'NEW', '+')}; END IF; "
            "RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER monitor_hourly_on_update AFTER UPDATE ON judgments FOR EACH ROW "
            f"WHEN ((OLD.status = 'done' OR NEW.status = 'done') AND ({_CHANGED} "
            "OR OLD.details::text IS DISTINCT FROM NEW.details::text)) "
            "EXECUTE FUNCTION monitor_hourly_on_update()"
        )
    else:
        raise RuntimeError(f"DATABASE_URL names a {dialect} database; dialogue-judge runs on SQLite or PostgreSQL")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP TRIGGER IF EXISTS monitor_hourly_on_insert" + (" ON judgments" if dialect != "sqlite" else ""))
    op.execute("DROP TRIGGER IF EXISTS monitor_hourly_on_update" + (" ON judgments" if dialect != "sqlite" else ""))
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS monitor_hourly_on_insert()")
        op.execute("DROP FUNCTION IF EXISTS monitor_hourly_on_update()")
    # the verdicts still stored go back to being read from the judgments: only the sums retention kept stay
    terms = _sqlite_terms("j") if dialect == "sqlite" else _pg_terms("j")
    op.execute(_grouped_upsert(terms, "judgments", "-"))
    op.execute("DELETE FROM monitor_hourly WHERE verdicts <= 0")
    with op.batch_alter_table("monitor_hourly", recreate="always" if dialect == "sqlite" else "auto") as batch:
        batch.drop_column("verdicts")
