"""Priorities cost only the queues that use them (features/core/functions/priorities.sql.j2): a
queue gets its (priority, msg_id) index and serves priority order from its first message with a
priority, whichever path writes it; other queues are read in msg_id order on the primary key."""

from __future__ import annotations

import threading

import psycopg
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, run_threads, scalar, send_n

PRIO = '{"x-pgmq-priority": %d}'


def indexes(conn, queue: str) -> list[str]:
    return column(conn, "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                        "WHERE i.indrelid = %s::regclass ORDER BY 1", (f"pgmq.q_{queue}",))


def ranked(conn, queue: str) -> bool:
    return scalar(conn, "SELECT priorities FROM pgmq.list_queue_settings() WHERE queue_name = %s", (queue,))


def send_prio(conn, queue: str, prio: int, n: int) -> int:
    return scalar(conn, "SELECT pgmq.send(%s, %s, %s::jsonb)", (queue, Jsonb({"n": n}), PRIO % prio))


def test_a_queue_without_priorities_has_no_priority_index(conn, queue):
    send_n(conn, "jobs", 3)
    conn.execute("SELECT pgmq.send('jobs', '{}', '{\"x-pgmq-priority\": 0}'::jsonb)")  # 0 is no priority
    conn.execute("SELECT pgmq.read('jobs', 30, 2)")
    assert indexes(conn, "jobs") == ["q_jobs_pkey", "q_jobs_vt_idx"]
    assert not ranked(conn, "jobs")


def test_the_first_priority_builds_the_index_and_reads_follow_it(conn, queue):
    send_n(conn, "jobs", 2)
    send_prio(conn, "jobs", -1, 3)
    assert indexes(conn, "jobs") == ["q_jobs_pkey", "q_jobs_priority_idx", "q_jobs_vt_idx"]
    assert ranked(conn, "jobs")
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('jobs', 30, 3)") == ["3", "1", "2"]


def test_send_batch_with_a_priority_builds_the_index(conn, queue):
    conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{\"n\":0}','{\"n\":1}']::jsonb[], "
                 "ARRAY[NULL, '{\"x-pgmq-priority\": -3}']::jsonb[])")
    assert ranked(conn, "jobs")
    assert column(conn, "SELECT message->>'n' FROM pgmq.pop('jobs', 2)") == ["1", "0"]


def test_enable_priorities_ahead_of_the_first_message(conn, queue):
    conn.execute("SELECT pgmq.enable_priorities('jobs')")
    conn.execute("SELECT pgmq.enable_priorities('jobs')")  # idempotent
    assert ranked(conn, "jobs") and "q_jobs_priority_idx" in indexes(conn, "jobs")
    with raises_sql("42P01", 'queue "ghost" does not exist'):
        conn.execute("SELECT pgmq.enable_priorities('ghost')")
    with raises_sql("42602"):  # our own name check, not upstream's P0001
        conn.execute("SELECT pgmq.enable_priorities('bad;name')")


def test_a_ranked_queue_orders_transactional_and_judged_reads(conn, queue):
    for n, prio in enumerate([5, 0, -1]):
        send_prio(conn, "jobs", prio, n)
    assert scalar(conn, "SELECT (pgmq.read_message('jobs'))->>'n'") == "2"
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 3)")  # reads judge every row now
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('jobs', 30, 5)") == ["1", "0"]


def test_a_message_with_a_priority_in_a_transaction_that_sent_before(conn, queue):
    """Our deferred notification triggers leave events pending; the index is built anyway."""
    conn.execute("SELECT pgmq.enable_notify_insert('jobs', 0)")
    with conn.transaction():
        send_n(conn, "jobs", 1)
        send_prio(conn, "jobs", -2, 2)
    assert ranked(conn, "jobs")
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('jobs', 30, 2)") == ["2", "1"]


def test_a_rolled_back_first_priority_leaves_the_queue_as_it_was(conn, queue):
    with raises_sql("P0001", "boom"), conn.transaction():
        send_prio(conn, "jobs", 1, 1)
        conn.execute("DO $$ BEGIN RAISE EXCEPTION 'boom'; END $$")
    assert not ranked(conn, "jobs")
    assert indexes(conn, "jobs") == ["q_jobs_pkey", "q_jobs_vt_idx"]


