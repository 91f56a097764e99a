"""Failures without blocking (stream_nack): a consumer copies the events of a batch it could not
handle into its subscription's retry queue, an ordinary queue with the queues' retry policy and
dead letters, and acknowledges the batch in the same transaction: the stream moves on."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, scalar


def send(conn, n, stream="ev", headers=None):
    return scalar(conn, "SELECT pgmq.stream_send(%s, %s, %s)",
                  (stream, Jsonb({"n": n}), Jsonb(headers) if headers else None))


def read(conn, sub="work", stream="ev"):
    """(batch_id, [ev_id, ...]) of the next batch."""
    rows = conn.execute("SELECT batch_id, ev_id FROM pgmq.stream_read(%s, %s)", (stream, sub)).fetchall()
    return (rows[0][0] if rows else None), [r[1] for r in rows]


@pytest.fixture
def ev(conn):
    """Stream 'ev', subscription 'work' with retry queue 'work_retry'."""
    conn.execute("SELECT pgmq.create_stream('ev')")
    conn.execute("SELECT pgmq.subscribe('ev', 'work', retry_queue => 'work_retry')")
    return "ev"


def test_a_failed_event_goes_to_the_retry_queue_and_the_stream_moves_on(conn, ev):
    ids = [send(conn, n, headers={"k": n}) for n in range(5)]
    with conn.transaction():
        batch, got = read(conn)
        assert got == ids
        assert scalar(conn, "SELECT pgmq.stream_nack('ev', 'work', %s, %s, 'boom')", (batch, [ids[1], ids[3]])) == 2
        conn.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (batch,))
    assert read(conn) == (None, [])  # the stream moved on
    rows = conn.execute("SELECT message, headers FROM pgmq.read('work_retry', 30, 10) ORDER BY msg_id").fetchall()
    assert [m for m, _ in rows] == [{"n": 1}, {"n": 3}]
    h = rows[0][1]
    assert (h["k"], h["x-pgmq-stream"], h["x-pgmq-subscription"], h["x-pgmq-ev-id"], h["x-pgmq-last-error"]) == (
        1, "ev", "work", ids[1], "boom")
    assert "x-pgmq-ev-time" in h
    info = conn.execute("SELECT lag_events, batches_out, retry_queue FROM pgmq.stream_info('ev')").fetchone()
    assert info == (0, 0, "work_retry")


def test_retried_events_follow_the_retry_queues_policy_to_the_dead_letter_queue(conn, ev):
    conn.execute("SELECT pgmq.create('work_dead')")
    conn.execute("SELECT pgmq.set_retry_policy('work_retry', 1, dead_letter_queue => 'work_dead')")
    eid = send(conn, 7)
    with conn.transaction():
        batch, _ = read(conn)
        conn.execute("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[], 'first')", (batch, eid))
        conn.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (batch,))
    for attempt in ("second", "third"):  # a consumer of the retry queue fails it: 1 + max_retries
        msg_id = scalar(conn, "SELECT msg_id FROM pgmq.read('work_retry', 30, 1)")
        assert msg_id is not None
        conn.execute("SELECT pgmq.nack('work_retry', %s, %s)", (msg_id, attempt))
    assert column(conn, "SELECT msg_id FROM pgmq.read('work_retry', 30, 1)") == []
    message, headers = conn.execute("SELECT message, headers FROM pgmq.read('work_dead', 30, 1)").fetchone()
    assert message == {"n": 7} and headers["x-pgmq-ev-id"] == eid and headers["x-pgmq-dead-letter"]


def test_nack_and_ack_are_one_with_the_callers_transaction(conn, ev):
    eid = send(conn, 1)
    with pytest.raises(psycopg.errors.RaiseException):
        with conn.transaction():
            batch, _ = read(conn)
            conn.execute("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[])", (batch, eid))
            conn.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (batch,))
            conn.execute("DO $$BEGIN RAISE EXCEPTION 'the work failed'; END$$")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work_retry") == 0
    with conn.transaction():  # the batch came back whole
        batch, got = read(conn)
        assert got == [eid]
        conn.execute("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[])", (batch, eid))
        conn.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (batch,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work_retry") == 1


def test_a_delay_holds_the_retry(conn, ev):
    eid = send(conn, 1)
    batch, _ = read(conn)
    conn.execute("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[], delay => 60)", (batch, eid))
    assert column(conn, "SELECT msg_id FROM pgmq.read('work_retry', 30, 1)") == []
    assert scalar(conn, "SELECT vt > now() + interval '50 seconds' FROM pgmq.q_work_retry") is True


def test_bad_nacks_are_refused_and_change_nothing(conn, ev):
    a, b = send(conn, 1), send(conn, 2)
    batch, _ = read(conn)
    conn.execute("SELECT pgmq.subscribe('ev', 'plain')")
    cases = [
        ("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s, 999999]::bigint[])", (batch, a), "22023",
         f"events 999999 are not in batch {batch}"),
        ("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[]::bigint[])", (batch,), "22023", None),
        ("SELECT pgmq.stream_nack('ev', 'work', %s, NULL)", (batch,), "22023", None),
        ("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[NULL]::bigint[])", (batch,), "22023", None),
        ("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[], delay => -1)", (batch, a), "22023", None),
        ("SELECT pgmq.stream_nack('ev', 'work', 123456, ARRAY[%s]::bigint[])", (a,), "55000", None),
        ("SELECT pgmq.stream_nack('ev', 'plain', %s, ARRAY[%s]::bigint[])", (batch, a), "55000",
         'subscription "plain" of stream "ev" has no retry queue'),
        ("SELECT pgmq.stream_nack('ev', 'ghost', %s, ARRAY[%s]::bigint[])", (batch, a), "42704", None),
        ("SELECT pgmq.stream_nack('nope', 'work', %s, ARRAY[%s]::bigint[])", (batch, a), "42P01", None),
        ("SELECT pgmq.subscribe('ev', 'x', retry_queue => 'a$b')", None, "42602", None),
        ("SELECT pgmq.subscribe('ev', 'x', retry_queue => %s)", ("r" * 48,), "42622", None),
    ]
    for sql, params, state, message in cases:
        with raises_sql(state, message):
            conn.execute(sql, params)
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work_retry") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_subscriptions") == 2
    # the batch is still out and whole
    assert scalar(conn, "SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s, %s]::bigint[])", (batch, b, a)) == 2
    conn.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (batch,))
    with raises_sql("55000"):  # acknowledged: no longer out
        conn.execute("SELECT pgmq.stream_nack('ev', 'work', %s, ARRAY[%s]::bigint[])", (batch, a))


def test_the_retry_queue_is_set_on_an_existing_subscription_and_cleared_when_dropped(conn, ev):
    conn.execute("SELECT pgmq.subscribe('ev', 'late')")
    assert scalar(conn, "SELECT retry_queue FROM pgmq.stream_subscriptions WHERE subscription_name = 'late'") is None
    position = scalar(conn, "SELECT position FROM pgmq.stream_subscriptions WHERE subscription_name = 'late'")
    assert scalar(conn, "SELECT pgmq.subscribe('ev', 'late', retry_queue => 'late_retry')") == position
    assert scalar(conn, "SELECT retry_queue FROM pgmq.stream_subscriptions WHERE subscription_name = 'late'") == "late_retry"
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'late_retry'") == 1
    conn.execute("SELECT pgmq.drop_queue('late_retry')")
    assert scalar(conn, "SELECT retry_queue FROM pgmq.stream_subscriptions WHERE subscription_name = 'late'") is None


def test_nobody_can_squat_a_retry_queue_or_nack_without_the_right_to_send(conn, ev, make_role):
    """A hostile role that made the queue first does not get a subscriber's failed events; a
    consumer that may read the stream but not send to the retry queue changes nothing."""
    mallory, alice = make_role("mallory"), make_role("alice")
    conn.execute(f"SET ROLE {mallory}")
    try:
        conn.execute("SELECT pgmq.create('alice_retry')")
    finally:
        conn.execute("RESET ROLE")
    conn.execute(f"SET ROLE {alice}")
    try:
        conn.execute("SELECT pgmq.create_stream('hers')")
        with raises_sql("42501", f'retry queue "alice_retry" belongs to role "{mallory}"'):
            conn.execute("SELECT pgmq.subscribe('hers', 'sub', retry_queue => 'alice_retry')")
        conn.execute("SELECT pgmq.subscribe('hers', 'sub', retry_queue => 'alice_retry2')")
        eid = send(conn, 1, "hers")
    finally:
        conn.execute("RESET ROLE")
    assert scalar(conn, "SELECT retry_queue FROM pgmq.stream_subscriptions WHERE stream_name = 'hers'") == "alice_retry2"
    # a reader of the stream (granted SELECT by hand: there is no grant call for streams yet)
    # without access to the queue
    conn.execute(f"GRANT SELECT ON pgmq.s_hers, pgmq.s_hers$seq TO {mallory}")
    conn.execute(f"SET ROLE {mallory}")
    try:
        with conn.transaction():
            batch, got = read(conn, "sub", "hers")
            assert got == [eid]
            with raises_sql("42501"):
                conn.execute("SELECT pgmq.stream_nack('hers', 'sub', %s, ARRAY[%s]::bigint[])", (batch, eid))
    finally:
        conn.execute("RESET ROLE")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_alice_retry2") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_alice_retry") == 0
