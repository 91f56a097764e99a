"""Streams under load, with several real connections at once: many subscriptions each seeing every
event of concurrent producers once, rotation and retention while a subscriber lags behind, and a
server crash in the middle of batches (a server of its own, stopped with -m immediate)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import psycopg
import pytest

from pgmq_build.cluster import TempCluster
from tests.helpers import column, run_threads, scalar


class Consumer(threading.Thread):
    """Reads one subscription until stopped and the stream has nothing more for it: each batch
    read, recorded (in memory) and acknowledged in one transaction."""

    def __init__(self, connect, stream: str, sub: str, pause: float = 0.0):
        super().__init__(daemon=True)
        self.conn = connect()
        self.stream, self.sub, self.pause = stream, sub, pause
        self.got: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                # noted before the read: a read that began before the producers' last commits
                # may come back empty after they are done; only one that began after stop says
                # there is nothing more
                stopping = self.stop.is_set()
                with self.conn.transaction():
                    rows = self.conn.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read(%s, %s)",
                                             (self.stream, self.sub)).fetchall()
                    if rows:
                        self.conn.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (self.stream, self.sub, rows[0][0]))
                if rows:
                    self.got += [int(n) for _, n in rows]
                    time.sleep(self.pause)
                elif stopping:
                    return
                else:
                    time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def produce(connect, stream: str, numbers: range, batch_every: int = 0) -> None:
    """Send each number as an event {"n": n}, one transaction per call; every `batch_every`th
    call sends the next few numbers with stream_send_batch instead."""
    c = connect()
    ns = list(numbers)
    i = 0
    while i < len(ns):
        if batch_every and i % batch_every == 0:
            chunk = ns[i:i + 5]
            c.execute("SELECT count(*) FROM pgmq.stream_send_batch(%s, ARRAY(SELECT jsonb_build_object('n', x) "
                      "FROM unnest(%s::int[]) x))", (stream, chunk))
            i += len(chunk)
        else:
            c.execute("SELECT pgmq.stream_send(%s, jsonb_build_object('n', %s::int))", (stream, ns[i]))
            i += 1


def finish(consumers: list[Consumer]) -> None:
    for c in consumers:
        c.stop.set()
    for c in consumers:
        c.join(timeout=60)
        assert not c.is_alive() and c.error is None, (c.sub, c.error)


def test_many_subscriptions_each_see_every_event_once_under_concurrent_producers(connect, conn):
    conn.execute("SELECT pgmq.create_stream('ev')")
    subs = [f"s{i}" for i in range(8)]
    for s in subs:
        conn.execute("SELECT pgmq.subscribe('ev', %s)", (s,))
    consumers = [Consumer(connect, "ev", s) for s in subs]
    for c in consumers:
        c.start()
    per, producers = 250, 4
    run_threads([threading.Thread(target=produce, args=(connect, "ev", range(p * per, (p + 1) * per), 7))
                 for p in range(producers)])
    finish(consumers)
    everything = list(range(producers * per))
    for c in consumers:
        assert sorted(c.got) == everything, c.sub  # all, none twice
        # a producer's events come in its order (its commits are ordered)
        for p in range(producers):
            mine = [n for n in c.got if p * per <= n < (p + 1) * per]
            assert mine == sorted(mine), (c.sub, p)
    # stored once, whatever the subscriptions
    assert scalar(conn, "SELECT count(*) FROM pgmq.s_ev") == producers * per


def test_rotation_under_load_keeps_what_a_lagging_subscriber_needs(connect, conn):
    """Segments rotate every second and are dropped as soon as every subscription is past them:
    the lagging subscriber loses nothing and sees nothing twice, the fast one neither, and what
    both have read goes."""
    conn.execute("SELECT pgmq.create_stream('ev', retention => '0', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.subscribe('ev', 'fast'), pgmq.subscribe('ev', 'slow')")
    fast = Consumer(connect, "ev", "fast")
    slow = Consumer(connect, "ev", "slow", pause=0.4)  # reads a batch, then dawdles
    stop_ticking = threading.Event()
    segments_seen: list[int] = []

    def ticker() -> None:  # what pg_cron would do, often
        c = connect()
        while not stop_ticking.wait(0.2):
            c.execute("SELECT pgmq.stream_tick('ev')")
            segments_seen.append(scalar(c, "SELECT count(*) FROM pgmq.stream_segments WHERE stream_name = 'ev'"))

    tick = threading.Thread(target=ticker, daemon=True)
    for t in (fast, slow, tick):
        t.start()
    producers = [threading.Thread(target=produce, args=(connect, "ev", range(p, 3000, 2))) for p in (0, 1)]
    run_threads(producers)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:  # keep rotating while producers are done and slow lags
        time.sleep(0.1)
    slow.pause = 0.0  # let it catch up
    finish([fast, slow])
    time.sleep(1.1)
    stop_ticking.set()
    tick.join()
    assert sorted(fast.got) == list(range(3000)) and sorted(slow.got) == list(range(3000))
    assert max(segments_seen) >= 3  # segments the slow subscriber still needed were kept
    assert scalar(conn, "SELECT current_segment FROM pgmq.streams") >= 3  # rotated under load
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_segments WHERE stream_name = 'ev'") <= 2
    assert scalar(conn, "SELECT sum(lost) FROM pgmq.stream_info('ev')") == 0


# ----------------------------------------------------------------------------- crash

N = 600


def crash_consumer(dsn: str, sub: str, two_step: bool, stop: threading.Event, rng: random.Random) -> None:
    """Records each batch's events into consumed(sub, n) and acknowledges: in one transaction
    (exactly once), or (two_step) reading with a 1 s lease in one transaction and recording and
    acknowledging in the next (at least once: a batch read before a crash comes back after
    its lease, under a new batch_id)."""
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, connect_timeout=3) as c:
                while not stop.is_set():
                    if two_step:
                        rows = c.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read('ev', %s, 1)",
                                         (sub,)).fetchall()
                        c.commit()
                    else:
                        rows = c.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read('ev', %s)",
                                         (sub,)).fetchall()
                    if not rows:
                        c.commit()
                        time.sleep(0.02)
                        continue
                    c.execute("INSERT INTO consumed SELECT %s, unnest(%s::int[])", (sub, [int(n) for _, n in rows]))
                    time.sleep(rng.random() * 0.02)  # work, while the server may go down
                    try:
                        c.execute("SELECT pgmq.stream_ack('ev', %s, %s)", (sub, rows[0][0]))
                    except psycopg.errors.ObjectNotInPrerequisiteState:
                        c.rollback()  # the lease ran out: another read has the batch
                        continue
                    c.commit()
        except psycopg.Error:
            time.sleep(0.05)  # the server went down: reconnect


def crash_producer(dsn: str, stop: threading.Event) -> None:
    """Sends events n = 1..N, each with its n recorded in produced in the same transaction; a
    send whose outcome a crash hid is found there (or not) afterwards."""
    n = 1
    while n <= N and not stop.is_set():
        try:
            with psycopg.connect(dsn, connect_timeout=3) as c:
                while n <= N and not stop.is_set():
                    c.execute("SELECT pgmq.stream_send('ev', jsonb_build_object('n', %s::int))", (n,))
                    c.execute("INSERT INTO produced VALUES (%s)", (n,))
                    c.commit()
                    n += 1
                    time.sleep(0.002)
        except psycopg.Error:
            while not stop.is_set():  # until the server is back: did the last send commit?
                time.sleep(0.05)
                try:
                    with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as c:
                        if c.execute("SELECT 1 FROM produced WHERE n = %s", (n,)).fetchone():
                            n += 1  # it committed before the crash
                    break
                except psycopg.Error:
                    continue


@pytest.mark.slow
def test_a_crash_mid_batch_loses_nothing_and_the_exact_consumer_sees_nothing_twice(capsys):
    with TempCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("CREATE TABLE produced (n int PRIMARY KEY)")
            admin.execute("CREATE TABLE consumed (sub text NOT NULL, n int NOT NULL)")
            admin.execute("SELECT pgmq.create_stream('ev')")
            for sub in ("exact", "leased", "held", "undone"):
                admin.execute("SELECT pgmq.subscribe('ev', %s)", (sub,))
        stop, stop_producer = threading.Event(), threading.Event()
        threads = [threading.Thread(target=crash_producer, args=(dsn, stop_producer), daemon=True)]
        threads += [threading.Thread(target=crash_consumer, args=(dsn, sub, sub == "leased", stop, random.Random(i)),
                                     daemon=True) for i, sub in enumerate(["exact", "exact", "leased"])]
        for t in threads:
            t.start()
        time.sleep(1.0)
        # for certain, besides whatever the consumers are doing: a batch leased (committed) and
        # not acknowledged, and one read and recorded in a transaction that does not commit
        held = psycopg.connect(dsn, autocommit=True)
        held_batch, held_events = held.execute(
            "SELECT min(batch_id), array_agg(ev_id ORDER BY ev_id) FROM pgmq.stream_read('ev', 'held', 1)").fetchone()
        undone = psycopg.connect(dsn)
        undone_rows = undone.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read('ev', 'undone')").fetchall()
        undone.execute("INSERT INTO consumed SELECT 'undone', unnest(%s::int[])", ([int(n) for _, n in undone_rows],))
        cluster.crash_restart()  # pg_ctl stop -m immediate with batches read, recorded, not acknowledged
        threads[0].join(timeout=60)
        with psycopg.connect(dsn, autocommit=True) as admin:
            # the leased batch comes back once its lease is over, under a new id; the old one is void
            time.sleep(1.1)
            again = admin.execute("SELECT batch_id, ev_id FROM pgmq.stream_read('ev', 'held', 30)").fetchall()
            assert held_events and [e for _, e in again][:len(held_events)] == held_events
            assert again[0][0] != held_batch
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
                admin.execute("SELECT pgmq.stream_ack('ev', 'held', %s)", (held_batch,))
            admin.execute("SELECT pgmq.stream_ack('ev', 'held', %s)", (again[0][0],))
            held_got = [e for _, e in again]
            produced = column(admin, "SELECT n FROM produced ORDER BY n")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                lag = scalar(admin, "SELECT coalesce(sum(lag_events), 0) + coalesce(sum(batches_out), 0) "
                                    "FROM pgmq.stream_info('ev') WHERE subscription_name IN ('exact', 'leased')")
                if lag == 0:
                    break
                time.sleep(0.2)
            stop.set()
            for t in threads[1:]:
                t.join(timeout=10)
            for sub, seen in (("held", held_got), ("undone", [])):  # the rest of these two, by hand
                while rows := admin.execute("SELECT batch_id, ev_id, message->>'n' FROM pgmq.stream_read('ev', %s)",
                                            (sub,)).fetchall():
                    admin.execute("SELECT pgmq.stream_ack('ev', %s, %s)", (sub, rows[0][0]))
                    seen += [e for _, e, _ in rows]
                    if sub == "undone":
                        admin.execute("INSERT INTO consumed SELECT 'undone', unnest(%s::int[])",
                                      ([int(n) for _, _, n in rows],))
            got = {sub: Counter(column(admin, "SELECT n FROM consumed WHERE sub = %s", (sub,)))
                   for sub in ("exact", "leased", "undone")}
            all_ids = column(admin, "SELECT ev_id FROM pgmq.s_ev ORDER BY 1")
            events = column(admin, "SELECT (message->>'n')::int FROM pgmq.s_ev ORDER BY 1")
        with capsys.disabled():
            print(f"\nstream crash test: {len(produced)} events committed, exact consumers got "
                  f"{sum(got['exact'].values())}, the leased consumer {sum(got['leased'].values())} "
                  f"({sum(v - 1 for v in got['leased'].values())} redelivered after the crash)")
        for c in (held, undone):
            c.close()
        assert len(produced) > 50 and undone_rows  # the crash came mid-stream, mid-batch
        assert events == produced  # every committed send is in the stream, no other
        assert sorted(got["exact"]) == produced and set(got["exact"].values()) == {1}
        assert sorted(got["leased"]) == produced  # at least once: nothing lost
        # the batch read by the transaction the crash ended came again, once
        assert sorted(got["undone"]) == produced and set(got["undone"].values()) == {1}
        assert sorted(held_got) == all_ids  # the leased batch's events once, after its lease
