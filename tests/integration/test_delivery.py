"""Priorities, retry policies, nack, dead letters, redrive, TTL, dedup, checkpoint, reserve/confirm."""

from __future__ import annotations

import threading
import time

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, run_threads, scalar


def send(conn, queue, msg, headers=None, delay=0):
    return scalar(conn, "SELECT pgmq.send(%s, %s, %s, %s)", (queue, Jsonb(msg), Jsonb(headers) if headers else None, delay))


def dead_letter_record(conn, table, msg_id_col="msg_id"):
    return conn.execute(f"SELECT message, headers->'x-pgmq-dead-letter' FROM pgmq.{table} ORDER BY {msg_id_col}").fetchall()


# ----------------------------------------------------------------------------- priority

def test_priority_orders_every_read_path(conn, queue):
    for n, prio in enumerate([5, 0, -1, 5, 0]):
        send(conn, queue, {"n": n}, {"x-pgmq-priority": prio} if prio else None)
    order = [m["n"] for (m,) in conn.execute("SELECT message FROM pgmq.read('jobs', 30, 10)").fetchall()]
    assert order == [2, 1, 4, 0, 3]
    conn.execute("SELECT pgmq.set_vt('jobs', ARRAY[1,2,3,4,5]::bigint[], 0)")
    assert [m["n"] for (m,) in conn.execute("SELECT message FROM pgmq.pop('jobs', 2)").fetchall()] == [2, 1]
    assert scalar(conn, "SELECT message->>'n' FROM pgmq.read_with_poll('jobs', 30, 1, 1)") == "4"


def test_bad_priority_header_is_refused(conn, queue):
    with raises_sql("22023", 'header x-pgmq-priority must be an integer number, got "high"'):
        send(conn, queue, {}, {"x-pgmq-priority": "high"})
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_priority_survives_send_batch(conn, queue):
    conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{\"n\":0}','{\"n\":1}']::jsonb[], "
                 "ARRAY[NULL, '{\"x-pgmq-priority\": -3}']::jsonb[])")
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('jobs', 30, 5)") == ["1", "0"]


# ----------------------------------------------------------------------------- retry policy

@pytest.mark.parametrize("args,state,message", [
    ("'jobs', -1", "22023", "max_retries cannot be negative"),
    ("'jobs', 1, -1", "22023", "retry_delay must be a non-negative number of seconds"),
    ("'jobs', 1, 1, 0.5", "22023", "backoff_factor must be a finite number >= 1"),
    ("'jobs', 1, 1, 2, -1", "22023", "max_retry_delay cannot be negative"),
    ("'jobs', 1, 0, 1, NULL, 'nope'", "42P01", 'queue "nope" does not exist'),
    ("'jobs', 1, 0, 1, NULL, 'jobs'", "22023", "a queue cannot be its own dead-letter queue"),
    ("'ghost', 1", "42P01", 'queue "ghost" does not exist'),
])
def test_set_retry_policy_validation(conn, queue, args, state, message):
    with raises_sql(state, message):
        conn.execute(f"SELECT pgmq.set_retry_policy({args})")
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_settings") == 0


def test_policy_listing_and_removal(conn, queue):
    conn.execute("SELECT pgmq.create('dlq')")
    conn.execute("""SELECT pgmq.set_retry_policy(queue_name => 'jobs', max_retries => 3, retry_delay => 5,
                    backoff_factor => 2, max_retry_delay => 60, dead_letter_queue => 'dlq')""")
    rows = conn.execute("SELECT * FROM pgmq.list_queue_settings()").fetchall()
    assert rows == [("dlq", False, None, 0, 1.0, None, None, 300, None, False),
                    ("jobs", True, 3, 5, 2.0, 60, "dlq", 300, None, False)]
    conn.execute("SELECT pgmq.remove_retry_policy('jobs')")
    assert conn.execute("SELECT retry_policy, max_retries, dead_letter_queue FROM pgmq.list_queue_settings() "
                        "WHERE queue_name = 'jobs'").fetchone() == (False, None, None)


def test_retry_delay_backoff_formula(conn):
    got = column(conn, "SELECT pgmq._retry_delay(n, 10, 2, 45) FROM generate_series(1, 5) n")
    assert got == [10, 20, 40, 45, 45]


