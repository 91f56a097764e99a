"""The streams' static paths (features/streams/functions/paths.sql.j2): stream_send and
stream_send_batch hold each stream's INSERT into its current segment, _stream_events its read of
the stream's parent table, rewritten in the transaction that creates, drops or rotates a stream;
other names go through the catalog and EXECUTE."""

from __future__ import annotations

import re
import threading
import time

import psycopg
import pytest

from tests.helpers import column, raises_sql, run_threads, scalar

LEAF = re.compile(r"IF \$1 OPERATOR\(pg_catalog\.=\) '((?:[^']|'')*)' THEN\s+(?:RETURN QUERY WITH ins AS \(\s+)?"
                  r"INSERT INTO pgmq\.(\"(?:[^\"]|\"\")*\"|\w+)")


def routed(conn: psycopg.Connection, fn: str = "stream_send") -> dict[str, str]:
    """{stream name: segment table} of the static path in pgmq.<fn>."""
    src = scalar(conn, "SELECT prosrc FROM pg_proc WHERE proname = %s AND pronamespace = 'pgmq'::regnamespace", (fn,))
    return {name.replace("''", "'"): table.strip('"').replace('""', '"') for name, table in LEAF.findall(src)}


READER = re.compile(r"IF \$1 OPERATOR\(pg_catalog\.=\) '((?:[^']|'')*)' THEN\s+RETURN QUERY SELECT \$2, e\.ev_id"
                    r".*?FROM pgmq\.(\"(?:[^\"]|\"\")*\"|\w+) e", re.S)


def both(conn: psycopg.Connection) -> dict[str, str]:
    """{stream: its current segment} of the producers' paths, checked against the readers' path
    (_stream_events, which reads each stream's parent table)."""
    single = routed(conn)
    assert routed(conn, "stream_send_batch") == single
    src = scalar(conn, "SELECT prosrc FROM pg_proc WHERE oid = 'pgmq._stream_events'::regproc")
    readers = {n.replace("''", "'"): t.strip('"').replace('""', '"') for n, t in READER.findall(src)}
    assert readers == {n: t.rsplit("$", 1)[0] for n, t in single.items()}
    return single


def roundtrip(conn: psycopg.Connection, stream: str) -> None:
    """A send and a batch, read back by a fresh subscription."""
    sub = scalar(conn, "SELECT 'rt' || count(*) FROM pgmq.stream_subscriptions")
    conn.execute("SELECT pgmq.subscribe(%s, %s, 'latest')", (stream, sub))
    a = scalar(conn, "SELECT pgmq.stream_send(%s, '{\"n\": 1}')", (stream,))
    b, c = column(conn, "SELECT * FROM pgmq.stream_send_batch(%s, ARRAY['{\"n\": 2}', '{\"n\": 3}']::jsonb[])", (stream,))
    assert [a, b, c] == [a, a + 1, a + 2]
    rows = conn.execute("SELECT ev_id, message->>'n' FROM pgmq.stream_read(%s, %s)", (stream, sub)).fetchall()
    assert rows == [(a, "1"), (b, "2"), (c, "3")]


def test_paths_follow_create_rotation_and_drop(conn):
    assert both(conn) == {}
    conn.execute("SELECT pgmq.create_stream('ev', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.create_stream('Other')")
    assert both(conn) == {"Other": "s_other$0", "ev": "s_ev$0"}
    roundtrip(conn, "ev")
    roundtrip(conn, "Other")
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # rotates: producers go to segment 1
    assert both(conn) == {"Other": "s_other$0", "ev": "s_ev$1"}
    ev = scalar(conn, "SELECT pgmq.stream_send('ev', '{}')")
    assert scalar(conn, "SELECT tableoid::regclass::text FROM pgmq.s_ev WHERE ev_id = %s", (ev,)) == 'pgmq."s_ev$1"'
    roundtrip(conn, "ev")
    conn.execute("SELECT pgmq.drop_stream('ev')")
    assert both(conn) == {"Other": "s_other$0"}
    # an existing stream created again changes nothing (no rebuild)
    xmin = scalar(conn, "SELECT xmin::text FROM pg_proc WHERE oid = 'pgmq.stream_send'::regproc")
    conn.execute("SELECT pgmq.create_stream('Other')")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE oid = 'pgmq.stream_send'::regproc") == xmin


def test_a_rolled_back_create_or_rotation_leaves_the_paths_as_they_were(conn):
    conn.execute("SELECT pgmq.create_stream('kept', rotation_period => '1 second')")
    with pytest.raises(psycopg.errors.RaiseException):
        with conn.transaction():
            conn.execute("SELECT pgmq.create_stream('gone')")
            assert both(conn) == {"gone": "s_gone$0", "kept": "s_kept$0"}
            conn.execute("DO $$BEGIN RAISE EXCEPTION 'undo'; END$$")
    assert both(conn) == {"kept": "s_kept$0"}
    time.sleep(1.1)
    with pytest.raises(psycopg.errors.RaiseException):
        with conn.transaction():
            conn.execute("SELECT pgmq.stream_tick('kept')")
            assert both(conn) == {"kept": "s_kept$1"}
            conn.execute("DO $$BEGIN RAISE EXCEPTION 'undo'; END$$")
    assert both(conn) == {"kept": "s_kept$0"}
    assert scalar(conn, "SELECT current_segment FROM pgmq.streams") == 0
    roundtrip(conn, "kept")


