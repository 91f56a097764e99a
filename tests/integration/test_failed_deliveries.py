"""The delivery contract on every consuming path (docs/concepts/delivery-guarantees.md): on a queue with a
retry policy a delivery lost to a rollback, a rolled-back savepoint or a terminated backend is
counted once, whichever function took it and whichever function next meets the message, a
take of a lease that ran out included; an acknowledgement rolled back inside its lease counts
as a failed delivery too (the same trace). Queues without a policy keep upstream's behaviour."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, scalar, wait_for

MAX_RETRIES = 2

# One call that takes the next message of 'jobs' (None when nothing is taken).
TAKE = {
    "pop": "SELECT msg_id FROM pgmq.pop('jobs')",
    "read": "SELECT msg_id FROM pgmq.read('jobs', 30, 1)",
    "read_with_poll": "SELECT msg_id FROM pgmq.read_with_poll('jobs', 30, 1, 0)",
    "read_grouped": "SELECT msg_id FROM pgmq.read_grouped('jobs', 30, 1)",
    "read_grouped_rr": "SELECT msg_id FROM pgmq.read_grouped_rr('jobs', 30, 1)",
    "read_grouped_head": "SELECT msg_id FROM pgmq.read_grouped_head('jobs', 30, 1)",
    "read_message": "SELECT (pgmq.read_message('jobs'))->>'n'",
    "read_message_any": "SELECT (pgmq.read_message_any('jobs')).q_jsonb->>'n'",
}


@pytest.fixture
def policy_queue(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.create('dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', %s, 0, 1, NULL, 'dlq')", (MAX_RETRIES,))
    conn.execute("SELECT pgmq.send('jobs', %s)", (Jsonb({"n": 1}),))
    return conn


def take(conn, how):
    row = conn.execute(TAKE[how]).fetchone()
    return None if row is None or row[0] is None else row[0]


def dead_letter(conn):
    return conn.execute("SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_dlq").fetchall()


def deliveries_in_rolled_back_transactions(conn, how, *, savepoint=False, limit=20):
    """Take the message in transactions that roll back whenever they got it (a failing
    handler; the others commit, as a consumer loop does) until it is dead-lettered; returns how
    many times it was handed out."""
    delivered = 0
    for _ in range(limit):
        with conn.transaction() as tx:
            if savepoint:
                with conn.transaction() as sp:
                    got = take(conn, how)
                    if got is not None:
                        raise psycopg.Rollback(sp)  # ROLLBACK TO SAVEPOINT; tx commits
            else:
                got = take(conn, how)
                if got is not None:
                    raise psycopg.Rollback(tx)
        delivered += got is not None
        if scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0:
            break
    return delivered


@pytest.mark.parametrize("how", sorted(TAKE))
def test_rolled_back_deliveries_are_counted_on_every_path(policy_queue, how):
    conn = policy_queue
    assert deliveries_in_rolled_back_transactions(conn, how) == 1 + MAX_RETRIES
    (record,), = dead_letter(conn)
    assert (record["reason"], record["attempts"]) == ("rollback", 1 + MAX_RETRIES)


@pytest.mark.parametrize("how", ["pop", "read", "read_message"])
def test_rolled_back_savepoints_are_counted(policy_queue, how):
    conn = policy_queue
    assert deliveries_in_rolled_back_transactions(conn, how, savepoint=True) == 1 + MAX_RETRIES
    (record,), = dead_letter(conn)
    assert record["attempts"] == 1 + MAX_RETRIES


def test_a_settled_message_waits_for_a_later_transaction(policy_queue):
    conn = policy_queue
    with conn.transaction(force_rollback=True):
        assert take(conn, "pop") is not None
    with conn.transaction():
        # this transaction records the lost delivery: handing the message out here would lose
        # the count again if it rolled back too
        assert take(conn, "pop") is None
        assert take(conn, "read") is None
    assert scalar(conn, "SELECT read_ct FROM pgmq.q_jobs") == 1
    assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [2]


def test_retry_delay_applies_to_a_lost_delivery(policy_queue):
    conn = policy_queue
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 2, 60)")
    with conn.transaction(force_rollback=True):
        take(conn, "pop")
    assert take(conn, "read") is None
    assert scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs") == 60
    assert scalar(conn, "SELECT vt = last_read_at FROM pgmq.q_jobs") is True


def test_an_ack_rolled_back_inside_its_lease_counts_as_a_failed_delivery(policy_queue):
    """Its trace, an aborted xmax on the lease, is what a take of the lease that ran out,
    rolled back, leaves (such a take comes in the same call when no retry delay applies)."""
    conn = policy_queue
    msg_id = column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)")[0]
    conn.execute("SELECT pgmq.set_vt('jobs', %s, clock_timestamp() + interval '0.2 s')", (msg_id,))
    for ack in ("SELECT pgmq.delete('jobs', %s::bigint)", "SELECT pgmq.archive('jobs', %s::bigint)"):
        with conn.transaction(force_rollback=True):
            assert scalar(conn, ack, (msg_id,)) is True
    # the lease runs out, its row still carrying the rolled-back ack (a set_vt would replace it)
    wait_for(lambda: scalar(conn, "SELECT vt <= clock_timestamp() FROM pgmq.q_jobs"), what="the lease to run out")
    # settled as a lost delivery (the second), then handed out again: the third
    assert take(conn, "read") is None
    assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [3]


def lease_the_last_delivery(conn):
    """Lease the message 1 + MAX_RETRIES times (each lease runs out and the next read takes it
    again at once): its deliveries are used up, the last lease still held. Returns its msg_id."""
    for n in range(1, 2 + MAX_RETRIES):
        (msg_id, read_ct), = conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 1)").fetchall()
        assert read_ct == n
        if n <= MAX_RETRIES:
            conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    return msg_id


USED_UP_PATHS = ["read", "pop", "read_message", "read_grouped"]


@pytest.mark.parametrize("how", USED_UP_PATHS)
def test_a_rolled_back_ack_of_the_last_lease_counts_no_more(policy_queue, how):
    """The last delivery was counted when it was leased; its rolled-back ack may not count it
    again (the dead letter said attempts = 2 + max_retries after a consumer was killed)."""
    conn = policy_queue
    msg_id = lease_the_last_delivery(conn)
    conn.execute("SELECT pgmq.set_vt('jobs', %s, clock_timestamp() + interval '0.2 s')", (msg_id,))
    with conn.transaction(force_rollback=True):
        assert scalar(conn, "SELECT pgmq.delete('jobs', %s::bigint)", (msg_id,)) is True
    wait_for(lambda: scalar(conn, "SELECT vt <= clock_timestamp() FROM pgmq.q_jobs"), what="the lease to run out")
    assert take(conn, how) is None
    (record,), = dead_letter(conn)
    assert (record["reason"], record["attempts"]) == ("rollback", 1 + MAX_RETRIES)


@pytest.mark.parametrize("how", USED_UP_PATHS)
def test_a_rolled_back_dead_lettering_counts_nothing(policy_queue, how):
    """A consumer that dead-letters a used-up message and then rolls back (killed, crashed)
    delivered nothing: the next consumer dead-letters it with the same count."""
    conn = policy_queue
    msg_id = lease_the_last_delivery(conn)
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    with conn.transaction(force_rollback=True):
        assert take(conn, how) is None
        assert dead_letter(conn) != []
    assert dead_letter(conn) == []
    assert take(conn, how) is None
    (record,), = dead_letter(conn)
    assert record["attempts"] == 1 + MAX_RETRIES


def test_a_rolled_back_take_of_an_expired_lease_counts(policy_queue):
    conn = policy_queue
    msg_id = column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)")[0]
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))  # the lease runs out
    with conn.transaction(force_rollback=True):
        assert take(conn, "pop") == msg_id  # handed out at once (no retry delay): a second delivery, lost
    assert take(conn, "read") is None  # counted
    assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [3]  # the third
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    assert take(conn, "read") is None
    (record,), = dead_letter(conn)
    assert (record["reason"], record["attempts"]) == ("expired", 3)


def test_a_delivery_lost_with_a_terminated_backend_is_counted_by_any_reader(policy_queue, connect):
    conn = policy_queue
    for how, next_reader in [("read_message", "read"), ("pop", "read_message"), ("read", "pop")]:
        victim = connect(autocommit=False)
        assert take(victim, how) is not None
        pid = victim.info.backend_pid
        assert scalar(conn, "SELECT pg_terminate_backend(%s, 5000)", (pid,)) is True
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert take(conn, next_reader) is None  # settled: counted, not handed out as new
    # three lost deliveries used up 1 + MAX_RETRIES
    (record,), = dead_letter(conn)
    assert (record["reason"], record["attempts"]) == ("rollback", 3)


def test_dispatch_counts_a_delivery_lost_by_another_path(policy_queue):
    conn = policy_queue
    conn.execute("CREATE TABLE seen (n int)")
    conn.execute("CREATE PROCEDURE record_it(m jsonb) LANGUAGE sql AS $$ INSERT INTO seen VALUES ((m->>'n')::int) $$")
    conn.execute("CALL pgmq.register_callback('jobs', 'public.record_it(jsonb)')")
    with conn.transaction(force_rollback=True):
        take(conn, "pop")
    conn.execute("CALL pgmq.dispatch('jobs', 1)")  # settles, delivers nothing
    assert scalar(conn, "SELECT count(*) FROM seen") == 0
    assert scalar(conn, "SELECT read_ct FROM pgmq.q_jobs") == 1
    conn.execute("CALL pgmq.dispatch('jobs', 1)")
    assert scalar(conn, "SELECT count(*) FROM seen") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_expired_leases_settle_then_dead_letter_after_max_deliveries(policy_queue):
    conn = policy_queue
    counts = []
    for _ in range(10):
        got = column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)")
        counts += got
        conn.execute("UPDATE pgmq.q_jobs SET vt = vt - interval '1 hour', last_read_at = last_read_at - interval '1 hour'")
        if scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0:
            break
    assert counts == [1, 2, 3]
    (record,), = dead_letter(conn)
    assert (record["reason"], record["attempts"]) == ("expired", 3)


@pytest.mark.parametrize("how", ["pop", "read", "read_message"])
def test_without_a_policy_a_rolled_back_take_comes_back_as_it_was(conn, how):
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.send('jobs', %s)", (Jsonb({"n": 1}),))
    for _ in range(5):
        with conn.transaction(force_rollback=True):
            assert take(conn, how) is not None
    # upstream: at once, nothing counted
    assert conn.execute("SELECT read_ct, last_read_at FROM pgmq.q_jobs").fetchall() == [(0, None)]
    assert take(conn, how) is not None


@pytest.mark.parametrize("how", ["read", "pop"])
@pytest.mark.parametrize("used_up", [True, False], ids=["dead-lettered", "retried"])
def test_a_flagged_message_does_not_make_a_read_come_back_short(conn, how, used_up):
    """The message in front lost its delivery to a rollback: the read that meets it next
    dead-letters it (no retries left) or puts it back for a later attempt, and hands out the
    messages behind it instead, up to qty."""
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 2, 0, 1, NULL, 'dlq')")
    limit = {"x-pgmq-max-retries": 0} if used_up else {}
    conn.execute("SELECT pgmq.send('jobs', %s, %s)", (Jsonb({"n": 1}), Jsonb(limit)))
    with conn.transaction() as tx:
        assert conn.execute("SELECT message->>'n' FROM pgmq.read('jobs', 30, 1)").fetchone() == ("1",)
        raise psycopg.Rollback(tx)
    conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{\"n\": 2}', '{\"n\": 3}']::jsonb[])")
    fn = "pgmq.read('jobs', 30, 2)" if how == "read" else "pgmq.pop('jobs', 2)"
    assert column(conn, f"SELECT message->>'n' FROM {fn}") == ["2", "3"]
    assert len(dead_letter(conn)) == (1 if used_up else 0)
    if not used_up:  # its next attempt
        assert column(conn, "SELECT message->>'n' FROM pgmq.read('jobs', 30, 2)") == ["1"]


@pytest.mark.parametrize("ranked", [False, True], ids=["msg_id order", "priority order"])
@pytest.mark.parametrize("how", ["read", "pop"])
def test_a_message_to_judge_among_untouched_ones(conn, how, ranked):
    """The first round of a read or pop on a queue with rules takes the claimed messages nothing
    has happened to as they are; one that lost a delivery (the third in delivery order) is left
    to the judged round, which counts the loss and puts it back, and the take is topped up
    behind it. The same on a queue that uses priorities (its ranked paths)."""
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 2)")
    # ids 1..5; with priorities 5..1 the delivery order is 5, 4, 3, 2, 1
    conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[], "
                 "(SELECT array_agg(jsonb_build_object('x-pgmq-priority', CASE WHEN %s THEN 6 - g ELSE 0 END) "
                 "ORDER BY g) FROM generate_series(1, 5) g))", (ranked,))
    order = [5, 4, 3, 2, 1] if ranked else [1, 2, 3, 4, 5]
    ahead, lost = order[:2], order[2]
    conn.execute("SELECT pgmq.set_vt('jobs', %s::bigint[], 60)", (ahead,))
    with conn.transaction() as tx:
        assert column(conn, "SELECT msg_id FROM pgmq.pop('jobs')") == [lost]
        raise psycopg.Rollback(tx)
    conn.execute("SELECT pgmq.set_vt('jobs', %s::bigint[], 0)", (ahead,))
    fn = "pgmq.read('jobs', 30, 4)" if how == "read" else "pgmq.pop('jobs', 4)"
    assert column(conn, f"SELECT msg_id FROM {fn}") == ahead + order[3:]
    assert conn.execute("SELECT read_ct, vt <= clock_timestamp() FROM pgmq.q_jobs WHERE msg_id = %s",
                        (lost,)).fetchone() == (1, True)
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 5)") == [lost]