@pytest.fixture
def with_dlq(conn, queue):
    conn.execute("SELECT pgmq.create('dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 1, 0, 1, NULL, 'dlq')")
    return conn


def test_expired_leases_dead_letter_after_max_deliveries(with_dlq):
    conn = with_dlq
    send(conn, "jobs", {"task": 1})
    assert conn.execute("SELECT read_ct FROM pgmq.read('jobs', 0, 1)").fetchall() == [(1,)]
    assert conn.execute("SELECT read_ct FROM pgmq.read('jobs', 0, 1)").fetchall() == [(2,)]
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)").fetchall() == []  # third: dead-lettered
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    (message, record), = dead_letter_record(conn, "q_dlq")
    assert message == {"task": 1}
    assert record["source_queue"] == "jobs" and record["attempts"] == 2 and record["reason"] == "expired"


def test_without_dead_letter_queue_exhausted_messages_are_archived(conn, queue):
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0)")
    send(conn, "jobs", {"task": 1}, {"keep": "me"})
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    assert conn.execute("SELECT * FROM pgmq.pop('jobs')").fetchall() == []
    headers = scalar(conn, "SELECT headers FROM pgmq.a_jobs")
    assert headers["keep"] == "me" and headers["x-pgmq-dead-letter"]["reason"] == "expired"


