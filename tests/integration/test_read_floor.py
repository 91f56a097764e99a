"""The read floor of a queue partitioned by msg_id (features/partitioned/functions/read_floor.sql.j2):
maintenance proposes the sequence's next id and confirms it once every transaction running then
has ended; read and pop look at the partitions from the floor first, then at the whole queue when
that came back short. The first look and the acknowledgements by id run statements that name the
floor's head window (two partitions) as literals, rewritten when the floor passes into another
partition. Nothing a floor does may change which messages a read can get: a message
committed late below the proposed floor is read first, one below the floor (a sequence set back)
is read all the same, and only the extension's own routine writes it."""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.helpers import column, raises_sql, run_threads, scalar, send_n


def floor_of(conn, queue):
    row = conn.execute("SELECT read_floor, read_span, floor_candidate FROM pgmq.queue_settings WHERE queue_name = %s",
                       (queue,)).fetchone()
    return row if row is not None else (None, None, None)


def maintain(conn, queue, times=1):
    for _ in range(times):
        conn.execute("SELECT pgmq.run_partition_maintenance(%s)", (queue,))


@pytest.fixture
def pq(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('pq', '10', '100000')")
    return "pq"


def test_maintenance_proposes_then_confirms_the_floor_and_reads_use_it(conn, pq):
    send_n(conn, pq, 55)
    maintain(conn, pq)
    assert floor_of(conn, pq) == (None, 10, 56)  # proposed, not yet confirmed
    maintain(conn, pq)
    assert floor_of(conn, pq) == (1, 10, 56)
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(1, 30)::bigint))", (pq,))
    maintain(conn, pq)
    assert floor_of(conn, pq)[0] == 31  # the lowest message below the confirmed candidate
    # a read across the head's partitions and beyond, with a lease of 0 seconds that leaves what
    # the first look took visible to the second: in msg_id order, each message once
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 0, 15)", (pq,)) == list(range(31, 46))
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 12)", (pq,)) == list(range(31, 43))
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s, 3)", (pq,)) == [43, 44, 45]
    # the head's partitions leased or emptied: the whole queue's turn
    conn.execute("SELECT pgmq.send(%s, '{}')", (pq,))
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s, 20)", (pq,)) == list(range(46, 57))


def test_a_message_committed_late_keeps_the_floor_below_it(conn, connect, pq):
    send_n(conn, pq, 5)
    maintain(conn, pq, times=2)  # floor 1, next one proposed: 6
    conn.execute("SELECT * FROM pgmq.pop(%s, 5)", (pq,))
    late = connect(autocommit=False)
    late_id = scalar(late, "SELECT pgmq.send(%s, '{\"late\": true}')", (pq,))  # drawn, not committed
    send_n(conn, pq, 20)
    # 6 was proposed before late's transaction began: confirmed; the next one (27) is proposed
    # while it is open
    maintain(conn, pq)
    assert floor_of(conn, pq)[:1] == (late_id,) == (6,)
    conn.execute("SELECT * FROM pgmq.pop(%s, 20)", (pq,))
    maintain(conn, pq, times=2)  # late's transaction is still open: 27 is not confirmed
    assert floor_of(conn, pq)[0] == late_id
    send_n(conn, pq, 5)
    late.commit()
    # the late message is the queue's lowest: read first, by the floor's first look
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 1)", (pq,)) == [late_id]
    maintain(conn, pq, times=2)  # nothing holds the floor back now; the late message is still there
    assert floor_of(conn, pq)[0] == late_id


def test_a_message_below_the_floor_is_read_and_brings_it_down(conn, pq):
    send_n(conn, pq, 30)
    maintain(conn, pq, times=2)
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(1, 30)::bigint))", (pq,))
    send_n(conn, pq, 30)
    maintain(conn, pq, times=2)
    assert floor_of(conn, pq)[0] == 31
    # the sequence set back by hand: a new message lands below the floor
    seq = scalar(conn, "SELECT pg_get_serial_sequence('pgmq.q_pq', 'msg_id')")
    conn.execute(f"SELECT setval('{seq}', 4)")
    low = scalar(conn, "SELECT pgmq.send(%s, '{}')", (pq,))
    assert low == 5
    # the head's first look fills 10 of 40; the whole queue's turn meets it
    assert sorted(column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 40)", (pq,))) == [5, *range(31, 61)]
    maintain(conn, pq)
    assert floor_of(conn, pq)[0] == 5


