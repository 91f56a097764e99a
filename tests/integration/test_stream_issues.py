"""SQL issues of streams found from the client side, kept as tests once fixed."""

from __future__ import annotations

from psycopg.types.json import Jsonb


def read(conn, sub: str) -> list[int]:
    rows = conn.execute("SELECT batch_id, (message->>'n')::int FROM pgmq.stream_read('ev', %s)",
                        (sub,)).fetchall()
    if rows:
        conn.execute("SELECT pgmq.stream_ack('ev', %s, %s)", (sub, rows[0][0]))
    return [n for _, n in rows]


def test_a_late_commit_is_delivered_without_waiting_for_another_event(connect, conn):
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a')")
    slow = connect(autocommit=False)
    slow.execute("SELECT pgmq.stream_send('ev', %s)", (Jsonb({"n": 1}),))  # ev_id 1, open
    conn.execute("SELECT pgmq.stream_send('ev', %s)", (Jsonb({"n": 2}),))  # ev_id 2, committed
    assert read(conn, "a") == [2]  # a tick with last_ev_id 2, while event 1 is in flight
    slow.commit()
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert read(conn, "a") == [1]
