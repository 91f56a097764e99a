"""Stress: pop, read, read_message and dispatch consumers on one queue with a retry policy,
failing by rollback, savepoint rollback, pg_terminate_backend and one immediate server restart.
Every message must end in exactly one place (consumed, still queued, archived or dead-lettered)
and none may be handed out more than 1 + max_retries times.

Deliveries are counted by the clients, outside the transactions that may roll back: each
consumer counts a message as soon as a call hands it out; the dispatch callback says so with a
NOTICE, which reaches the dispatching client even when the callback then fails."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import psycopg
import pytest

from pgmq_build.cluster import TempCluster
from tests.helpers import (
    lost_and_twice,
    message_places,
    send_n,
    terminate_clients,
    wait_until_empty,
)

N = 150
MAX_RETRIES = 2
FAIL = 0.5  # chance that a consumer's handling fails


DELIVERED: Counter[int] = Counter()
HOW: dict[int, list[str]] = {}
_LOCK = threading.Lock()
_KIND = threading.local()


def seen(n: int) -> None:
    with _LOCK:
        DELIVERED[n] += 1
        HOW.setdefault(n, []).append(getattr(_KIND, "name", "?"))


def handle(c: psycopg.Connection, rng: random.Random, n: int) -> bool:
    """Record the delivery and the consumption; False: the handler failed."""
    seen(n)
    c.execute("INSERT INTO consumed (n) VALUES (%s)", (n,))
    return rng.random() >= FAIL


def consume_pop(c, rng):
    with c.transaction() as tx:
        row = c.execute("SELECT message->>'n' FROM pgmq.pop('work')").fetchone()
        if row and not handle(c, rng, int(row[0])):
            raise psycopg.Rollback(tx)


def consume_read_message(c, rng):
    with c.transaction():
        with c.transaction() as sp:  # failures roll back a savepoint only
            msg = c.execute("SELECT pgmq.read_message('work')").fetchone()[0]
            if msg is not None and not handle(c, rng, int(msg["n"])):
                raise psycopg.Rollback(sp)


def consume_read(c, rng):
    # lease (committed), then acknowledge in a transaction that may roll back; or lease and
    # handle in one transaction that may roll back
    if rng.random() < 0.5:
        with c.transaction():
            row = c.execute("SELECT msg_id, message->>'n' FROM pgmq.read('work', 1, 1)").fetchone()
        if row:
            with c.transaction() as tx:
                if not handle(c, rng, int(row[1])):
                    raise psycopg.Rollback(tx)  # the lease runs out: a failure
                c.execute("SELECT pgmq.delete('work', %s::bigint)", (row[0],))
    else:
        with c.transaction() as tx:
            row = c.execute("SELECT msg_id, message->>'n' FROM pgmq.read('work', 30, 1)").fetchone()
            if row:
                if not handle(c, rng, int(row[1])):
                    raise psycopg.Rollback(tx)
                c.execute("SELECT pgmq.delete('work', %s::bigint)", (row[0],))


def consume_dispatch(c, rng):
    c.execute("CALL pgmq.dispatch('work', 5)")


CONSUMERS = [consume_pop, consume_read_message, consume_read, consume_dispatch]


def run(dsn: str, consume, stop: threading.Event, rng: random.Random) -> None:
    _KIND.name = consume.__name__
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as c:
                c.add_notice_handler(lambda d: d.message_primary.startswith("delivered ")
                                     and seen(int(d.message_primary.split()[1])))
                while not stop.is_set():
                    consume(c, rng)
                    time.sleep(0.002)
        except (psycopg.Error, psycopg.Rollback):
            # killed, crashed, or a serialization hiccup: reconnect. (A Rollback a consumer raised
            # in a transaction whose connection was killed meanwhile comes out of the block:
            # psycopg does not swallow it on a broken connection. CI: a consumer thread died so.)
            time.sleep(0.05)


@pytest.mark.slow
def test_mixed_consumers_count_every_failure_once(capsys):
    with TempCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("CREATE TABLE consumed (n int NOT NULL)")
            # the callback fails half of the time, after recording its delivery
            admin.execute("""
                CREATE PROCEDURE handle_work(m jsonb) LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE NOTICE 'delivered %', m->>'n';
                    INSERT INTO consumed (n) VALUES ((m->>'n')::int);
                    IF random() < 0.5 THEN RAISE EXCEPTION 'handler failed'; END IF;
                END $$""")
            admin.execute("SELECT pgmq.create('work')")
            admin.execute("SELECT pgmq.create('dead')")
            admin.execute("SELECT pgmq.set_retry_policy('work', %s, 0, 1, NULL, 'dead')", (MAX_RETRIES,))
            admin.execute("CALL pgmq.register_callback('work', 'public.handle_work(jsonb)')")
            send_n(admin, "work", N)
        stop = threading.Event()
        threads = [threading.Thread(target=run, args=(dsn, consume, stop, random.Random(i)), daemon=True)
                   for i, consume in enumerate(CONSUMERS * 2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        killed = terminate_clients(dsn)  # kill consumers mid-transaction
        time.sleep(1.0)
        cluster.crash_restart()  # immediate stop with deliveries in flight
        with psycopg.connect(dsn, autocommit=True) as admin:
            wait_until_empty(admin, "work", 90)
            stop.set()
            for t in threads:
                t.join(timeout=10)
            consumed, places = message_places(admin, "work", "dead")
            delivered = dict(DELIVERED)
            attempts = [r for (r,) in admin.execute(
                "SELECT (headers->'x-pgmq-dead-letter'->>'attempts')::int FROM pgmq.q_dead")]
        lost, twice = lost_and_twice(N, consumed, places)
        too_often = {n: k for n, k in delivered.items() if k > 1 + MAX_RETRIES}
        with capsys.disabled():
            print(f"\ndelivery stress: {N} messages, {killed} backends killed, server crashed once: "
                  f"{sum(delivered.values())} deliveries, consumed {sum(consumed.values())}, "
                  f"queued {len(places['queue'])}, archived {len(places['archive'])}, "
                  f"dead-lettered {len(places['dead letters'])} (attempts {sorted(Counter(attempts).items())}); "
                  f"lost {len(lost)}, in two places {len(twice)}, over-delivered {len(too_often)}")
        assert lost == [] and twice == []
        assert too_often == {}, {n: HOW[n] for n in too_often}
        assert places["queue"] == []
        assert places["dead letters"] and all(a <= 1 + MAX_RETRIES for a in attempts)