def paths_run(conn, sql, params):
    """(rows of sql, {static path: calls}) from one transaction (function statistics on)."""
    counts = ("SELECT funcname, calls FROM pg_stat_xact_user_functions "
              "WHERE funcname LIKE '\\_static\\_%'")  # this backend's, not yet flushed
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'all'")
        before = dict(conn.execute(counts).fetchall())
        rows = column(conn, sql, params)
        after = dict(conn.execute(counts).fetchall())
    return rows, {f: n - before.get(f, 0) for f, n in after.items() if n != before.get(f, 0)}


def test_a_queue_kept_empty_reads_without_its_floor(conn, pq):
    """An empty poll would pay the first look for nothing: a queue whose last maintenance saw no
    more than read_span ids queued is read whole, as without a floor; a longer one is not."""
    send_n(conn, pq, 30)
    conn.execute("SELECT * FROM pgmq.pop(%s, 25)", (pq,))
    maintain(conn, pq, times=2)
    assert floor_of(conn, pq) == (26, 10, 31)
    rows, calls = paths_run(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 10)", (pq,))
    assert rows == list(range(26, 31)) and calls == {"_static_read": 1}
    send_n(conn, pq, 30)
    maintain(conn, pq)
    rows, calls = paths_run(conn, "SELECT msg_id FROM pgmq.pop(%s, 3)", (pq,))
    assert rows == [31, 32, 33] and calls == {"_static_pop_head": 1}


def test_no_floor_without_a_msg_id_interval_or_with_a_cached_sequence(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('tq', '1 day', '7 days')")
    send_n(conn, "tq", 3)
    maintain(conn, "tq", times=2)
    assert floor_of(conn, "tq") == (None, None, None)
    conn.execute("SELECT pgmq.create_partitioned('cq', '10', '100000')")
    send_n(conn, "cq", 3)
    maintain(conn, "cq", times=2)
    assert floor_of(conn, "cq")[0] == 1
    seq = scalar(conn, "SELECT pg_get_serial_sequence('pgmq.q_cq', 'msg_id')")
    conn.execute(f"ALTER SEQUENCE {seq} CACHE 20")
    maintain(conn, "cq")
    assert floor_of(conn, "cq") == (None, None, None)
    assert column(conn, "SELECT msg_id FROM pgmq.pop('cq', 5)") == [1, 2, 3]
    # plain queues: maintenance refuses them, the routine does nothing
    conn.execute("SELECT pgmq.create('plainq')")
    conn.execute("SELECT pgmq._prove_caller(), pgmq._advance_read_floor('plainq')")
    conn.execute("SELECT pgmq._prove_caller(), pgmq._advance_read_floor('no_such_queue')")
    assert floor_of(conn, "plainq") == (None, None, None)


def test_only_the_extension_writes_a_floor(conn, make_role, pq):
    tenant = make_role("tenant")
    conn.execute(f"SET ROLE {tenant}")
    try:
        # the routine that keeps it acts only for callers of the API that may maintain the queue
        with raises_sql("42501", "this routine acts only for callers of pgmq's API"):
            conn.execute("SELECT pgmq._advance_read_floor('pq')")
        with raises_sql("42501", 'permission denied to maintain queue "pq"'):
            conn.execute("SELECT pgmq._prove_caller(), pgmq._advance_read_floor('pq')")
        conn.execute("SELECT pgmq.create('mine')")
        conn.execute("SELECT pgmq.set_dedup_window('mine', 60)")  # its settings row
        with raises_sql("42501", 'the read floor of queue "mine" is kept by run_partition_maintenance only'):
            conn.execute("UPDATE pgmq.queue_settings SET read_floor = 1000 WHERE queue_name = 'mine'")
        conn.execute("DELETE FROM pgmq.queue_settings WHERE queue_name = 'mine'")
        with raises_sql("42501"):
            conn.execute("INSERT INTO pgmq.queue_settings (queue_name, read_floor, read_span) VALUES ('mine', 1000, 10)")
    finally:
        conn.execute("RESET ROLE")
    assert floor_of(conn, "mine") == (None, None, None)


def test_competing_consumers_with_a_floor_get_each_message_once(conn, connect, pq):
    total = 400
    send_n(conn, pq, total)
    maintain(conn, pq, times=2)
    assert floor_of(conn, pq)[0] == 1
    got: list[int] = []
    lock = threading.Lock()

    def consume(c: psycopg.Connection, how: str) -> None:
        while True:
            if how == "pop":
                ids = column(c, "SELECT msg_id FROM pgmq.pop(%s, 7)", (pq,))
            else:
                ids = column(c, "SELECT msg_id FROM pgmq.read(%s, 60, 7)", (pq,))
                c.execute("SELECT pgmq.delete(%s, %s::bigint[])", (pq, ids))
            if not ids:
                return
            with lock:
                got.extend(ids)

    run_threads(threading.Thread(target=consume, args=(connect(), how))
                for how in ("pop", "read", "pop", "read"))
    assert sorted(got) == list(range(1, total + 1))


def test_queue_metrics_looks_for_head_and_tail_from_the_floor(conn, pq):
    """queue_metrics of a queue with a floor looks for its head an interval from the floor and
    its tail an interval below the last id, then further: the ages are those of the lowest and
    highest message whichever look found them."""
    for _ in range(55):
        conn.execute("SELECT pgmq.send(%s, '{}')", (pq,))
    maintain(conn, pq, times=2)
    assert floor_of(conn, pq) == (1, 10, 56)

    def ages_match(head: int, tail: int) -> None:
        row = conn.execute("""SELECT m.oldest_msg_age_sec, m.newest_msg_age_sec,
                                     extract(epoch FROM m.measured_at) - extract(epoch FROM h.enqueued_at),
                                     extract(epoch FROM m.measured_at) - extract(epoch FROM t.enqueued_at)
                              FROM pgmq.queue_metrics(%s) m, pgmq.q_pq h, pgmq.q_pq t
                              WHERE h.msg_id = %s AND t.msg_id = %s""", (pq, head, tail)).fetchone()
        assert row[0] == pytest.approx(float(row[2]), abs=1e-6) and row[1] == pytest.approx(float(row[3]), abs=1e-6)
        assert row[0] > row[1]

    ages_match(1, 55)  # both found by the first looks
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(1, 25)::bigint))", (pq,))
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(45, 55)::bigint))", (pq,))
    ages_match(26, 44)  # neither: the head above the floor's interval, the tail below the last id's


