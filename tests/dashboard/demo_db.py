"""A demo-like database for the dashboard's tests and its README screenshot: several queues,
messages in flight and delayed, an archive, a paused queue, and dead letters made the way
production makes them (a retry policy, then failed deliveries: nacks and a rolled-back read)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg

from tests.helpers import column, send_n


@dataclass(frozen=True)
class Demo:
    queues: tuple[str, ...] = ("emails", "orders", "payments", "payments_dlq", "reports")
    source: str = "payments"
    dlq: str = "payments_dlq"
    paused: str = "reports"
    dead: int = 5  # dead letters in payments_dlq: 3 nacked, 2 rolled back


def populate(conn: psycopg.Connection) -> Demo:
    """Fill an autocommit connection's database; returns what is where."""
    demo = Demo()
    for q in demo.queues:
        conn.execute("SELECT pgmq.create(%s)", (q,))
    # orders: 24 messages, 4 leased for 5 minutes (in flight), 2 sent with a 10-minute delay.
    send_n(conn, "orders", 24, customer="ada", total=12.5)
    conn.execute("SELECT * FROM pgmq.read('orders', 300, 4)")
    for n in (25, 26):
        conn.execute("SELECT * FROM pgmq.send('orders', %s::jsonb, 600)", (json.dumps({"n": n}),))
    # emails: 9 queued, 5 done and archived.
    ids = send_n(conn, "emails", 14, to="ops@example.com")
    conn.execute("SELECT pgmq.archive('emails', %s::bigint[])", (ids[:5],))
    # payments: one delivery allowed, dead letters to payments_dlq. Three are read and nacked,
    # then two are read in a transaction that rolls back: the next read dead-letters those.
    conn.execute("SELECT pgmq.set_retry_policy(%s, 0, dead_letter_queue => %s)", (demo.source, demo.dlq))
    send_n(conn, demo.source, 8, amount=42)
    for msg_id in column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 3)", (demo.source,)):
        conn.execute("SELECT pgmq.nack(%s, %s, 'card declined')", (demo.source, msg_id))
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT * FROM pgmq.read(%s, 30, 2)", (demo.source,))
    for _ in range(2):  # a read judges (and here dead-letters) the message it meets first
        conn.execute("SELECT * FROM pgmq.read(%s, 30, 1)", (demo.source,))
    conn.execute("SELECT * FROM pgmq.read(%s, 300, 1)", (demo.source,))  # one in flight
    # reports: a few messages, paused.
    send_n(conn, "reports", 3, kind="daily")
    conn.execute("SELECT pgmq.pause('reports')")
    return demo


def streams_and_exchanges(conn: psycopg.Connection) -> None:
    """Stream ev with 3 events (subscription a has not read them, b holds them in a leased
    batch), exchange orders (direct) bound to queue orders with key eu and to stream ev with
    key us."""
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a', 'latest'), "
                 "pgmq.subscribe('ev', 'b', 'latest')")
    for _ in range(3):
        conn.execute("SELECT pgmq.stream_send('ev', '{}')")
    conn.execute("SELECT pgmq.stream_tick('ev')")
    conn.execute("SELECT * FROM pgmq.stream_read('ev', 'b', 100)")
    conn.execute("SELECT pgmq.create_exchange('orders', 'direct')")
    conn.execute("SELECT pgmq.bind_queue('orders', 'orders', 'eu')")
    conn.execute("SELECT pgmq.bind_stream('ev', 'orders', 'us')")
