"""Crash test: consumers in flight while backends are killed and the server crashes.

Every message must end up exactly once in the queue, the consumed log (written in the same
transaction as the read), the archive or the dead-letter queue: zero lost, zero delivered twice.
"""

from __future__ import annotations

import random
import threading
import time

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

N = 400


def consumer(dsn: str, stop: threading.Event, rng: random.Random) -> None:
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, connect_timeout=3) as c:
                while not stop.is_set():
                    msg = c.execute("SELECT pgmq.read_message('work')").fetchone()[0]
                    if msg is None:
                        c.commit()
                        time.sleep(0.01)
                        continue
                    c.execute("INSERT INTO consumed (n) VALUES (%s)", (msg["n"],))
                    time.sleep(rng.random() * 0.01)
                    if rng.random() < 0.3:
                        c.rollback()  # a failed handler: the message comes back, counted
                    else:
                        c.commit()
        except psycopg.Error:
            time.sleep(0.05)  # killed or crashed: reconnect


@pytest.mark.slow
def test_crash_loses_nothing_and_delivers_nothing_twice(capsys):
    with TempCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("CREATE TABLE consumed (n int NOT NULL)")
            admin.execute("CALL pgmq.create_queue('dead')")
            admin.execute("CALL pgmq.create_queue('work', 'N', 'dead', 3, 0)")
            send_n(admin, "work", N)
        stop = threading.Event()
        threads = [threading.Thread(target=consumer, args=(dsn, stop, random.Random(i)), daemon=True)
                   for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.7)
        killed = terminate_clients(dsn)  # kill the consumers mid-transaction
        time.sleep(0.5)
        cluster.crash_restart()  # pg_ctl stop -m immediate with reads in flight
        with psycopg.connect(dsn, autocommit=True) as admin:
            wait_until_empty(admin, "work", 60)
            stop.set()
            for t in threads:
                t.join(timeout=10)
            consumed, places = message_places(admin, "work", "dead")
        lost, twice = lost_and_twice(N, consumed, places)
        with capsys.disabled():
            print(f"\ncrash test: {N} messages, {killed} backends killed, server crashed once: "
                  f"consumed {sum(consumed.values())}, in queue {len(places['queue'])}, "
                  f"archived {len(places['archive'])}, dead-lettered {len(places['dead letters'])}; "
                  f"lost {len(lost)}, delivered twice {len(twice)}")
        assert lost == [] and twice == []
        assert sum(consumed.values()) > 0
