"""Several real connections at once: SKIP LOCKED, no double delivery, rollback and commit."""

from __future__ import annotations

import threading
from collections import Counter

from tests.helpers import column, run_threads, scalar, send_n

N_MESSAGES = 2000
N_READERS = 6


def test_concurrent_readers_never_share_a_message(connect):
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    send_n(setup, "jobs", N_MESSAGES)
    conns = [connect() for _ in range(N_READERS)]
    got: list[list[int]] = [[] for _ in conns]
    barrier = threading.Barrier(len(conns))

    def reader(i: int) -> None:
        barrier.wait()
        while True:
            ids = column(conns[i], "SELECT msg_id FROM pgmq.read('jobs', 300, 7)")
            if not ids:
                return
            got[i].extend(ids)

    run_threads([threading.Thread(target=reader, args=(i,)) for i in range(len(conns))])
    counts = Counter(i for ids in got for i in ids)
    assert len(counts) == N_MESSAGES  # nothing lost
    assert max(counts.values()) == 1  # nothing delivered twice within the lease
    assert sum(1 for ids in got if ids) > 1  # the work was actually shared
    assert scalar(setup, "SELECT max(read_ct) FROM pgmq.q_jobs") == 1


def test_concurrent_pop_and_archive_lose_nothing(connect):
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    send_n(setup, "jobs", 1000)
    popped: list[int] = []
    archived: list[int] = []
    lock = threading.Lock()

    def popper(c):
        while ids := column(c, "SELECT msg_id FROM pgmq.pop('jobs', 5)"):
            with lock:
                popped.extend(ids)

    def archiver(c):
        while ids := column(c, "SELECT msg_id FROM pgmq.read('jobs', 300, 5)"):
            moved = column(c, "SELECT * FROM pgmq.archive('jobs', %s::bigint[])", (ids,))
            assert sorted(moved) == sorted(ids)
            with lock:
                archived.extend(ids)

    run_threads([threading.Thread(target=f, args=(connect(),)) for f in (popper, popper, archiver, archiver)])
    assert sorted(popped + archived) == list(range(1, 1001))
    assert scalar(setup, "SELECT count(*) FROM pgmq.a_jobs") == len(archived)
    assert scalar(setup, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_locked_rows_are_skipped_not_waited_for(connect):
    a, b = connect(autocommit=False), connect()
    b.execute("SELECT pgmq.create('jobs')")
    b.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}','{}']::jsonb[])")
    assert column(a, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == [1]  # a's transaction is open
    b.execute("SET lock_timeout = '1s'")
    assert column(b, "SELECT msg_id FROM pgmq.read('jobs', 30, 5)") == [2]  # no wait, no msg 1
    a.commit()


def test_rolled_back_read_leaves_the_message_unchanged(connect):
    a, b = connect(autocommit=False), connect()
    b.execute("SELECT pgmq.create('jobs')")
    b.execute("SELECT pgmq.send('jobs', '{\"x\": 1}')")
    before = b.execute("SELECT read_ct, vt, last_read_at FROM pgmq.q_jobs").fetchone()
    assert a.execute("SELECT read_ct FROM pgmq.read('jobs', 300, 1)").fetchall() == [(1,)]
    a.rollback()
    assert b.execute("SELECT read_ct, vt, last_read_at FROM pgmq.q_jobs").fetchone() == before
    assert b.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 1)").fetchall() == [(1, 1)]


def test_sends_are_invisible_until_commit(connect):
    producer, consumer = connect(autocommit=False), connect()
    consumer.execute("SELECT pgmq.create('jobs')")
    producer.execute("SELECT pgmq.send('jobs', '{}')")
    producer.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}','{}']::jsonb[])")
    assert column(consumer, "SELECT msg_id FROM pgmq.read('jobs', 30, 10)") == []
    assert column(consumer, "SELECT msg_id FROM pgmq.pop('jobs', 10)") == []
    producer.commit()
    assert column(consumer, "SELECT msg_id FROM pgmq.read('jobs', 30, 10)") == [1, 2, 3]


def test_rolled_back_send_leaves_nothing(connect):
    producer, consumer = connect(autocommit=False), connect()
    consumer.execute("SELECT pgmq.create('jobs')")
    producer.execute("SELECT pgmq.send('jobs', '{}')")
    producer.rollback()
    assert scalar(consumer, "SELECT queue_length FROM pgmq.metrics('jobs')") == 0


