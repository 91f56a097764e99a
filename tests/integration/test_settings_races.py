"""Several sessions writing a queue's settings row (or its callback's) for the first time at
once: none fails.
queue_settings has two unique indexes (its primary key on the name, and the name lowercased,
2.12.0), and INSERT ... ON CONFLICT treats a conflict only on the index it names as a conflict:
two first writers raced into 23505 on the other one (a send with a first priority or TTL header
failed: seen in CI), and two registrations of a callback looked, found none and both inserted.
Every insert into those tables now takes the queue's configuration lock (a trigger), so a queue
owner writing the rows directly is covered as well as our routines; register_callback takes it
before it looks."""

from __future__ import annotations

import threading

import pytest

from tests.helpers import run_threads, scalar

ROUNDS = 12
WRITERS = 4
FIRST = {
    "priority": "SELECT pgmq.send(%s, '{}', '{\"x-pgmq-priority\": 1}'::jsonb)",
    "ttl": "SELECT pgmq.send(%s, '{}', '{\"x-pgmq-ttl\": 60}'::jsonb)",
    "pause": "SELECT pgmq.pause(%s)",
    "counting": "SELECT pgmq.set_delivery_counting(%s)",
    "ttl setting": "SELECT pgmq.set_message_ttl(%s, 60)",
    "callback": "CALL pgmq.register_callback(%s, 'public.cb(jsonb)')",
    # what row security lets a queue's owner write itself (failed 9 rounds of 30 before 2.15.0)
    "direct settings": "INSERT INTO pgmq.queue_settings (queue_name, dedup_window) VALUES (%s, 60) "
                       "ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE SET dedup_window = 60",
    "direct callback": "INSERT INTO pgmq.callbacks (queue_name, callback, callback_owner) "
                       "VALUES (%s, 'public.cb(jsonb)', current_user) "
                       "ON CONFLICT ON CONSTRAINT callbacks_pkey DO NOTHING",
}
ROWS = {"callback": "SELECT count(*) FROM pgmq.callbacks WHERE queue_name = %s",
        "direct callback": "SELECT count(*) FROM pgmq.callbacks WHERE queue_name = %s"}


@pytest.mark.parametrize("how", sorted(FIRST))
def test_first_writers_of_a_settings_row_at_once(connect, conn, how):
    conn.execute("CREATE PROCEDURE public.cb(m jsonb) LANGUAGE plpgsql AS $$ BEGIN END $$")
    errors: list[BaseException] = []
    sessions = [connect() for _ in range(WRITERS)]
    for r in range(ROUNDS):
        queue = f"race_{r}"
        conn.execute("SELECT pgmq.create(%s)", (queue,))
        start = threading.Barrier(WRITERS)

        def write(c, queue=queue, start=start) -> None:
            start.wait()
            try:
                c.execute(FIRST[how], (queue,))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        run_threads(threading.Thread(target=write, args=(c,)) for c in sessions)
        row = ROWS.get(how, "SELECT count(*) FROM pgmq.queue_settings WHERE queue_name = %s")
        assert scalar(conn, row, (queue,)) == 1
    assert errors == []
