"""pgmq.ack_ranges, the set-based ack of the Spark connector (ranges.py): the lease fence against
another consumer (also one that re-leases a row while the ack runs), archive, ranges with holes,
claims in priority order, bad input; and that ack() and the stream source's commit use it."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

from datetime import datetime, timedelta, timezone

import pyarrow as pa

from pgmq_build.spark import claims, connections, offsets, ranges
from pgmq_build.spark.offsets import Offset
from tests.helpers import raises_sql, wait_for

ACK = "SELECT pgmq.ack_ranges(%s, %s::bigint[], %s::bigint[], %s::timestamptz[], %s)"


@pytest.fixture
def info(dsn, make_queue):
    make_queue("s")
    with connections.connect(dsn, autocommit=True) as c:
        return connections.resolve_queue(c, "s")


def _ids(sql, table: str = "q_s") -> list[int]:
    return [r for (r,) in sql(f"SELECT msg_id FROM pgmq.{table} ORDER BY msg_id")]


def test_lease_fence_skips_a_row_another_consumer_leased(info, sql):
    sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[8]))")  # 1..8
    leased = sql("SELECT msg_id, vt FROM pgmq.read('s', 600, 5)")  # 1..5, one vt
    assert len({vt for _, vt in leased}) == 1
    vt = leased[0][1]
    # 3's lease lapses and another consumer takes it: it carries that consumer's vt now
    sql("SELECT pgmq.set_vt('s', 3::bigint, 0)")
    assert [m for (m,) in sql("SELECT msg_id FROM pgmq.read('s', 600, 1)")] == [3]
    assert sql(ACK, "s", [1], [5], [vt], False) == [(4,)]
    assert _ids(sql) == [3, 6, 7, 8]
    # a second ack of the same claim finds nothing of it left
    assert sql(ACK, "s", [1], [5], [vt], False) == [(0,)]


def test_ack_waits_for_a_concurrent_release_and_then_skips_it(info, sql, connect):
    sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[4]))")
    vt = sql("SELECT max(vt) FROM pgmq.read('s', 1, 4)")[0][0]  # a one-second lease
    wait_for(lambda: sql("SELECT clock_timestamp() > %s", vt)[0][0], what="the lease to lapse")
    # another consumer takes 1 (its lease lapsed) and has not committed yet
    other = connect(autocommit=False)
    assert other.execute("SELECT msg_id FROM pgmq.read('s', 600, 1)").fetchall() == [(1,)]
    out: list[int] = []
    acker = threading.Thread(target=lambda: out.append(connect().execute(
        ACK, ("s", [1], [4], [vt], False)).fetchone()[0]))
    acker.start()
    # the ack's DELETE waits on 1's row lock; the other consumer's lease then commits
    wait_for(lambda: sql("SELECT count(*) FROM pg_locks WHERE NOT granted")[0][0] > 0,
             what="the ack to wait for the row lock")
    other.commit()
    acker.join(10)
    assert out == [3]  # 2..4: their lease lapsed but nobody took them, still the claim's
    assert _ids(sql) == [1]


def test_archive_and_unfenced_ranges_with_holes(info, sql):
    sql("SELECT pgmq.send_batch('s', array_fill('{\"k\": 1}'::jsonb, ARRAY[10]))")
    sql("SELECT pgmq.read('s', 600, 2)")  # leased rows: no fence given, finished anyway
    firsts, lasts = ranges.id_ranges(0, 8, without=[3, 4, 9], plus=[10])
    assert (firsts, lasts) == ([1, 5, 10], [2, 8, 10])
    assert sql(ACK, "s", firsts, lasts, None, True) == [(7,)]
    assert _ids(sql) == [3, 4, 9]
    assert _ids(sql, "a_s") == [1, 2, 5, 6, 7, 8, 10]
    assert sql("SELECT read_ct, message FROM pgmq.a_s WHERE msg_id = 1") == [(1, {"k": 1})]


def test_claim_in_priority_order_is_acked_by_runs(dsn, info, sql):
    sql("SELECT pgmq.enable_priorities('s')")
    for i in range(1, 11):  # odd ids first
        sql("SELECT pgmq.send('s', '{}'::jsonb, jsonb_build_object('x-pgmq-priority', %s))", (i + 1) % 2)
    got = pa.Table.from_batches(claims.claim(dsn, info, 600, 5, None))
    assert got.column("msg_id").to_pylist() == [1, 3, 5, 7, 9]  # the read's order, kept
    firsts, lasts, leases = ranges.lease_runs(got.column("msg_id").combine_chunks(),
                                              got.column("vt").combine_chunks())
    assert firsts == lasts == [1, 3, 5, 7, 9]
    with connections.connect(dsn, autocommit=True) as c:
        assert ranges.ack(c, info, firsts, lasts, leases, archive=False) == 5
    assert _ids(sql) == [2, 4, 6, 8, 10]


def test_lease_runs_cut_on_gaps_and_leases():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    t1 = t0 + timedelta(microseconds=1)
    ids = pa.array([5, 1, 2, 3, 4, None, 7], pa.int64())
    vts = pa.array([t0, t0, t0, t1, t1, t0, None], pa.timestamp("us", tz="UTC"))
    assert ranges.lease_runs(ids, vts) == ([1, 3, 5], [2, 4, 5], [t0, t1, t0])
    assert ranges.lease_runs(pa.array([], pa.int64()), vts.slice(0, 0)) == ([], [], [])


@pytest.mark.parametrize(("args", "state"), [
    (("s", [1, 2], [3], None, False), "22023"),  # one element per range
    (("s", [1], [3], [None, None], False), "22023"),
    (("s", [5], [3], None, False), "22023"),  # first > last
    (("s", [None], [3], None, False), "22023"),
    (("s", None, [3], None, False), "22004"),
    (("s", [1], [3], None, None), "22004"),
    (("nope", [1], [3], None, False), "42P01"),
    (("bad;name", [1], [3], None, False), "42602"),
])
def test_bad_input(info, sql, args, state):
    with raises_sql(state):
        sql(ACK, *args)


def test_no_rights_no_ack(info, sql, connect):
    sql("SELECT pgmq.send('s', '{}')")
    sql("CREATE ROLE ack_stranger LOGIN")
    stranger = connect()
    stranger.execute("SET ROLE ack_stranger")
    with raises_sql("42501"):
        stranger.execute(ACK, ("s", [1], [1], None, False))
    assert _ids(sql) == [1]


def test_stream_commit_goes_through_ack_ranges(dsn, info, sql):
    sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[6]))")
    with connections.connect(dsn, autocommit=True) as c:
        c.execute("SET track_functions = 'pl'")
        assert ranges.available(c)
        # (0, 4] and the pending 2, minus the still pending 3
        assert offsets.ack_range(c, info, Offset(0, [2]), Offset(4, [3]), "delete") == 3
    assert _ids(sql) == [3, 5, 6]

    def calls() -> int:
        sql("SELECT pg_stat_clear_snapshot()")
        return sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                   "WHERE schemaname = 'pgmq' AND funcname = 'ack_ranges'")[0][0]

    wait_for(lambda: calls() == 1, what="the backend's function statistics")  # flushed at exit
