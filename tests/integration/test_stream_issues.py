"""SQL issues of streams found from the client side (reported, not fixed here: the SQL belongs to
the streams SQL work). Each test is a strict xfail: it starts passing, and fails the suite, once
the SQL is fixed, so that the mark is removed then."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb


def read(conn, sub: str) -> list[int]:
    rows = conn.execute("SELECT batch_id, (message->>'n')::int FROM pgmq.stream_read('ev', %s)",
                        (sub,)).fetchall()
    if rows:
        conn.execute("SELECT pgmq.stream_ack('ev', %s, %s)", (sub, rows[0][0]))
    return [n for _, n in rows]


@pytest.mark.xfail(strict=True, reason="SQL issue: a new tick is made only when the ev_id sequence "
                   "moved past the last tick's last_ev_id, so an event whose id was drawn before the "
                   "last tick and which committed after it waits for the next event sent to the "
                   "stream (forever on a quiet stream)")
def test_a_late_commit_is_delivered_without_waiting_for_another_event(connect, conn):
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a')")
    slow = connect(autocommit=False)
    slow.execute("SELECT pgmq.stream_send('ev', %s)", (Jsonb({"n": 1}),))  # ev_id 1, open
    conn.execute("SELECT pgmq.stream_send('ev', %s)", (Jsonb({"n": 2}),))  # ev_id 2, committed
    assert read(conn, "a") == [2]  # a tick with last_ev_id 2, while event 1 is in flight
    slow.commit()
    conn.execute("SELECT pgmq.stream_tick('ev')")  # pg_cron's call does not tick either today
    assert read(conn, "a") == [1]  # today: [] (and stream_info says lag_events 0)