def head_window(conn, path, queue):
    """The window the head path's branch for `queue` names: (low, high)."""
    src = scalar(conn, "SELECT prosrc FROM pg_proc WHERE proname = %s", (path,))
    branch = src[src.index(f"OPERATOR(pg_catalog.=) '{queue}'"):]
    low, high = branch.split("msg_id BETWEEN '", 1)[1].split("'", 3)[0::2]
    return int(low), int(high)


def partitions_locked(conn, sql, params):
    """The partitions of pq whose table a statement locked (in one transaction, rolled back)."""
    with conn.transaction():
        conn.execute(sql, params)
        locked = set(column(conn, """SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                                     WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
                                       AND c.relname LIKE 'q\\_pq\\_p%%' AND c.relkind = 'r'"""))
        raise psycopg.Rollback()
    return locked


def test_the_head_window_follows_the_floor_and_a_read_opens_only_its_partitions(conn, pq):
    send_n(conn, pq, 75)
    maintain(conn, pq, times=2)
    assert floor_of(conn, pq)[0] == 1
    assert scalar(conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgmq.q_pq'::regclass") >= 8
    for path in ("_static_read_head", "_static_pop_head", "_static_delete_one"):
        assert head_window(conn, path, pq) == (0, 19)  # the floor's partition and the next
    assert partitions_locked(conn, "SELECT * FROM pgmq.read(%s, 30, 3)", (pq,)) == {"q_pq_p0", "q_pq_p10"}
    assert partitions_locked(conn, "SELECT pgmq.delete(%s, 2::bigint)", (pq,)) == {"q_pq_p0", "q_pq_p10"}
    assert partitions_locked(conn, "SELECT * FROM pgmq.pop(%s, 2)", (pq,)) == {"q_pq_p0", "q_pq_p10"}
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(1, 33)::bigint))", (pq,))
    maintain(conn, pq)
    assert floor_of(conn, pq)[0] == 34
    for path in ("_static_read_head", "_static_pop_head", "_static_delete_one"):
        assert head_window(conn, path, pq) == (30, 49)
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 3)", (pq,)) == [34, 35, 36]
    assert scalar(conn, "SELECT pgmq.delete(%s, 35::bigint)", (pq,)) is True
    assert scalar(conn, "SELECT pgmq.delete(%s, 35::bigint)", (pq,)) is False
    # ids outside the window: the plain statement
    assert scalar(conn, "SELECT pgmq.delete(%s, 70::bigint)", (pq,)) is True
    assert scalar(conn, "SELECT pgmq.delete(%s, 7::bigint)", (pq,)) is False
    # a plain queue's branch names every id
    conn.execute("SELECT pgmq.create('plainq')")
    assert head_window(conn, "_static_read_head", "plainq") == (-2**63, 2**63 - 1)