def test_nack_retries_with_backoff_then_dead_letters(with_dlq):
    conn = with_dlq
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 2, 10, 3, NULL, 'dlq')")
    msg_id = send(conn, "jobs", {"task": 1})
    delays = []
    for _ in range(2):
        conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
        assert scalar(conn, "SELECT pgmq.nack('jobs', %s, 'boom')", (msg_id,)) is True
        delays.append(scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs"))
        assert scalar(conn, "SELECT headers->>'x-pgmq-last-error' FROM pgmq.q_jobs") == "boom"
        conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    assert delays == [10, 30]
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    assert scalar(conn, "SELECT pgmq.nack('jobs', %s, 'final')", (msg_id,)) is True
    (_, record), = dead_letter_record(conn, "q_dlq")
    assert (record["reason"], record["attempts"], record["last_error"]) == ("nack", 3, "final")


def test_nack_without_policy_brings_the_message_back_after_a_second(conn, queue):
    msg_id = send(conn, "jobs", {})
    conn.execute("SELECT * FROM pgmq.read('jobs', 300, 1)")
    assert scalar(conn, "SELECT pgmq.nack('jobs', %s)", (msg_id,)) is True
    # not at once: a handler that keeps failing would get it again on every poll
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == []
    delay = scalar(conn, "SELECT extract(epoch FROM vt - now()) FROM pgmq.q_jobs WHERE msg_id = %s", (msg_id,))
    assert 0 < delay <= 1
    conn.execute("UPDATE pgmq.q_jobs SET vt = now()")
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == [msg_id]
    assert scalar(conn, "SELECT pgmq.nack('jobs', 999)") is False


def test_dropping_the_dead_letter_queue_falls_back_to_archive(with_dlq):
    conn = with_dlq
    conn.execute("SELECT pgmq.drop_queue('dlq')")
    send(conn, "jobs", {})
    for _ in range(2):
        conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 1


def test_redrive_moves_back_oldest_first_with_attempts_reset(with_dlq):
    conn = with_dlq
    conn.execute("SELECT pgmq.create('other')")
    for n in range(3):
        send(conn, "jobs", {"n": n})
    for _ in range(3):
        conn.execute("SELECT * FROM pgmq.read('jobs', 0, 10)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_dlq") == 3
    assert scalar(conn, "SELECT pgmq.redrive('dlq', max_messages => 2)") == 2
    rows = conn.execute("SELECT message->>'n', read_ct, headers FROM pgmq.q_jobs ORDER BY msg_id").fetchall()
    assert rows == [("0", 0, None), ("1", 0, None)]
    assert scalar(conn, "SELECT pgmq.redrive('dlq', 'other')") == 1
    assert column(conn, "SELECT message->>'n' FROM pgmq.q_other") == ["2"]
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_dlq") == 0
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.redrive('dlq', 'ghost')")


# ----------------------------------------------------------------------------- TTL

def test_message_ttl_header_dead_letters_instead_of_delivering(conn, queue):
    send(conn, "jobs", {"old": True}, {"x-pgmq-ttl": 1})
    send(conn, "jobs", {"old": False})
    time.sleep(1.2)
    assert column(conn, "SELECT message->>'old' FROM pgmq.read('jobs', 30, 10)") == ["false"]
    assert scalar(conn, "SELECT headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_jobs") == "ttl"


def test_queue_default_ttl_and_expire_messages(conn, queue):
    conn.execute("SELECT pgmq.set_message_ttl('jobs', 1)")
    for _ in range(3):
        send(conn, "jobs", {})
    send(conn, "jobs", {}, {"x-pgmq-ttl": 3600})  # the header wins
    time.sleep(1.2)
    assert scalar(conn, "SELECT pgmq.expire_messages('jobs')") == 3
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 3
    assert conn.execute("SELECT * FROM pgmq.pop('jobs')").fetchall() != []
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.set_message_ttl('jobs', 0)")


def age(conn, table, seconds):
    """Make every message of the table look `seconds` old (as if sent then)."""
    conn.execute(f"UPDATE pgmq.{table} SET enqueued_at = enqueued_at - make_interval(secs => %s)", (seconds,))


def ttl_only(conn, queue):
    """The queue is read by the TTL-only statement: a TTL and no other limit anywhere."""
    return conn.execute("SELECT message_ttl IS NOT NULL AND NOT retry_policy AND NOT message_limits "
                        "FROM pgmq.queue_settings WHERE queue_name = %s", (queue,)).fetchone()[0]


@pytest.mark.parametrize("consume", ["read", "pop"])
def test_a_queue_ttl_alone_dead_letters_what_is_too_old(conn, queue, consume):
    conn.execute("SELECT pgmq.set_message_ttl('jobs', 60)")
    old = [send(conn, "jobs", {"n": i}) for i in range(3)]
    age(conn, "q_jobs", 120)
    fresh = [send(conn, "jobs", {"n": i}) for i in range(3, 6)]
    assert ttl_only(conn, "jobs")
    call = "pgmq.read('jobs', 30, 2)" if consume == "read" else "pgmq.pop('jobs', 2)"
    # the first round meets the three old ones: they go to the archive, and the take goes on
    assert column(conn, f"SELECT msg_id FROM {call}") == fresh[:2]
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs ORDER BY msg_id") == old
    assert column(conn, "SELECT headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_jobs") == ["ttl"] * 3
    left = column(conn, "SELECT msg_id FROM pgmq.q_jobs ORDER BY msg_id")
    assert left == (fresh if consume == "read" else fresh[2:])
    if consume == "read":
        assert column(conn, "SELECT read_ct FROM pgmq.q_jobs ORDER BY msg_id") == [1, 1, 0]


def test_a_queue_ttl_alone_keeps_priority_order(conn, queue):
    conn.execute("SELECT pgmq.set_message_ttl('jobs', 60)")
    stale = send(conn, "jobs", {"n": "stale"}, {"x-pgmq-priority": -5})
    age(conn, "q_jobs", 120)
    low = send(conn, "jobs", {"n": "low"}, {"x-pgmq-priority": 3})
    high = send(conn, "jobs", {"n": "high"}, {"x-pgmq-priority": -1})
    assert ttl_only(conn, "jobs")  # (a priority is no limit of a message's own)
    assert column(conn, "SELECT msg_id FROM pgmq.pop('jobs', 5)") == [high, low]
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs") == [stale]


def test_competing_consumers_of_a_ttl_queue_share_everything_once(connect):
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    setup.execute("SELECT pgmq.set_message_ttl('jobs', 60)")
    setup.execute("SELECT pgmq.send_batch('jobs', array_agg(jsonb_build_object('n', i))) FROM generate_series(1, 600) i")
    setup.execute("UPDATE pgmq.q_jobs SET enqueued_at = enqueued_at - interval '2 minutes' WHERE msg_id % 3 = 0")
    assert ttl_only(setup, "jobs")
    conns = [connect() for _ in range(5)]
    got: list[list[int]] = [[] for _ in conns]
    barrier = threading.Barrier(len(conns))

    def consumer(i: int) -> None:
        barrier.wait()
        while True:
            ids = column(conns[i], "SELECT msg_id FROM pgmq.pop('jobs', 3)")
            if not ids:
                return
            got[i].extend(ids)

    run_threads([threading.Thread(target=consumer, args=(i,)) for i in range(len(conns))])
    delivered = [i for ids in got for i in ids]
    archived = column(setup, "SELECT msg_id FROM pgmq.a_jobs")
    assert len(delivered) == len(set(delivered)) == 400  # each fresh one once
    assert sorted(archived) == list(range(3, 601, 3))  # each stale one dead-lettered once, none delivered
    assert not set(delivered) & set(archived)
    assert scalar(setup, "SELECT count(*) FROM pgmq.q_jobs") == 0


@pytest.mark.parametrize("rules", ["ttl", "retry policy", "message limits"])
@pytest.mark.parametrize("vt", [0, -5])
def test_a_lease_that_leaves_a_message_visible_is_handed_out_once_per_read(conn, queue, rules, vt):
    """A read of 0 seconds (or less) leaves what it leased visible at once: the rounds after the
    first (here, after a message that is dead-lettered) must not hand it out again."""
    headers = None
    if rules == "ttl":
        conn.execute("SELECT pgmq.set_message_ttl('jobs', 60)")
    elif rules == "retry policy":
        conn.execute("SELECT pgmq.set_retry_policy('jobs', 0)")
    else:
        headers = {"x-pgmq-max-retries": 0}
    stale = send(conn, "jobs", {"n": 0}, headers)
    if rules == "ttl":
        age(conn, "q_jobs", 120)
    else:  # its one delivery is used up: its lease runs out and it is dead-lettered when met
        conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    fresh = [send(conn, "jobs", {"n": i}) for i in range(1, 4)]  # (no limits of their own)
    got = column(conn, "SELECT msg_id FROM pgmq.read('jobs', %s, 5)", (vt,))
    assert sorted(got) == fresh  # each once, though the read asked for more
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs") == [stale]
    assert column(conn, "SELECT read_ct FROM pgmq.q_jobs ORDER BY msg_id") == [1, 1, 1]


# ----------------------------------------------------------------------------- dedup

def test_dedup_returns_the_original_id(conn, queue):
    first = send(conn, "jobs", {"n": 1}, {"x-pgmq-dedup-id": "order-7"})
    again = send(conn, "jobs", {"n": 2}, {"x-pgmq-dedup-id": "order-7"})
    other = send(conn, "jobs", {"n": 3}, {"x-pgmq-dedup-id": "order-8"})
    assert again == first and other != first
    assert column(conn, "SELECT message->>'n' FROM pgmq.q_jobs ORDER BY msg_id") == ["1", "3"]


def test_dedup_window_expires(conn, queue):
    conn.execute("SELECT pgmq.set_dedup_window('jobs', 1)")
    first = send(conn, "jobs", {}, {"x-pgmq-dedup-id": "k"})
    time.sleep(1.1)
    assert send(conn, "jobs", {}, {"x-pgmq-dedup-id": "k"}) != first
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.set_dedup_window('jobs', 0)")


def test_dedup_in_send_batch(conn, queue):
    ids = column(conn, """SELECT * FROM pgmq.send_batch('jobs', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[],
                          ARRAY['{"x-pgmq-dedup-id":"a"}', NULL, '{"x-pgmq-dedup-id":"a"}']::jsonb[])""")
    assert ids[0] == ids[2] and len(set(ids)) == 2
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 2


def test_concurrent_duplicate_sends_make_one_message(connect):
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    conns = [connect() for _ in range(6)]
    got: list[int] = []
    barrier = threading.Barrier(len(conns))

    def sender(c):
        barrier.wait()
        got.append(send(c, "jobs", {}, {"x-pgmq-dedup-id": "same"}))

    run_threads([threading.Thread(target=sender, args=(c,)) for c in conns])
    assert len(set(got)) == 1 and len(got) == 6
    assert scalar(setup, "SELECT count(*) FROM pgmq.q_jobs") == 1


def test_rolled_back_dedup_send_frees_the_key(connect):
    a, b = connect(autocommit=False), connect()
    b.execute("SELECT pgmq.create('jobs')")
    send(a, "jobs", {}, {"x-pgmq-dedup-id": "k"})
    a.rollback()
    assert send(b, "jobs", {}, {"x-pgmq-dedup-id": "k"}) is not None
    assert scalar(b, "SELECT count(*) FROM pgmq.q_jobs") == 1


def test_a_duplicate_uses_up_no_msg_id(conn, queue):
    # the message's id is drawn before its key is claimed; a live key is looked for first
    first = send(conn, "jobs", {}, {"x-pgmq-dedup-id": "k"})
    assert send(conn, "jobs", {}, {"x-pgmq-dedup-id": "k"}) == first
    assert send(conn, "jobs", {}, {"x-pgmq-dedup-id": "k2"}) == first + 1
    assert send(conn, "jobs", {}) == first + 2
    assert column(conn, "SELECT msg_id FROM pgmq.dedup_keys ORDER BY dedup_id") == [first, first + 1]


def test_an_expired_key_is_taken_over_with_the_new_message(conn, queue):
    conn.execute("SELECT pgmq.set_dedup_window('jobs', 1)")
    first = send(conn, "jobs", {"n": 1}, {"x-pgmq-dedup-id": "k"})
    conn.execute("UPDATE pgmq.dedup_keys SET expires_at = clock_timestamp() - interval '1 second'")
    second = send(conn, "jobs", {"n": 2}, {"x-pgmq-dedup-id": "k"})
    assert second == first + 1
    assert scalar(conn, "SELECT msg_id FROM pgmq.dedup_keys WHERE dedup_id = 'k'") == second
    assert send(conn, "jobs", {"n": 3}, {"x-pgmq-dedup-id": "k"}) == second


def test_dropping_a_queue_drops_its_dedup_keys(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.create('other')")
    send(conn, "jobs", {"n": 1}, {"x-pgmq-dedup-id": "k"})
    send(conn, "other", {}, {"x-pgmq-dedup-id": "k"})
    assert scalar(conn, "SELECT pgmq.drop_queue('jobs')") is True
    assert column(conn, "SELECT queue_name FROM pgmq.dedup_keys") == ["other"]
    # a queue made again under the name starts without the old keys
    conn.execute("SELECT pgmq.create('jobs')")
    send(conn, "jobs", {"n": 2}, {"x-pgmq-dedup-id": "k"})
    assert column(conn, "SELECT message->>'n' FROM pgmq.q_jobs") == ["2"]
    # also when drop_queue only deletes the catalog row of a queue whose table is gone
    conn.execute("DROP TABLE pgmq.q_jobs")
    assert scalar(conn, "SELECT pgmq.drop_queue('jobs')") is False  # (a NOTICE says so)
    assert column(conn, "SELECT queue_name FROM pgmq.dedup_keys") == ["other"]


def test_every_spelling_of_a_queue_name_shares_its_dedup_keys(conn):
    # one queue, one table (format_table_name lowercases): a plain send reaches it under any
    # spelling, and so does a dedup send, with the same keys (kept under the name lowercased);
    # drop_queue takes them, so a queue made again under the name starts without them
    conn.execute("SELECT pgmq.create('Jobs')")
    first = send(conn, "Jobs", {"n": 1}, {"x-pgmq-dedup-id": "k"})
    assert send(conn, "jobs", {"n": 2}, {"x-pgmq-dedup-id": "k"}) == first
    assert send(conn, "JOBS", {"n": 3}, {"x-pgmq-dedup-id": "k"}) == first
    assert column(conn, "SELECT message->>'n' FROM pgmq.q_jobs") == ["1"]
    assert column(conn, "SELECT queue_name FROM pgmq.dedup_keys") == ["jobs"]
    assert scalar(conn, "SELECT pgmq.drop_queue('Jobs')") is True
    assert scalar(conn, "SELECT count(*) FROM pgmq.dedup_keys") == 0
    conn.execute("SELECT pgmq.create('Jobs')")
    again = send(conn, "jobs", {"n": 4}, {"x-pgmq-dedup-id": "k"})
    assert column(conn, "SELECT msg_id FROM pgmq.q_jobs") == [again]
    with raises_sql("42P01"):  # an unknown queue, as a plain send says it
        send(conn, "nope", {}, {"x-pgmq-dedup-id": "k"})


def test_a_dedup_send_needs_the_sequence_that_queue_access_grants(conn, make_role, connect):
    # the key's msg_id is drawn from the queue's sequence: grant_queue_access gives USAGE on it;
    # a role given only table privileges by hand sends without keys, and is refused with keys
    conn.execute("SELECT pgmq.create('jobs')")
    granted, by_hand = make_role("granted", login=True), make_role("by_hand", login=True)
    conn.execute(f"GRANT USAGE ON SCHEMA pgmq TO {granted}, {by_hand}")
    conn.execute(f"CALL pgmq.grant_queue_access('jobs', '{granted}')")
    conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pgmq.q_jobs TO {by_hand}")
    g, h = connect(user=granted), connect(user=by_hand)
    first = send(g, "jobs", {}, {"x-pgmq-dedup-id": "k"})
    assert send(g, "jobs", {}, {"x-pgmq-dedup-id": "k"}) == first
    assert send(h, "jobs", {}) == first + 1
    with raises_sql("42501"):
        send(h, "jobs", {}, {"x-pgmq-dedup-id": "k2"})
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 2
    assert column(conn, "SELECT dedup_id FROM pgmq.dedup_keys") == ["k"]


def test_dedup_sends_planned_on_an_empty_key_table_never_scan_it(conn, queue):
    # A session keeps its plans: made just after the (empty) key table was vacuumed, 2.7.0's
    # live-key test scanned the whole table on every later send of the session (EXISTS is
    # planned for its first row, which makes a one-page scan look cheaper than the index).
    conn.execute("VACUUM ANALYZE pgmq.dedup_keys")
    sends = ("SELECT count(*) FROM generate_series(1, 40) i, "
             "pgmq.send('jobs', '{}'::jsonb, jsonb_build_object('x-pgmq-dedup-id', 'k' || i))")
    scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'pgmq.dedup_keys'::regclass"
    with conn.transaction():
        before = scalar(conn, scans) or 0
        assert scalar(conn, sends) == 40  # new keys: the static path
        assert scalar(conn, sends) == 40  # live keys: the message each made
        assert scalar(conn, scans) == before
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 40


# ----------------------------------------------------------------------------- checkpoint

def test_checkpoint_replaces_payload_and_extends_lease(conn, queue):
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 1)")
    msg_id = send(conn, "jobs", {"step": 1})
    conn.execute("SELECT * FROM pgmq.read('jobs', 5, 1)")
    assert scalar(conn, "SELECT pgmq.checkpoint('jobs', %s, '{\"step\": 2}', 120, 2)", (msg_id,)) is True
    message, left, max_retries = conn.execute(
        "SELECT message, round(extract(epoch FROM vt - clock_timestamp())), headers->>'x-pgmq-max-retries' "
        "FROM pgmq.q_jobs").fetchone()
    assert message == {"step": 2} and left == 120 and max_retries == "3"


def test_checkpoint_needs_an_in_flight_message(conn, queue):
    msg_id = send(conn, "jobs", {"step": 1})
    assert scalar(conn, "SELECT pgmq.checkpoint('jobs', %s, '{}', 60)", (msg_id,)) is False
    assert scalar(conn, "SELECT message FROM pgmq.q_jobs") == {"step": 1}
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.checkpoint('jobs', %s, '{}', -1)", (msg_id,))


# ----------------------------------------------------------------------------- reserve / confirm

def test_reserved_messages_are_invisible_until_confirmed(conn, queue):
    a = scalar(conn, "SELECT pgmq.send_reserved('jobs', '{\"n\": 1}', 60)")
    b = scalar(conn, "SELECT pgmq.send_reserved('jobs', '{\"n\": 2}', 60, '{\"h\": 1}')")
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 30, 10)").fetchall() == []
    assert conn.execute("SELECT * FROM pgmq.pop('jobs', 10)").fetchall() == []
    assert scalar(conn, "SELECT pgmq.confirm('jobs', %s)", ([a, b, 999],)) == 2
    rows = conn.execute("SELECT msg_id, headers FROM pgmq.read('jobs', 30, 10)").fetchall()
    assert rows == [(a, None), (b, {"h": 1})]


def test_unconfirmed_reservations_expire(conn, queue):
    msg_id = scalar(conn, "SELECT pgmq.send_reserved('jobs', '{}', 1)")
    time.sleep(1.1)
    assert scalar(conn, "SELECT pgmq.confirm('jobs', %s)", ([msg_id],)) == 0
    assert scalar(conn, "SELECT pgmq.expire_messages()") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.send_reserved('jobs', '{}', 0)")
