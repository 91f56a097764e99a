"""A queue is one table whatever the spelling of its name, and so are its delivery rules: a
consumer that names a queue made as 'jobs' as 'JOBS' gets the same retry policy, counting and
dead-lettering (2.10.0 looked the settings up by the caller's spelling and found none: pop('JOBS')
handed a message out any number of times and counted none)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, scalar

TAKE = {
    "pop": "SELECT msg_id FROM pgmq.pop(%s)",
    "read": "SELECT msg_id FROM pgmq.read(%s, 30, 1)",
    "read_unordered": "SELECT msg_id FROM pgmq.read_unordered(%s, 30, 1)",
    "read_grouped": "SELECT msg_id FROM pgmq.read_grouped(%s, 30, 1)",
    "read_message": "SELECT (pgmq.read_message(%s))->>'n'",
}


@pytest.fixture
def jobs(conn):
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 1, 0, 1, NULL, 'dlq')")
    conn.execute("SELECT pgmq.send('jobs', %s)", (Jsonb({"n": 1}),))
    return conn


@pytest.mark.parametrize("how", sorted(TAKE))
def test_another_spelling_follows_the_retry_policy(jobs, how):
    conn = jobs
    handed_out = 0
    for _ in range(6):  # a handler that fails whenever it gets the message; the rest commit
        with conn.transaction() as tx:
            row = conn.execute(TAKE[how], ("JOBS",)).fetchone()
            if row is not None and row[0] is not None:
                handed_out += 1
                raise psycopg.Rollback(tx)
    assert handed_out == 2  # 1 + max_retries, then dead-lettered
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT headers->'x-pgmq-dead-letter'->>'attempts' FROM pgmq.q_dlq") == "2"


def test_nack_under_another_spelling_dead_letters(jobs):
    conn = jobs
    (msg_id,) = conn.execute("SELECT msg_id FROM pgmq.read('jobs', 30, 1)").fetchone()
    assert scalar(conn, "SELECT pgmq.nack('JOBS', %s, 'boom')", (msg_id,)) is True
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    (msg_id,) = conn.execute("SELECT msg_id FROM pgmq.read('Jobs', 30, 1)").fetchone()
    assert scalar(conn, "SELECT pgmq.nack('JoBs', %s, 'boom')", (msg_id,)) is True
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_dlq") == 1


def test_an_unknown_spelling_is_still_an_unknown_queue(conn):
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM pgmq.pop('nosuch')")


def test_pause_holds_every_spelling(conn):
    conn.execute("SELECT pgmq.create('jobs'), pgmq.send('jobs', '{}'), pgmq.pause('jobs')")
    for spelling in ("JOBS", "Jobs"):
        assert conn.execute("SELECT * FROM pgmq.pop(%s)", (spelling,)).fetchall() == []
        assert conn.execute("SELECT * FROM pgmq.read(%s, 30, 1)", (spelling,)).fetchall() == []
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 1


def test_a_header_limit_sent_under_another_spelling_is_enforced(conn):
    """x-pgmq-ttl flags the queue so that reads check every row; the flag is written under the
    catalog's spelling (2.11.0 looked for a queue named 'JOBS', found none and flagged nothing:
    the expired message was delivered)."""
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("""SELECT pgmq.send('JOBS', '{"n": 1}', '{"x-pgmq-ttl": 1}'::jsonb)""")
    assert conn.execute("SELECT queue_name, message_limits FROM pgmq.queue_settings").fetchall() == [("jobs", True)]
    conn.execute("UPDATE pgmq.q_jobs SET enqueued_at = enqueued_at - interval '1 minute'")
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)").fetchall() == []
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 1  # expired into the archive


def test_a_priority_sent_under_another_spelling_orders_the_queue(conn):
    conn.execute("SELECT pgmq.create('jobs'), pgmq.send('jobs', '{\"n\": 1}')")
    conn.execute("""SELECT pgmq.send('JOBS', '{"n": 2}', '{"x-pgmq-priority": -5}'::jsonb)""")
    assert scalar(conn, "SELECT priorities FROM pgmq.queue_settings WHERE queue_name = 'jobs'") is True
    assert scalar(conn, "SELECT message->>'n' FROM pgmq.read('Jobs', 30, 1)") == "2"


def test_expire_messages_under_another_spelling(conn):
    conn.execute("SELECT pgmq.create('jobs'), pgmq.set_message_ttl('jobs', 60), pgmq.send('jobs', '{}')")
    conn.execute("UPDATE pgmq.q_jobs SET enqueued_at = enqueued_at - interval '1 hour'")
    assert scalar(conn, "SELECT pgmq.expire_messages('JOBS')") == 1


def test_catalog_tables_hold_one_row_per_queue_whatever_the_spelling(conn):
    """The lookups rely on it: the indexes on the name lowercased are unique."""
    conn.execute("SELECT pgmq.create('jobs')")
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged) VALUES ('JOBS', false, false)")


def test_setters_take_any_spelling_and_write_the_catalog_one(conn):
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('JOBS', 2, 0, 1, NULL, 'DLQ')")
    conn.execute("SELECT pgmq.set_message_ttl('Jobs', 60), pgmq.set_dedup_window('jOBS', 30)")
    assert conn.execute(
        "SELECT queue_name, max_retries, dead_letter_queue, message_ttl, dedup_window FROM pgmq.queue_settings"
    ).fetchall() == [("jobs", 2, "dlq", 60, 30)]
    assert scalar(conn, "SELECT pgmq.pause('JOBS')") is True
    assert scalar(conn, "SELECT pgmq.resume('Jobs')") is True
    conn.execute("SELECT pgmq.remove_retry_policy('JOBS')")
    assert scalar(conn, "SELECT retry_policy FROM pgmq.queue_settings WHERE queue_name = 'jobs'") is False
    assert column(conn, "SELECT queue_name FROM pgmq.queue_metrics('JOBS')") == ["jobs"]


def test_a_queue_is_not_its_own_dead_letter_queue_under_another_spelling(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="its own dead-letter queue"):
        conn.execute("SELECT pgmq.set_retry_policy('jobs', 1, 0, 1, NULL, 'JOBS')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_settings") == 0


def test_dispatch_under_another_spelling_runs_the_callback(conn):
    """The callback registered on 'jobs' (under any spelling) runs for dispatch('JOBS'), and its
    counts are the queue's (2.11.0: 'queue "JOBS" has no callback')."""
    conn.execute("CREATE TABLE public.handled (n int)")
    conn.execute("CREATE PROCEDURE public.handle(m jsonb) LANGUAGE sql "
                 "AS $$ INSERT INTO public.handled VALUES ((m->>'n')::int) $$")
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("CALL pgmq.register_callback('Jobs', 'public.handle(jsonb)')")
    assert column(conn, "SELECT queue_name FROM pgmq.list_callbacks()") == ["jobs"]
    conn.execute("""SELECT pgmq.send('jobs', '{"n": 1}'), pgmq.send('jobs', '{"n": 2}')""")
    conn.execute("CALL pgmq.dispatch('JOBS', 10)")
    assert column(conn, "SELECT n FROM public.handled ORDER BY n") == [1, 2]
    assert scalar(conn, "SELECT callback_succeeded FROM pgmq.queue_metrics('jobs')") == 2
    with pytest.raises(psycopg.errors.UndefinedObject, match='queue "nosuch" has no callback'):
        conn.execute("CALL pgmq.dispatch('nosuch')")