def test_a_stale_head_window_changes_nothing_a_read_can_get(conn, connect, pq):
    """The window is written by the rebuild maintenance asks for; when another transaction holds
    the rebuild, the window stays where it was: reads still get every message once, in order,
    through the whole queue's look, and the next maintenance writes the window."""
    send_n(conn, pq, 60)
    maintain(conn, pq, times=2)
    assert head_window(conn, "_static_read_head", pq) == (0, 19)
    conn.execute("SELECT pgmq.delete(%s, ARRAY(SELECT generate_series(1, 24)::bigint))", (pq,))
    holder = connect(autocommit=False)
    holder.execute("SELECT pg_advisory_xact_lock(hashtext('pgmq.static_paths'))")
    maintain(conn, pq)
    assert floor_of(conn, pq)[0] == 25
    assert head_window(conn, "_static_read_head", pq) == (0, 19)  # not written: stale
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 4)", (pq,)) == [25, 26, 27, 28]
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s, 3)", (pq,)) == [29, 30, 31]
    assert scalar(conn, "SELECT pgmq.delete(%s, 25::bigint)", (pq,)) is True
    holder.rollback()
    maintain(conn, pq)
    assert head_window(conn, "_static_read_head", pq) == (20, 39)
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s, 40)", (pq,)) == list(range(32, 61))  # 26-28 leased


def test_dropping_the_head_partition_stops_no_reader(conn, pq):
    """The window's bounds are values, not partition names: a partition dropped under it (a
    retention drop, by hand) leaves reads, pops and deletes working on what is left."""
    send_n(conn, pq, 60)
    maintain(conn, pq, times=2)
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 1)", (pq,)) == [1]
    conn.execute("DROP TABLE pgmq.q_pq_p0")
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 2)", (pq,)) == [10, 11]
    assert scalar(conn, "SELECT pgmq.delete(%s, 10::bigint)", (pq,)) is True
    assert scalar(conn, "SELECT pgmq.delete(%s, 5::bigint)", (pq,)) is False
    conn.execute("DROP TABLE pgmq.q_pq_p10")
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s, 2)", (pq,)) == [20, 21]


def test_acknowledgements_by_id_lock_only_the_window_when_their_ids_lie_in_it(conn, pq):
    """delete, archive and set_vt of ids all in the head window plan with the window's
    partitions alone; an array reaching outside it (or a lone id outside it) runs the plain
    statement, with the same results."""
    send_n(conn, pq, 75)
    maintain(conn, pq, times=2)
    window = {"q_pq_p0", "q_pq_p10"}
    for path in ("_static_delete", "_static_archive", "_static_set_vt"):
        assert head_window(conn, path, pq) == (0, 19)
    assert partitions_locked(conn, "SELECT pgmq.delete(%s, ARRAY[1, 2, 19]::bigint[])", (pq,)) == window
    assert partitions_locked(conn, "SELECT pgmq.archive(%s, ARRAY[3, 4]::bigint[])", (pq,)) == window
    assert partitions_locked(conn, "SELECT pgmq.set_vt(%s, ARRAY[5]::bigint[], 30)", (pq,)) == window
    assert column(conn, "SELECT * FROM pgmq.delete(%s, ARRAY[1, 2, 19, NULL]::bigint[])", (pq,)) == [1, 2, 19]
    assert column(conn, "SELECT * FROM pgmq.delete(%s, ARRAY[1, 2]::bigint[])", (pq,)) == []
    assert sorted(column(conn, "SELECT * FROM pgmq.archive(%s, ARRAY[3, 4, 50, 60]::bigint[])", (pq,))) == [3, 4, 50, 60]
    assert column(conn, "SELECT msg_id FROM pgmq.a_pq ORDER BY 1") == [3, 4, 50, 60]
    assert column(conn, "SELECT msg_id FROM pgmq.set_vt(%s, ARRAY[5, 6, 70]::bigint[], 30)", (pq,)) == [5, 6, 70]
    assert sorted(column(conn, "SELECT * FROM pgmq.delete(%s, ARRAY[7, 71]::bigint[])", (pq,))) == [7, 71]
    assert column(conn, "SELECT * FROM pgmq.delete(%s, '{}'::bigint[])", (pq,)) == []
    assert column(conn, "SELECT * FROM pgmq.delete(%s, NULL::bigint[])", (pq,)) == []
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 4)", (pq,)) == [8, 9, 10, 11]