def test_names_are_quoted_and_other_names_fall_back(conn):
    odd = 'we"ird Näme%s'
    conn.execute("SELECT pgmq.create_stream(%s)", (odd,))
    assert both(conn) == {odd: scalar(conn, "SELECT pgmq._format_table_name(%s, 's') || '$0'", (odd,))}
    roundtrip(conn, odd)
    # another spelling is another (unknown) stream: the fallback's error, nothing written
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.stream_send(%s, '{}')", (odd.upper(),))
    with raises_sql("42602"):
        conn.execute("SELECT pgmq.stream_send_batch('a$b', ARRAY['{}']::jsonb[])")


def test_the_first_hundred_streams_are_static_the_rest_work_through_execute(conn):
    conn.execute("SELECT pgmq.create_stream(format('s%s', lpad(i::text, 3, '0'))) FROM generate_series(0, 101) i")
    names = both(conn)
    assert sorted(names) == [f"s{i:03d}" for i in range(100)]
    for s in ("s000", "s057", "s099", "s100", "s101"):
        roundtrip(conn, s)
    # over the cap nothing rebuilds on each call
    xmin = scalar(conn, "SELECT xmin::text FROM pg_proc WHERE oid = 'pgmq.stream_send'::regproc")
    roundtrip(conn, "s101")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE oid = 'pgmq.stream_send'::regproc") == xmin
    conn.execute("SELECT pgmq.drop_stream('s010')")
    assert "s100" in both(conn) and "s010" not in both(conn)


def test_a_path_that_misses_a_stream_heals_itself(conn):
    """A tree written before the stream existed (as an upgrade that replaces stream_send leaves
    it): the first send goes through EXECUTE and rewrites the paths."""
    conn.execute("SELECT pgmq.create_stream('early')")
    conn.execute("ALTER TABLE pgmq.streams DISABLE TRIGGER streams_added")
    conn.execute("SELECT pgmq.create_stream('late')")
    conn.execute("ALTER TABLE pgmq.streams ENABLE TRIGGER streams_added")
    assert both(conn) == {"early": "s_early$0"}
    assert scalar(conn, "SELECT pgmq.stream_send('late', '{}')") == 1
    assert both(conn) == {"early": "s_early$0", "late": "s_late$0"}
    roundtrip(conn, "late")


def test_a_stale_snapshot_cannot_write_stale_paths(connect, conn):
    """A REPEATABLE READ transaction whose snapshot predates a rotation may not rebuild the paths
    from it (they would send producers to the closed segment): it fails with 40001."""
    conn.execute("SELECT pgmq.create_stream('ev', rotation_period => '1 second')")
    old = connect(autocommit=False)
    old.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    old.execute("SELECT count(*) FROM pgmq.streams")  # the snapshot
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert both(conn) == {"ev": "s_ev$1"}
    with raises_sql("40001"):
        old.execute("SELECT pgmq.create_stream('new')")
    old.rollback()
    assert both(conn) == {"ev": "s_ev$1"}
    # and a tick in REPEATABLE READ does not rotate
    time.sleep(1.1)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT pgmq.stream_tick('ev')")
    assert both(conn) == {"ev": "s_ev$1"}
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert both(conn) == {"ev": "s_ev$2"}


def test_a_rotation_never_waits_for_the_paths(connect, conn):
    """While another transaction rewrites the paths, a tick leaves the segment as it is (the next
    tick rotates) instead of waiting; producers keep sending."""
    conn.execute("SELECT pgmq.create_stream('ev', rotation_period => '1 second')")
    busy = connect(autocommit=False)
    busy.execute("SELECT pgmq.create_stream('other')")  # holds the paths' lock until it ends
    time.sleep(1.1)
    conn.execute("SET lock_timeout = '5s'")
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert scalar(conn, "SELECT current_segment FROM pgmq.streams WHERE stream_name = 'ev'") == 0
    assert scalar(conn, "SELECT pgmq.stream_send('ev', '{}')") == 1
    busy.commit()
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert both(conn) == {"ev": "s_ev$1", "other": "s_other$0"}


def test_concurrent_creates_drops_and_rotations_leave_exact_paths(connect, conn):
    """Four sessions create, rotate and drop streams at once: nothing fails on the rewritten
    functions and the paths end up naming exactly the streams there, at their segments."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        c = connect()
        try:
            for i in range(4):
                c.execute("SELECT pgmq.create_stream(%s, rotation_period => '1 second')", (f"w{k}_{i}",))
                c.execute("SELECT pgmq.stream_send(%s, '{}')", (f"w{k}_{i}",))
            time.sleep(1.1)
            c.execute("SELECT pgmq.stream_tick()")
            c.execute("SELECT pgmq.drop_stream(%s)", (f"w{k}_0",))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads([threading.Thread(target=worker, args=(k,)) for k in range(4)])
    assert [str(e) for e in errors] == []
    conn.execute("SELECT pgmq.stream_tick()")  # rotations some ticks skipped
    expected = dict(conn.execute(
        "SELECT stream_name, format('s_%s$%s', stream_name, current_segment) FROM pgmq.streams").fetchall())
    assert both(conn) == expected and len(expected) == 12
    for name in expected:
        roundtrip(conn, name)
