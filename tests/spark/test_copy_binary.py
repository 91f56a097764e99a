"""The publish paths' binary COPY (copybinary.py) against a real server, without a Spark session:
every column kind round-trips (NULLs, unicode, extremes, large values, sliced Arrow arrays),
bad data fails as the server's text input fails, and the task-level COPY into a queue (one COPY
per task, special rows through pgmq.send afterwards) and into the staging table keep order and
all or nothing. Also the vectorized priority merge of the encoder."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgmq_build.spark import connections, copybinary, publishing, staging
from pgmq_build.spark.errors import PgmqSparkError
from pgmq_build.spark.options import write_spec

UTC = timezone.utc
KINDS_DDL = "t text, j jsonb, i4 integer, i8 bigint, ts timestamptz"


def copy_in(conn: psycopg.Connection, table: str, columns: list[tuple[pa.Array, str]],
            *, chunks: int = 1) -> None:
    """COPY the columns into ``table`` in binary, as ``chunks`` slices of the rows."""
    n = len(columns[0][0])
    step = max(1, -(-n // chunks))
    with conn.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as cp:
        cp.write(copybinary.SIGNATURE)
        for lo in range(0, n, step):
            cp.write(copybinary.rows([(a.slice(lo, step), k) for a, k in columns]))
        cp.write(copybinary.TRAILER)


def test_every_kind_round_trips_with_nulls_unicode_and_extremes(conn):
    conn.execute(f"CREATE TABLE kinds ({KINDS_DDL}, n integer)")
    texts = ["plain", "", "héllo wörld", "日本語テキスト", "🙂🚀 astral", "e\u0301 combining",
             "tab\tnew\nline\r\\back\"quote'", "a,b;c|d", None]
    jsons = ['{"a":1}', '"ü 🙂"', "[1, 2.5, null, true]", "null", '{"nested": {"k": [{}]}}',
             '  {"spaced" : 1 }  ', '"\\u00e9 escaped"', "-1.5", None]
    i4 = [0, 1, -1, 2**31 - 1, -2**31, 42, 7, None, 3]
    i8 = [0, 2**63 - 1, -2**63, 2**40, -1, None, 5, 6, 7]
    stamps = [datetime(2000, 1, 1, tzinfo=UTC), datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
              datetime(1970, 1, 1, tzinfo=UTC), datetime(1900, 2, 28, 12, tzinfo=UTC),
              datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None,
              datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
              datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC)]
    cols = [(pa.array(texts), "text"), (pa.array(jsons, pa.large_string()), "jsonb"),
            (pa.array(i4, pa.int32()), "int4"), (pa.array(i8, pa.int64()), "int8"),
            (pa.array(stamps, pa.timestamp("us", tz="UTC")), "timestamptz"),
            (pa.array(range(len(texts)), pa.int16()), "int4")]
    copy_in(conn, "kinds", cols, chunks=4)
    got = conn.execute("SELECT t, j, i4, i8, ts FROM kinds ORDER BY n").fetchall()
    assert [r[0] for r in got] == texts
    assert [r[1] for r in got] == [None if j is None else json.loads(j) for j in jsons]
    assert [r[2] for r in got] == i4
    assert [r[3] for r in got] == i8
    assert [r[4] for r in got] == stamps


def test_input_types_binary_text_other_time_units_and_sliced_arrays(conn):
    conn.execute("CREATE TABLE conv (t text, j jsonb, i4 integer, i8 bigint, ts timestamptz)")
    base = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
    arrays = [
        (pa.array([b"bin", "é".encode(), None, b"x"], pa.binary()), "text"),
        (pa.array([b'{"b":1}', b"2", b"[]", None], pa.large_binary()), "jsonb"),
        (pa.array([1, -128, None, 127], pa.int8()), "int4"),
        (pa.array([1, None, 2**31 - 1, -5], pa.int32()), "int8"),
        # seconds and milliseconds become microseconds; a naive timestamp is UTC
        (pa.array([base.replace(microsecond=0, tzinfo=None), None, base.replace(tzinfo=None),
                   datetime(1960, 6, 1)], pa.timestamp("ms")), "timestamptz"),
    ]
    # the arrays start at offset 1: the encoder must honour Arrow slices
    copy_in(conn, "conv", [(a.slice(1), k) for a, k in arrays])
    assert conn.execute("SELECT * FROM conv").fetchall() == [
        ("é", 2, -128, None, None),
        (None, [], None, 2**31 - 1, base.replace(microsecond=123000)),
        ("x", None, 127, -5, datetime(1960, 6, 1, tzinfo=UTC)),
    ]


def test_large_values_and_many_rows(conn):
    conn.execute("CREATE TABLE big (j jsonb, t text)")
    huge = json.dumps({"blob": "x" * 6_000_000, "list": list(range(50_000))})
    small = [json.dumps({"i": i, "s": "ü" * (i % 50)}) for i in range(30_000)]
    copy_in(conn, "big", [(pa.array([huge, *small]), "jsonb"),
                          (pa.array(["é" * 3_000_000, *map(str, range(30_000))]), "text")])
    assert conn.execute("SELECT count(*), sum(length(t)) FILTER (WHERE length(t) > 100000), "
                        "max(length(j->>'blob')), max((j->>'i')::int) FROM big").fetchone() == (
        30_001, 3_000_000, 6_000_000, 29_999)


def test_empty_input_is_no_rows():
    assert copybinary.rows([(pa.array([], pa.string()), "text")]).size == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(
    st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",),
                                                blacklist_characters="\x00"), max_size=40)),
    st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
    st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    st.one_of(st.none(), st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31),
                                      timezones=st.just(UTC)))), max_size=30))
def test_random_rows_round_trip(conn, rows):
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS rnd ({KINDS_DDL}, n integer)")
    conn.execute("TRUNCATE rnd")
    t, i4, i8, ts = ([r[k] for r in rows] for k in range(4))
    cols = [(pa.array(t, pa.string()), "text"),
            (pa.array([None if s is None else json.dumps(s) for s in t], pa.string()), "jsonb"),
            (pa.array(i4, pa.int32()), "int4"), (pa.array(i8, pa.int64()), "int8"),
            (pa.array(ts, pa.timestamp("us", tz="UTC")), "timestamptz"),
            (pa.array(range(len(rows)), pa.int32()), "int4")]
    copy_in(conn, "rnd", cols, chunks=3)
    got = conn.execute("SELECT t, j, i4, i8, ts FROM rnd ORDER BY n").fetchall()
    assert got == [(a, a, b, c, d) for a, b, c, d in rows]


def test_bad_values_fail_as_text_input_does(conn):
    conn.execute("CREATE TABLE bad (j jsonb, t text)")

    def copy(j: str, t: str) -> None:
        with conn.transaction():
            copy_in(conn, "bad", [(pa.array([j]), "jsonb"), (pa.array([t]), "text")])

    with pytest.raises(psycopg.errors.InvalidTextRepresentation, match="type json"):
        copy('{"a":', "x")
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire, match="0x00"):
        copy("{}", "nul\x00byte")
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        copy('"\\u0000"', "x")
    assert conn.execute("SELECT count(*) FROM bad").fetchone() == (0,)
    with pytest.raises(TypeError, match="int4"):
        copybinary.rows([(pa.array(["1"]), "int4")])
    with pytest.raises(TypeError, match="timestamptz"):
        copybinary.rows([(pa.array([1]), "timestamptz")])
    with pytest.raises(ValueError, match="kind"):
        copybinary.rows([(pa.array([1]), "float8")])
    with pytest.raises(pa.ArrowInvalid):  # no silent wrap-around into int4
        copybinary.rows([(pa.array([2**31], pa.int64()), "int4")])


# ----------------------------------------------------------------------------- publish paths

@pytest.fixture
def info(dsn, make_queue):
    make_queue("b")
    with connections.connect(dsn, autocommit=True) as c:
        return connections.resolve_queue(c, "b")


def _encoded(rows: list[tuple[str, str | None]], base: datetime) -> publishing.Encoded:
    batch = pa.record_batch({"message": [m for m, _ in rows],
                             "headers": pa.array([h for _, h in rows], pa.string())})
    spec = write_spec({"dsn": "x", "queue": "b"}, batch.schema.names, streaming=False)
    return publishing.encode(batch, spec.columns, base, routed=False)


def test_copy_task_one_copy_for_all_batches_special_rows_after(dsn, info, sql):
    now = datetime.now(UTC)
    batches = [
        _encoded([('{"n": 1}', None), ('{"n": 2}', '{"x-pgmq-dedup-id": "d"}'),
                  ('{"n": 3}', '{"k": "v"}')], now),
        _encoded([('{"n": 4}', '{"x-pgmq-dedup-id": "d"}'), ('{"n": 5}', '{"x-pgmq-priority": 2}')], now),
        _encoded([('{"n": 6}', None)], now + timedelta(seconds=1)),
    ]
    with connections.connect(dsn) as c, c.cursor() as cur:
        assert publishing.copy_task(cur, info, iter(batches)) == 6
        c.commit()
    # plain rows in input order by one COPY, then the special ones through pgmq.send (the
    # second copy of dedup id "d" resolves to the first)
    assert sql("SELECT (message->>'n')::int, priority FROM pgmq.q_b ORDER BY msg_id") == [
        (1, 0), (3, 0), (5, 2), (6, 0), (2, 0)]
    assert sql("SELECT headers FROM pgmq.q_b WHERE message->>'n' = '3'") == [({"k": "v"},)]


def test_copy_task_failure_mid_stream_publishes_nothing(dsn, info, sql):
    now = datetime.now(UTC)

    def batches():
        yield _encoded([('{"n": 1}', None)] * 1000, now)
        raise PgmqSparkError("the second batch is bad")

    with pytest.raises(PgmqSparkError, match="second batch"):
        with connections.connect(dsn) as c, c.cursor() as cur:
            publishing.copy_task(cur, info, batches())
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        with connections.connect(dsn) as c, c.cursor() as cur:
            publishing.copy_task(cur, info, [_encoded([('{"n": 1}', None), ("{oops", None)], now)])
    assert sql("SELECT count(*) FROM pgmq.q_b") == [(0,)]


def test_stage_task_numbers_rows_across_batches_and_commit_keeps_order(dsn, info, sql):
    now = datetime.now(UTC)
    with connections.connect(dsn, autocommit=True) as c:
        staging.ensure_tables(c, staging.DEFAULT_STAGING_TABLE, None)
    batches = [_encoded([(json.dumps({"n": i}), None) for i in range(k, k + 3)], now)
               for k in (0, 3, 6)]
    batches[1] = _encoded([('{"n": 3}', None), ('{"n": 4}', '{"x-pgmq-dedup-id": "z"}'),
                           ('{"n": 5}', '{"a": "é"}')], now)
    with connections.connect(dsn) as c, c.cursor() as cur:
        assert staging.stage_task(cur, staging.DEFAULT_STAGING_TABLE, "job1", "p1", iter(batches)) == 9
        c.commit()
    assert sql("SELECT ord, (message->>'n')::int FROM pgmq_spark.staging ORDER BY ord") == [
        (i, i) for i in range(9)]
    target = publishing.Target(queue=info)
    assert staging.commit_staged(dsn, staging.DEFAULT_STAGING_TABLE, "job1", [("p1", 9)],
                                 target) == (True, 9)
    assert sql("SELECT (message->>'n')::int FROM pgmq.q_b ORDER BY msg_id") == [
        (n,) for n in (0, 1, 2, 3, 5, 6, 7, 8, 4)]
    assert sql("SELECT count(*) FROM pgmq_spark.staging") == [(0,)]


# ----------------------------------------------------------------------------- priority merge

@pytest.mark.parametrize(("headers", "prio", "expected", "priority", "special"), [
    (None, 3, {"x-pgmq-priority": 3}, 3, False),
    ("{}", -2, {"x-pgmq-priority": -2}, -2, False),
    (" { } ", 1, {"x-pgmq-priority": 1}, 1, False),
    ('{"src": "spark"}', 5, {"src": "spark", "x-pgmq-priority": 5}, 5, False),
    (' {"a": {"b": [1, {}]}} \n', 7, {"a": {"b": [1, {}]}, "x-pgmq-priority": 7}, 7, False),
    ('{"x-pgmq-priority": 9}', 4, {"x-pgmq-priority": 4}, 4, False),  # the column wins
    ('{"x-pgmq-ttl": 60}', 2, {"x-pgmq-ttl": 60, "x-pgmq-priority": 2}, 0, True),
    ("null", 6, {"x-pgmq-priority": 6}, 6, False),
    ('{"k": "v"}', 0, {"k": "v"}, 0, False),
    ('{"k": "v"}', None, {"k": "v"}, 0, False),
    (None, 2**31 - 1, {"x-pgmq-priority": 2**31 - 1}, 2**31 - 1, False),
    (None, 2**31, {"x-pgmq-priority": 2**31}, 0, True),  # out of int32: the server decides
])
def test_priority_column_merges_into_headers(headers, prio, expected, priority, special):
    batch = pa.record_batch({"message": ['{"m": 1}', '{"m": 2}'],
                             "headers": pa.array([headers, '{"other": true}'], pa.string()),
                             "priority": pa.array([prio, 0], pa.int64())})
    spec = write_spec({"dsn": "x", "queue": "q"}, batch.schema.names, streaming=False)
    enc = publishing.encode(batch, spec.columns, datetime.now(UTC), routed=False)
    assert json.loads(enc.headers[0].as_py()) == expected
    assert json.loads(enc.headers[1].as_py()) == {"other": True}
    assert enc.priority.to_pylist() == [priority, 0]
    assert enc.special == ([0] if special else [])


def test_priority_column_refuses_headers_that_are_not_objects():
    batch = pa.record_batch({"message": ["{}"], "headers": ["[1, 2]"], "priority": [1]})
    spec = write_spec({"dsn": "x", "queue": "q"}, batch.schema.names, streaming=False)
    with pytest.raises(PgmqSparkError, match="JSON objects"):
        publishing.encode(batch, spec.columns, datetime.now(UTC), routed=False)


def test_priority_rows_reach_the_queue(dsn, info, sql):
    n = 5000
    batch = pa.record_batch({
        "message": [json.dumps({"i": i}) for i in range(n)],
        "headers": pa.array([None if i % 3 == 0 else '{"src": "s"}' if i % 3 == 1 else "{}"
                             for i in range(n)], pa.string()),
        "priority": pa.array([(i % 7) - 3 for i in range(n)], pa.int16())})
    spec = write_spec({"dsn": dsn, "queue": "b"}, batch.schema.names, streaming=False)
    enc = publishing.encode(batch, spec.columns, datetime.now(UTC), routed=False)
    with connections.connect(dsn) as c, c.cursor() as cur:
        assert publishing.copy_rows(cur, info, enc) == n
        c.commit()
    bad = sql("SELECT count(*) FROM pgmq.q_b WHERE priority <> (message->>'i')::int % 7 - 3 "
              "OR priority <> coalesce((headers->>'x-pgmq-priority')::int, 0) "
              "OR ((message->>'i')::int % 3 = 1) <> coalesce(headers ? 'src', false)")
    assert bad == [(0,)]
    # the task met priorities: the queue serves them (its index was built after the COPY)
    assert sql("SELECT priorities FROM pgmq.queue_settings WHERE queue_name = 'b'") == [(True,)]
    assert sql("SELECT (message->>'i')::int % 7 - 3 FROM pgmq.pop('b')") == [(-3,)]


def test_staged_priorities_make_the_queue_serve_them(dsn, info, sql):
    now = datetime.now(UTC)
    with connections.connect(dsn, autocommit=True) as c:
        staging.ensure_tables(c, staging.DEFAULT_STAGING_TABLE, None)
    with connections.connect(dsn) as c, c.cursor() as cur:
        staging.stage_task(cur, staging.DEFAULT_STAGING_TABLE, "jobp", "p1",
                           [_encoded([('{"n": 1}', None), ('{"n": 2}', '{"x-pgmq-priority": -5}')], now)])
        c.commit()
    assert staging.commit_staged(dsn, staging.DEFAULT_STAGING_TABLE, "jobp", [("p1", 2)],
                                 publishing.Target(queue=info)) == (True, 2)
    assert sql("SELECT priorities FROM pgmq.queue_settings WHERE queue_name = 'b'") == [(True,)]
    assert sql("SELECT message->>'n' FROM pgmq.pop('b', 2)") == [("2",), ("1",)]


def test_commit_refuses_a_partial_or_padded_job(dsn, info, sql):
    now = datetime.now(UTC)
    with connections.connect(dsn, autocommit=True) as c:
        staging.ensure_tables(c, staging.DEFAULT_STAGING_TABLE, None)
    with connections.connect(dsn) as c, c.cursor() as cur:
        staging.stage_task(cur, staging.DEFAULT_STAGING_TABLE, "job2", "p1",
                           [_encoded([('{"n": 1}', None), ('{"n": 2}', '{"x-pgmq-dedup-id": "y"}'),
                                      ('{"n": 3}', None)], now)])
        c.commit()
    target = publishing.Target(queue=info)
    for claimed in (4, 2, 0):
        with pytest.raises(PgmqSparkError, match=f"holds 3 rows of job job2, expected {claimed}"):
            staging.commit_staged(dsn, staging.DEFAULT_STAGING_TABLE, "job2", [("p1", claimed)],
                                  target)
    assert sql("SELECT count(*) FROM pgmq.q_b") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq_spark.staging WHERE job_id = 'job2'") == [(3,)]
    assert staging.commit_staged(dsn, staging.DEFAULT_STAGING_TABLE, "job2", [("p1", 3)],
                                 target) == (True, 3)
    assert sql("SELECT count(*) FROM pgmq.q_b") == [(3,)]


def test_bench_raw_copy_baseline(dsn, spark):
    import csv
    import io

    from bench import spark as bench

    # the baseline COPYs the very messages the Spark rows publish
    raw = [row[1] for row in csv.reader(io.StringIO(bench._raw_copy_data(3).decode()))]
    assert raw == [r.message for r in bench._messages(spark, 3).orderBy("message").collect()]
    results = bench.run(dsn, rows=3000, only=("raw_copy",), repeat=2, log=lambda _: None)
    assert [(r.name, r.rows) for r in results] == [("raw COPY (no Spark)", 3000)]
    assert "median of 2" in results[0].description
    with pytest.raises(ValueError, match="unknown"):
        bench.run(dsn, only=("nope",))