def test_delete_in_uncommitted_transaction_keeps_message_for_others(connect):
    a, b = connect(autocommit=False), connect()
    b.execute("SELECT pgmq.create('jobs')")
    b.execute("SELECT pgmq.send('jobs', '{}')")
    assert a.execute("SELECT pgmq.delete('jobs', 1::bigint)").fetchone() == (True,)
    assert scalar(b, "SELECT count(*) FROM pgmq.q_jobs") == 1
    a.rollback()
    assert column(b, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == [1]


def test_competing_consumers_of_a_retry_policy_queue_never_come_back_empty_handed(connect):
    """A judged read or pop claims its rows before it locks them; a claimed row that another
    consumer took meanwhile is asked for again, so no call returns nothing while many messages
    are visible (before: ~8 % of pops by 4 connections did)."""
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    setup.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    send_n(setup, "jobs", 6000)
    conns = [connect() for _ in range(4)]
    empty = [0] * len(conns)
    got: list[list[int]] = [[] for _ in conns]
    barrier = threading.Barrier(len(conns))

    def consumer(i: int) -> None:
        barrier.wait()
        for k in range(500):
            ids = column(conns[i], "SELECT msg_id FROM pgmq.pop('jobs')" if k % 2 else
                         "SELECT msg_id FROM pgmq.read('jobs', 300, 1)")
            empty[i] += not ids
            got[i].extend(ids)

    run_threads([threading.Thread(target=consumer, args=(i,)) for i in range(len(conns))])
    assert empty == [0] * len(conns)
    counts = Counter(i for ids in got for i in ids)
    assert len(counts) == 2000 and max(counts.values()) == 1
    # a row locked for long by someone who holds no claim costs a few rounds, then nothing
    locker = connect()
    locker.execute("BEGIN")
    first = scalar(locker, "SELECT min(msg_id) FROM pgmq.q_jobs WHERE vt <= now()")
    locker.execute("SELECT 1 FROM pgmq.q_jobs WHERE msg_id = %s FOR UPDATE", (first,))
    taken = column(setup, "SELECT msg_id FROM pgmq.pop('jobs')")
    assert taken and taken[0] != first
    locker.execute("ROLLBACK")


def test_competing_consumers_that_roll_back_have_every_failure_counted_once(connect):
    """Four consumers pop (one or two at a time) from a queue with a retry policy and roll back a
    third of their takes. Every message is committed by exactly one pop, and the read_ct it is
    handed out with equals the number of rolled-back takes of it: each lost delivery counted
    once, whether the first (clean) round or a judged round met the message, and whichever
    consumer did. (A poll that got nothing commits, as an autocommit poller does: it may have
    settled a lost delivery, and a settling transaction that rolls back settles nothing.)"""
    import random

    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    setup.execute("SELECT pgmq.set_retry_policy('jobs', 1000)")
    n = 300
    send_n(setup, "jobs", n)
    conns = [connect(autocommit=False) for _ in range(4)]
    rolled_back: list[Counter] = [Counter() for _ in conns]
    committed: list[dict[int, int]] = [{} for _ in conns]
    barrier = threading.Barrier(len(conns))

    def consumer(i: int) -> None:
        rng = random.Random(i)
        conn = conns[i]
        barrier.wait()
        dry = 0
        while dry < 20:
            rows = conn.execute("SELECT msg_id, read_ct FROM pgmq.pop('jobs', %s)", (rng.choice((1, 2)),)).fetchall()
            if not rows:  # committed: it may have settled a lost delivery (which a rollback undoes)
                conn.commit()
                dry += 1
                continue
            dry = 0
            if rng.random() < 0.33:
                conn.rollback()
                rolled_back[i].update(m for m, _ in rows)
            else:
                conn.commit()
                committed[i].update(dict(rows))

    run_threads([threading.Thread(target=consumer, args=(i,)) for i in range(len(conns))])
    done = [m for c in committed for m in c]
    assert sorted(done) == list(range(1, n + 1))  # each committed once, none lost
    failures = sum(rolled_back, Counter())
    assert sum(failures.values()) > n // 4  # the rollbacks happened
    read_ct = {m: ct for c in committed for m, ct in c.items()}
    assert {m: read_ct[m] for m in failures} == dict(failures)
    assert all(read_ct[m] == 0 for m in read_ct if m not in failures)
    assert scalar(setup, "SELECT count(*) FROM pgmq.q_jobs") == 0
