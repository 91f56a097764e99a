"""Failure counters (pgmq.queue_counters) written by several sessions at once: none fails and
nothing is lost. Each count adds to any row of its queue, counter and reason that no other
transaction holds (so sessions share rows), else inserts a row of its own transaction (its
slot). A row picked that way may have been updated by a transaction that committed after the
statement's snapshot: the update then changes nothing, and a transaction that had already
inserted its own row inserted it again: 23505 on queue_counters_pkey (seen in CI from pop's
dead-lettering, test_delivery.py's competing consumers of a TTL queue)."""

from __future__ import annotations

import threading

from tests.helpers import run_threads, scalar

SESSIONS = 8
TRANSACTIONS = 200
PER_TRANSACTION = 3  # counts in one transaction, each its own statement


def test_counts_from_several_sessions_at_once_all_land(connect, conn):
    conn.execute("SELECT pgmq.create('jobs')")
    total = SESSIONS * TRANSACTIONS * PER_TRANSACTION
    conn.execute("SELECT pgmq.send_batch('jobs', array_agg('{}'::jsonb)) FROM generate_series(1, %s)", (total,))
    sessions = [connect() for _ in range(SESSIONS)]
    start = threading.Barrier(SESSIONS)
    errors: list[BaseException] = []

    def nack_own(i: int) -> None:
        c = sessions[i]
        c.autocommit = False
        start.wait()
        try:
            for t in range(TRANSACTIONS):
                first = (i * TRANSACTIONS + t) * PER_TRANSACTION + 1
                for msg_id in range(first, first + PER_TRANSACTION):
                    assert c.execute("SELECT pgmq.nack('jobs', %s)", (msg_id,)).fetchone()[0] is True
                c.commit()
        except BaseException as exc:  # noqa: BLE001 (reported below, with the others)
            errors.append(exc)

    run_threads([threading.Thread(target=nack_own, args=(i,)) for i in range(SESSIONS)])
    assert errors == []
    assert scalar(conn, "SELECT sum(n) FROM pgmq.queue_counters "
                        "WHERE queue_name = 'jobs' AND counter = 'nacked'") == total