def test_moves_carry_priorities_to_their_target(conn, queue):
    for name in ("dlq", "other"):
        conn.execute("SELECT pgmq.create(%s)", (name,))
    send_prio(conn, "jobs", 2, 1)
    send_prio(conn, "jobs", -2, 2)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'dlq')")
    conn.execute("SELECT pgmq.nack('jobs', msg_id) FROM pgmq.read('jobs', 30, 2)")
    assert ranked(conn, "dlq")
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('dlq', 0, 2)") == ["2", "1"]
    assert scalar(conn, "SELECT pgmq.move_messages('dlq', 'other')") == 2
    assert ranked(conn, "other")
    assert column(conn, "SELECT message->>'n' FROM pgmq.pop('other', 2)") == ["2", "1"]


def test_redrive_carries_priorities(conn, queue):
    conn.execute("SELECT pgmq.create('dlq')")
    conn.execute("SELECT pgmq.create('back')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'dlq')")
    send_prio(conn, "jobs", -4, 7)
    conn.execute("SELECT pgmq.nack('jobs', msg_id) FROM pgmq.read('jobs', 30, 1)")
    send_n(conn, "back", 1)
    assert scalar(conn, "SELECT pgmq.redrive('dlq', 'back')") == 1
    assert ranked(conn, "back")
    assert column(conn, "SELECT message->>'n' FROM pgmq.pop('back', 2)") == ["7", "1"]


def test_a_partitioned_queue_gets_its_index_on_every_partition(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('parts', '10', '100')")
    send_n(conn, "parts", 12)
    send_prio(conn, "parts", -1, 99)
    assert ranked(conn, "parts")
    assert scalar(conn, "SELECT message->>'n' FROM pgmq.pop('parts')") == "99"
    partitions = column(conn, "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                              "WHERE i.inhparent = 'pgmq.q_parts'::regclass")
    assert partitions
    for part in partitions:
        assert scalar(conn, "SELECT count(*) FROM pg_index i WHERE i.indrelid = %s::regclass "
                            "AND pg_get_indexdef(i.indexrelid) LIKE '%%(priority, msg_id)'", (f"pgmq.{part}",)) == 1


def test_only_a_role_that_may_send_builds_the_index(conn, queue, make_role, dsn):
    """The index is built by a SECURITY DEFINER routine: only for a proven caller who may send."""
    mallory = make_role("mallory", login=True)
    conn.execute(f"GRANT USAGE ON SCHEMA pgmq TO {mallory}")
    with psycopg.connect(dsn + f" user={mallory}", autocommit=True) as m:
        with raises_sql("42501"):
            m.execute("SELECT pgmq.enable_priorities('jobs')")
        with raises_sql("42501"):  # no proof of who asks
            m.execute("SELECT pgmq._enable_priorities_for('jobs')")
    assert not ranked(conn, "jobs")
    conn.execute(f"CALL pgmq.grant_queue_access('jobs', '{mallory}')")
    with psycopg.connect(dsn + f" user={mallory}", autocommit=True) as m:
        m.execute("SELECT pgmq.send('jobs', '{}', '{\"x-pgmq-priority\": 1}'::jsonb)")
    assert ranked(conn, "jobs")
    # the index is the extension owner's, like the table
    assert scalar(conn, "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'pgmq.q_jobs_priority_idx'::regclass") \
        == scalar(conn, "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'pgmq.q_jobs'::regclass")


def test_first_priorities_sent_at_once_by_several_connections(connect, conn, queue):
    send_n(conn, "jobs", 50)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def producer(k: int) -> None:
        c = connect(autocommit=True)
        start.wait()
        try:
            for i in range(5):
                send_prio(c, "jobs", -k - 1, 100 * k + i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(threading.Thread(target=producer, args=(k,)) for k in range(4))
    assert errors == []
    assert ranked(conn, "jobs")
    assert indexes(conn, "jobs").count("q_jobs_priority_idx") == 1
    got = column(conn, "SELECT message->>'n' FROM pgmq.pop('jobs', 20)")
    assert [int(n) // 100 for n in got] == [3] * 5 + [2] * 5 + [1] * 5 + [0] * 5
