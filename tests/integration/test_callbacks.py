"""Callbacks and dispatch: push consumption, one transaction per message, retries on failure."""

from __future__ import annotations

import threading

import pytest

from tests.helpers import column, raises_sql, run_threads, scalar, send_n

HANDLER = """
CREATE TABLE public.handled (n int NOT NULL, attempt_ok boolean);
CREATE PROCEDURE public.handle(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.handled (n) VALUES ((msg->>'n')::int);
    IF msg ? 'fail' THEN
        RAISE EXCEPTION 'handler failed for %', msg->>'n';
    END IF;
END $$;
CREATE FUNCTION public.not_a_proc(msg jsonb) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE public.wrong_args(a int) LANGUAGE sql AS '';
"""


@pytest.fixture
def cb(conn):
    conn.execute(HANDLER)
    conn.execute("CALL pgmq.create_queue('dead')")
    conn.execute("CALL pgmq.create_queue('work', 'N', 'dead', 2, 0)")
    conn.execute("CALL pgmq.register_callback('work', 'public.handle(jsonb)')")
    return conn


def test_register_validation(conn):
    conn.execute(HANDLER)
    conn.execute("SELECT pgmq.create('q')")
    with raises_sql("42P01"):
        conn.execute("CALL pgmq.register_callback('ghost', 'public.handle(jsonb)')")
    with raises_sql("42883"):
        conn.execute("CALL pgmq.register_callback('q', 'public.nope(jsonb)')")
    with raises_sql("42809"):
        conn.execute("CALL pgmq.register_callback('q', 'public.not_a_proc(jsonb)')")
    with raises_sql("42804"):
        conn.execute("CALL pgmq.register_callback('q', 'public.wrong_args(int)')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.callbacks") == 0


def test_one_callback_per_queue_idempotent_and_unregister(cb):
    cb.execute("CALL pgmq.register_callback('work', 'handle(jsonb)')")  # same one again: fine
    cb.execute("CREATE PROCEDURE public.other(m jsonb) LANGUAGE sql AS ''")
    with raises_sql("42710"):
        cb.execute("CALL pgmq.register_callback('work', 'public.other(jsonb)')")
    assert cb.execute("SELECT queue_name, callback FROM pgmq.list_callbacks()").fetchall() == [
        ("work", "public.handle(jsonb)")]
    with raises_sql("42704"):
        cb.execute("CALL pgmq.unregister_callback('work', 'public.other(jsonb)')")
    cb.execute("CALL pgmq.unregister_callback('work', 'public.handle(jsonb)')")
    assert scalar(cb, "SELECT count(*) FROM pgmq.callbacks") == 0


def test_callback_runs_with_the_registrants_search_path(conn):
    conn.execute("CREATE SCHEMA app")
    conn.execute("CREATE TABLE app.seen (n int)")
    conn.execute("SET search_path = app, public")
    conn.execute("CREATE PROCEDURE app.keep(msg jsonb) LANGUAGE sql AS $$ INSERT INTO seen VALUES ((msg->>'n')::int) $$")
    conn.execute("SELECT pgmq.create('q')")
    conn.execute("CALL pgmq.register_callback('q', 'keep(jsonb)')")  # unqualified, as pgpro_queue's docs
    conn.execute("RESET search_path")
    conn.execute("SELECT pgmq.send('q', '{\"n\": 7}')")
    conn.execute("CALL pgmq.dispatch('q')")
    assert column(conn, "SELECT n FROM app.seen") == [7]


def test_drop_queue_unregisters(cb):
    cb.execute("SELECT pgmq.drop_queue('work')")
    assert scalar(cb, "SELECT count(*) FROM pgmq.callbacks") == 0


def test_dispatch_runs_each_message_once(cb):
    send_n(cb, "work", 25)
    cb.execute("CALL pgmq.dispatch('work', 10)")
    assert scalar(cb, "SELECT count(*) FROM public.handled") == 10
    cb.execute("CALL pgmq.dispatch()")
    assert sorted(column(cb, "SELECT n FROM public.handled")) == list(range(1, 26))
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_work") == 0


def test_failing_callback_retries_then_dead_letters_without_blocking_others(cb):
    cb.execute("SELECT pgmq.send('work', '{\"n\": 1, \"fail\": true}')")
    send_n(cb, "work", 2, start=2)
    cb.execute("CALL pgmq.dispatch('work', 100)")
    # the good ones ran once each; the bad one ran 1 + 2 retries and its side effects rolled back
    assert sorted(column(cb, "SELECT n FROM public.handled")) == [2, 3]
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_work") == 0
    headers = scalar(cb, "SELECT headers FROM pgmq.q_dead")
    record = headers["x-pgmq-dead-letter"]
    assert record["reason"] == "callback" and record["attempts"] == 3
    assert record["last_error"] == "handler failed for 1"


def test_dispatch_validation(cb):
    with raises_sql("22023"):
        cb.execute("CALL pgmq.dispatch('work', 0)")
    cb.execute("SELECT pgmq.create('plain')")
    with raises_sql("42704"):
        cb.execute("CALL pgmq.dispatch('plain')")


def test_concurrent_dispatchers_run_each_message_exactly_once(cb, connect):
    send_n(cb, "work", 200)
    workers = [connect() for _ in range(4)]
    run_threads([threading.Thread(target=w.execute, args=("CALL pgmq.dispatch('work', 1000)",)) for w in workers])
    assert sorted(column(cb, "SELECT n FROM public.handled")) == list(range(1, 201))


def test_killed_dispatcher_loses_nothing(cb, connect):
    cb.execute("CREATE OR REPLACE PROCEDURE public.slow(msg jsonb) LANGUAGE plpgsql AS $$ "
               "BEGIN PERFORM pg_sleep(30); END $$")
    cb.execute("CALL pgmq.unregister_callback('work', 'public.handle(jsonb)')")
    cb.execute("CALL pgmq.register_callback('work', 'public.slow(jsonb)')")
    send_n(cb, "work", 1)
    victim = connect()
    t = threading.Thread(target=lambda: _swallow(victim.execute, "CALL pgmq.dispatch('work', 1)"))
    t.start()
    for _ in range(100):
        if scalar(cb, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL pgmq.dispatch%%' "
                      "AND wait_event = 'PgSleep'"):
            break
        threading.Event().wait(0.05)
    cb.execute("SELECT pg_terminate_backend(%s, 5000)", (victim.info.backend_pid,))
    t.join()
    cb.execute("CALL pgmq.unregister_callback('work', 'public.slow(jsonb)')")
    cb.execute("CALL pgmq.register_callback('work', 'public.handle(jsonb)')")
    cb.execute("CALL pgmq.dispatch('work')")  # records the killed attempt, delivers nothing
    assert scalar(cb, "SELECT read_ct FROM pgmq.q_work") == 1
    cb.execute("CALL pgmq.dispatch('work')")
    assert column(cb, "SELECT n FROM public.handled") == [1]


def _swallow(fn, *args):
    try:
        fn(*args)
    except Exception:  # the backend is killed on purpose
        pass
