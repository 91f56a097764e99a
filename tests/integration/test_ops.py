"""Operations SQL (templates/features/ops): queue_metrics(), pause/resume on every consuming
path, browse and move_messages."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import column, raises_sql, scalar, send_n

CALLBACKS = """
CREATE TABLE public.handled (n int);
CREATE PROCEDURE public.handle(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    IF (msg->>'n')::int % 3 = 0 THEN
        RAISE EXCEPTION 'no threes';
    END IF;
    INSERT INTO public.handled VALUES ((msg->>'n')::int);
END $$;
"""


def metrics(conn: psycopg.Connection, queue: str) -> dict:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    row = cur.execute("SELECT * FROM pgmq.queue_metrics(%s)", (queue,)).fetchone()
    assert row is not None
    return row


def test_queue_metrics_counts_every_state(conn):
    conn.execute("SELECT pgmq.create('work'), pgmq.create('dead')")
    conn.execute("SELECT pgmq.set_retry_policy('work', 0, dead_letter_queue => 'dead')")
    send_n(conn, "work", 10)
    conn.execute("SELECT pgmq.send('work', '{\"later\": 1}', 60)")
    leased = column(conn, "SELECT msg_id FROM pgmq.read('work', 30, 3)")
    conn.execute("SELECT pgmq.archive('work', %s::bigint)", (leased[0],))
    conn.execute("SELECT pgmq.nack('work', %s)", (leased[1],))  # max_retries 0: dead-lettered
    m = metrics(conn, "work")
    assert (m["depth"], m["visible"], m["in_flight"], m["delayed"]) == (9, 7, 1, 1)
    assert (m["dead_letter_queue"], m["dead_letter_depth"], m["archive_rows"]) == ("dead", 1, 1)
    assert m["total_sent"] == 11 and m["paused"] is False and m["estimated"] is False
    assert 0 <= m["newest_msg_age_sec"] <= m["oldest_msg_age_sec"] < 60
    assert m["table_bytes"] > 0 and m["index_bytes"] > 0 and m["archive_bytes"] > 0
    assert m["dead_tuples"] >= 0
    assert m["default_partition_rows"] is None and m["callback_succeeded"] is None
    # every queue, by name; an empty queue has no ages
    rows = conn.execute("SELECT queue_name, depth, oldest_msg_age_sec FROM pgmq.queue_metrics()").fetchall()
    assert rows == [("dead", 1, rows[0][2]), ("work", 9, rows[1][2])]
    conn.execute("SELECT pgmq.purge_queue('work')")
    assert metrics(conn, "work")["oldest_msg_age_sec"] is None


def test_queue_metrics_refuses_unknown_and_unreadable_queues(conn, make_role):
    conn.execute("SELECT pgmq.create('mine'), pgmq.create('other')")
    with raises_sql("42P01", 'queue "ghost" does not exist'):
        conn.execute("SELECT * FROM pgmq.queue_metrics('ghost')")
    with raises_sql("42602"):
        conn.execute("SELECT * FROM pgmq.queue_metrics('bad;name')")
    role = make_role("watcher")
    conn.execute(f"CALL pgmq.grant_queue_access('mine', '{role}')")
    conn.execute(f"SET ROLE {role}")
    try:
        assert column(conn, "SELECT queue_name FROM pgmq.queue_metrics()") == ["mine"]
        with raises_sql("42501", 'permission denied for queue "other"'):
            conn.execute("SELECT * FROM pgmq.queue_metrics('other')")
    finally:
        conn.execute("RESET ROLE")


def test_queue_metrics_estimates_large_queues_from_statistics(conn):
    """Above the exact-count size a queue's depth comes from the statistics system, and its few
    leased messages are still counted exactly."""
    conn.execute("SELECT pgmq.create('big')")
    conn.execute("INSERT INTO pgmq.q_big (vt, message) SELECT now(), jsonb_build_object('n', g, 'pad', "
                 "repeat('x', 100)) FROM generate_series(1, 60000) g")
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT count(*) FROM pgmq.read('big', 60, 250)")
    m = metrics(conn, "big")
    assert m["estimated"] is True
    assert abs(m["depth"] - 60000) <= 600, m["depth"]
    assert (m["in_flight"], m["delayed"]) == (250, 0)
    assert m["visible"] == m["depth"] - 250
    # statistics lost (as after a crash): evenly spaced runs of pages, within 3 % of rows that
    # fill their pages evenly (TABLESAMPLE SYSTEM drew a random number of pages: 15 % off seen)
    conn.execute("SELECT pg_stat_reset()")
    m = metrics(conn, "big")
    assert m["estimated"] is True and abs(m["depth"] - 60000) <= 1800, m["depth"]
    assert m["in_flight"] == 250


def test_queue_metrics_sample_follows_an_emptied_head(conn):
    """A consumed queue's head pages are empty and its tail full: with the statistics lost, the
    sample still lands near the true depth, every time."""
    conn.execute("SELECT pgmq.create('drained')")
    conn.execute("INSERT INTO pgmq.q_drained (vt, message) SELECT now(), jsonb_build_object('n', g, 'pad', "
                 "repeat('x', 100)) FROM generate_series(1, 60000) g")
    conn.execute("DELETE FROM pgmq.q_drained WHERE msg_id <= 40000")
    conn.execute("VACUUM pgmq.q_drained")
    depths = column(conn, "SELECT (pgmq._sample_messages('pgmq.q_drained')).depth FROM generate_series(1, 50)")
    assert all(abs(d - 20000) <= 2000 for d in depths), (min(depths), max(depths))
    conn.execute("SELECT pg_stat_reset()")
    m = metrics(conn, "drained")
    assert m["estimated"] is True and abs(m["depth"] - 20000) <= 2000, m["depth"]

def test_callback_counts(conn):
    conn.execute(CALLBACKS)
    conn.execute("SELECT pgmq.create('cb')")
    conn.execute("SELECT pgmq.set_retry_policy('cb', 0)")
    conn.execute("CALL pgmq.register_callback('cb', 'public.handle(jsonb)')")
    m = metrics(conn, "cb")
    assert (m["callback_succeeded"], m["callback_failed"]) == (0, 0)
    send_n(conn, "cb", 6)
    conn.execute("CALL pgmq.dispatch('cb')")
    m = metrics(conn, "cb")
    assert (m["callback_succeeded"], m["callback_failed"]) == (4, 2)
    assert scalar(conn, "SELECT count(*) FROM public.handled") == 4
    # a dispatch that rolls back counts nothing
    send_n(conn, "cb", 1, start=7)
    with conn.transaction(force_rollback=True):
        assert scalar(conn, "SELECT pgmq._dispatch_one('cb')") == "done"
    assert metrics(conn, "cb")["callback_succeeded"] == 4


CONSUMERS = [
    "SELECT count(*) FROM pgmq.read('p', 30, 10)",
    "SELECT count(*) FROM pgmq.read_with_poll('p', 30, 10, 1, 50)",
    "SELECT count(*) FROM pgmq.pop('p', 10)",
    "SELECT count(*) FROM pgmq.read_grouped('p', 30, 10)",
    "SELECT count(*) FROM pgmq.read_grouped_rr('p', 30, 10)",
    "SELECT count(*) FROM pgmq.read_grouped_head('p', 30, 10)",
    "SELECT count(*) FROM pgmq.read_payload('p', 30, 10, NULL::jsonb)",
    "SELECT count(pgmq.read_message('p'::name))",
    "SELECT count(pgmq.read_message_by_id('p'::name, 1))",
    "SELECT count(pgmq._dispatch_one('p'))",
]


@pytest.mark.parametrize("retry_policy", [False, True], ids=["plain", "retry-policy"])
def test_paused_queue_hands_out_nothing(conn, retry_policy):
    conn.execute(CALLBACKS)
    conn.execute("SELECT pgmq.create('p')")
    if retry_policy:
        conn.execute("SELECT pgmq.set_retry_policy('p', 5)")
    conn.execute("CALL pgmq.register_callback('p', 'public.handle(jsonb)')")
    send_n(conn, "p", 3)
    assert scalar(conn, "SELECT pgmq.pause('p')") is True
    assert scalar(conn, "SELECT pgmq.pause('p')") is False
    assert metrics(conn, "p")["paused"] is True
    for sql in CONSUMERS:
        assert scalar(conn, sql) == 0, sql
    send_n(conn, "p", 2, start=4)  # producers go on
    assert (metrics(conn, "p")["depth"], metrics(conn, "p")["in_flight"]) == (5, 0)
    assert scalar(conn, "SELECT pgmq.resume('p')") is True
    assert scalar(conn, "SELECT pgmq.resume('p')") is False
    assert scalar(conn, "SELECT count(*) FROM pgmq.read('p', 30, 10)") == 5


def test_pause_is_the_owners(conn, make_role):
    conn.execute("SELECT pgmq.create('owned')")
    role = make_role("stranger")
    conn.execute(f"CALL pgmq.grant_queue_access('owned', '{role}')")
    conn.execute(f"SET ROLE {role}")
    try:
        with raises_sql("42501", 'must be owner of queue "owned"'):
            conn.execute("SELECT pgmq.pause('owned')")
    finally:
        conn.execute("RESET ROLE")
    assert metrics(conn, "owned")["paused"] is False
    with raises_sql("42P01", 'queue "ghost" does not exist'):
        conn.execute("SELECT pgmq.resume('ghost')")


def test_browse_pages_without_consuming(conn):
    conn.execute("SELECT pgmq.create('b')")
    ids = send_n(conn, "b", 5)
    conn.execute("SELECT count(*) FROM pgmq.read('b', 30, 1)")
    conn.execute("SELECT pgmq.archive('b', %s::bigint)", (ids[4],))
    assert column(conn, "SELECT msg_id FROM pgmq.browse('b', qty => 2)") == ids[:2]
    assert column(conn, "SELECT msg_id FROM pgmq.browse('b', %s, 2)", (ids[1],)) == ids[2:4]
    assert column(conn, "SELECT msg_id FROM pgmq.browse('b', archived => true)") == [ids[4]]
    # read_ct is not counted and nothing is leased
    assert column(conn, "SELECT read_ct FROM pgmq.browse('b')") == [1, 0, 0, 0]
    assert scalar(conn, "SELECT count(*) FROM pgmq.read('b', 30, 10)") == 3
    for qty in (0, 1001, None):
        with raises_sql("22023"):
            conn.execute("SELECT * FROM pgmq.browse('b', 0, %s)", (qty,))


def test_move_messages_moves_visible_messages_once(conn):
    conn.execute("SELECT pgmq.create('src'), pgmq.create('dst')")
    conn.execute("SELECT pgmq.send('src', '{\"n\": 0}', '{\"x-pgmq-priority\": 5}'::jsonb, 0)")
    send_n(conn, "src", 4, start=1)
    leased = column(conn, "SELECT msg_id FROM pgmq.read('src', 30, 1)")
    assert scalar(conn, "SELECT pgmq.move_messages('src', 'dst', 2)") == 2
    assert scalar(conn, "SELECT pgmq.move_messages('src', 'dst')") == 2
    assert scalar(conn, "SELECT pgmq.move_messages('src', 'dst')") == 0
    assert column(conn, "SELECT msg_id FROM pgmq.browse('src')") == leased  # the leased one stays
    moved = conn.execute("SELECT message->>'n', headers FROM pgmq.browse('dst')").fetchall()
    assert sorted(n for n, _ in moved) == ["0", "2", "3", "4"]
    # priority comes along: the priority-5 message (lowest msg_id, moved first) is read last
    assert [r[0] for r in conn.execute("SELECT message->>'n' FROM pgmq.read('dst', 30, 10)").fetchall()][-1] == "0"
    with raises_sql("22023", "source_queue and target_queue must differ"):
        conn.execute("SELECT pgmq.move_messages('src', 'src')")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.move_messages('src', 'dst', -1)")
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.move_messages('src', 'ghost')")


def test_queue_metrics_of_a_partitioned_queue(conn, partman):
    """Counts and sizes over every partition; rows past the premade partitions (maintenance
    behind) show as default_partition_rows."""
    conn.execute("SELECT pgmq.create_partitioned('parts', '10', '100')")  # premade: ids below 50
    send_n(conn, "parts", 60)
    conn.execute("SELECT pgmq.archive('parts', 1::bigint)")
    m = metrics(conn, "parts")
    assert (m["depth"], m["visible"], m["archive_rows"], m["total_sent"]) == (59, 59, 1, 60)
    assert m["default_partition_rows"] == 11  # ids 50..60
    assert m["table_bytes"] > 0 and m["index_bytes"] > 0 and m["archive_bytes"] > 0
    assert m["oldest_msg_age_sec"] is not None and m["estimated"] is False


def test_queue_metrics_of_a_large_partitioned_queue_are_exact_where_they_were(conn, partman):
    """A queue of many partitions above the exact-count size: its depth from the statistics, its
    leased and delayed messages counted exactly (the static path through every partition's vt
    index), and its sizes the sums PostgreSQL gives for every partition and index."""
    conn.execute("SELECT pgmq.create_partitioned('wide', '2000', '1000000')")
    for _ in range(6):
        conn.execute("INSERT INTO pgmq.q_wide (vt, message) SELECT now(), jsonb_build_object('n', g, 'pad', "
                     "repeat('x', 100)) FROM generate_series(1, 10000) g")
        conn.execute("SELECT pgmq.run_partition_maintenance('wide')")
    assert scalar(conn, "SELECT count(*) FROM pg_partition_tree('pgmq.q_wide') WHERE isleaf") > 30
    conn.execute("SELECT count(*) FROM pgmq.read('wide', 60, 250)")
    conn.execute("SELECT pgmq.send('wide', '{}', 60) FROM generate_series(1, 3)")
    conn.execute("SELECT pgmq.archive('wide', ARRAY[300, 301]::bigint[])")
    conn.execute("SELECT pg_stat_force_next_flush()")
    m = metrics(conn, "wide")
    assert m["estimated"] is True and abs(m["depth"] - 60001) <= 600, m["depth"]
    assert (m["in_flight"], m["delayed"], m["archive_rows"]) == (250, 3, 2)
    sizes = conn.execute("""
        SELECT (SELECT sum(pg_table_size(relid)) FROM pg_partition_tree('pgmq.q_wide') WHERE isleaf),
               (SELECT sum(pg_indexes_size(relid)) FROM pg_partition_tree('pgmq.q_wide') WHERE isleaf),
               (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('pgmq.a_wide') WHERE isleaf)""").fetchone()
    assert (m["table_bytes"], m["index_bytes"], m["archive_bytes"]) == sizes
    assert m["table_bytes"] > 10_000_000 and m["default_partition_rows"] == 0


def test_queue_metrics_in_a_read_only_transaction_of_a_queue_the_paths_missed(conn, connect):
    """A queue made while another transaction held the static paths' rebuild has no branch in
    them until the next rebuild; a path that meets it asks for one. In a read-only transaction
    (as on a hot standby) that request writes nothing and fails nothing: the path runs its
    dynamic form."""
    holder = connect(autocommit=False)
    holder.execute("SELECT pg_advisory_xact_lock(hashtext('pgmq.static_paths'))")
    conn.execute("SELECT pgmq.create('late')")
    conn.execute("INSERT INTO pgmq.q_late (vt, message) SELECT now(), jsonb_build_object('n', g, 'pad', "
                 "repeat('x', 100)) FROM generate_series(1, 60000) g")
    conn.execute("SELECT count(*) FROM pgmq.read('late', 60, 5)")
    conn.execute("SELECT pg_stat_force_next_flush()")
    holder.rollback()
    assert scalar(conn, "SELECT strpos(prosrc, 'q_late') FROM pg_proc WHERE proname = '_static_hidden'") == 0
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        m = metrics(conn, "late")
        assert m["estimated"] is True and (m["in_flight"], m["delayed"]) == (5, 0)
        assert scalar(conn, "SELECT pgmq._static_hidden(100, 'late')") == [5, 5]
    assert scalar(conn, "SELECT strpos(prosrc, 'q_late') FROM pg_proc WHERE proname = '_static_hidden'") == 0
    # outside one, the path's request writes the queue's branch
    assert scalar(conn, "SELECT pgmq._static_hidden(100, 'late')") == [5, 5]
    assert scalar(conn, "SELECT strpos(prosrc, 'q_late') FROM pg_proc WHERE proname = '_static_hidden'") > 0
