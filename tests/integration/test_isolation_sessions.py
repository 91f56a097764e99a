"""A callback's code never shares a privileged session (docs/guides/callbacks-and-worker.md).

A callback runs as its registrant inside its SECURITY DEFINER runner, but what it leaves in the
session outlives the runner: a plain SET (a function's SET clause restores only SET LOCAL),
prepared statements, temporary objects, LISTEN, advisory locks, held cursors, deferred
triggers. Here `mallory`, a queue owner with a schema of its own, registers callbacks that leave
each of these behind, with planted functions that log who ran them and try to make mallory a
superuser, while a superuser dispatches (`CALL pgmq.dispatch()`, `pgmq._dispatch_one`, the
`pgmq-build worker`). Nothing planted may ever run as the superuser; the worker still delivers
mallory's messages, as mallory."""

from __future__ import annotations

import logging
import time

import pytest

from pgmq_build.worker import Worker, dispatch_as, scrub
from tests.helpers import column, notices, raises_sql, scalar
from tests.hostile import evil_body, make_log


@pytest.fixture
def mallory(conn, connect, make_role):
    name = make_role("mallory", login=True)
    conn.execute(f"CREATE SCHEMA mallory AUTHORIZATION {name}")
    m = connect(user=name)
    make_log(m, "mallory")
    m.execute("SELECT pgmq.create('mq')")
    return name, m


def _ran_as(su) -> list[str]:
    return column(su, "SELECT who FROM mallory.log ORDER BY id")


def _assert_nothing_escalated(su, name: str) -> None:
    assert not scalar(su, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (name,))
    assert "postgres" not in _ran_as(su), _ran_as(su)


def _register(m, body: str) -> None:
    m.execute(f"CREATE PROCEDURE mallory.cb(msg jsonb) LANGUAGE plpgsql AS $cb${body}$cb$")
    m.execute("CALL pgmq.register_callback('mq', 'mallory.cb(jsonb)')")


def _plant(m, name: str, args: str, returns: str, value: str) -> None:
    """mallory.<name>(args) RETURNS returns: logs who runs it, tries ALTER ROLE ... SUPERUSER."""
    author = scalar(m, "SELECT current_user")
    m.execute(f"CREATE FUNCTION mallory.{name}({args}) RETURNS {returns} LANGUAGE plpgsql "
              f"AS $f${evil_body(author, 'mallory', value)}$f$")
    m.execute(f"GRANT EXECUTE ON FUNCTION mallory.{name}({args}) TO PUBLIC")


def _worker(dsn: str) -> Worker:
    return Worker(dsn, min_workers=1, max_workers=1, tx_batch=1, naptime_ms=20)


# ------------------------------------------------------------------------- issue 29, vector 1

def test_a_callbacks_plain_set_never_reaches_the_dispatchers_statements(conn, dsn, mallory):
    """The callback's `SET search_path = mallory, pg_catalog` outlives its runner; 2.8.0's
    _dispatch_one then called mallory.pg_backend_pid() in its count, as the dispatcher."""
    name, m = mallory
    _plant(m, "pg_backend_pid", "", "integer", "1")
    _register(m, "BEGIN SET search_path = mallory, pg_catalog; END")
    m.execute("SELECT pgmq.send('mq', '{}') FROM generate_series(1, 3)")
    path = scalar(conn, "SHOW search_path")

    seen = notices(conn)
    conn.execute("CALL pgmq.dispatch()")  # not mallory's session: skipped, and said so
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_mq") == 3
    assert any(f'"mq" (role "{name}")' in text and severity == "NOTICE" for severity, text in seen), seen
    with raises_sql("42501"):
        conn.execute("CALL pgmq.dispatch('mq')")
    with raises_sql("42501"):
        conn.execute("SELECT pgmq._dispatch_one('mq')")
    assert scalar(conn, "SELECT max(read_ct) FROM pgmq.q_mq") == 0  # refused before any claim

    _worker(dsn).run_until_idle(timeout=30)  # a superuser's worker serves mallory's queue
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_mq") == 0
    _assert_nothing_escalated(conn, name)
    assert scalar(conn, "SHOW search_path") == path

    m.execute("SELECT pgmq.send('mq', '{}')")
    m.execute("CALL pgmq.dispatch()")  # in mallory's own session it runs, as mallory
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_mq") == 0
    _assert_nothing_escalated(conn, name)


# ------------------------------------------------------------------------- issue 29, vector 2

REPLACE_PREPARED = """
DECLARE
    p record;
BEGIN
    FOR p IN SELECT s.name, s.parameter_types::text[] AS types FROM pg_prepared_statements s
             WHERE s.name LIKE '\\_pg3\\_%' AND s.statement NOT LIKE '%mallory%' LOOP
        EXECUTE format('DEALLOCATE %I', p.name);
        EXECUTE format('PREPARE %I(%s) AS SELECT mallory.evil_text($1::text)::text',
                       p.name, array_to_string(p.types, ', '));
    END LOOP;
END"""


def test_a_callback_cannot_replace_the_workers_prepared_statements(conn, dsn, mallory):
    """The worker's driver prepares a statement it runs often (_pg3_N); a callback that
    replaces it by name got its function run by the worker's next call, with its rights."""
    name, m = mallory
    _plant(m, "evil_text", "text", "boolean", "true")
    _register(m, REPLACE_PREPARED)
    m.execute("SELECT pgmq.send('mq', '{}') FROM generate_series(1, 30)")
    totals = _worker(dsn).run_until_idle(timeout=60)
    assert totals.done == 30
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_mq") == 0
    _assert_nothing_escalated(conn, name)


# ------------------------------------------------------ code a callback leaves for COMMIT to run

def test_deferred_triggers_and_held_cursors_run_as_the_registrant_not_at_commit(conn, dsn, mallory):
    """A deferred constraint trigger fires, and a held cursor's query runs to the end, at COMMIT,
    as whoever commits: a callback could leave either for the dispatcher's commit."""
    name, m = mallory
    _plant(m, "evil_text", "text", "boolean", "true")
    m.execute("CREATE TABLE mallory.t (i int)")
    m.execute("""CREATE FUNCTION mallory.on_t() RETURNS trigger LANGUAGE plpgsql AS $t$
        BEGIN
            BEGIN RESET ROLE; EXCEPTION WHEN OTHERS THEN NULL; END;  -- the dispatcher's role, if it could
            PERFORM mallory.evil_text('trigger');
            RETURN NULL;
        END $t$""")
    m.execute("CREATE CONSTRAINT TRIGGER late AFTER INSERT ON mallory.t DEFERRABLE INITIALLY DEFERRED "
              "FOR EACH ROW EXECUTE FUNCTION mallory.on_t()")
    _register(m, """BEGIN
        INSERT INTO mallory.t VALUES (1);
        EXECUTE 'DECLARE held CURSOR WITH HOLD FOR SELECT mallory.evil_text(g::text) FROM generate_series(1, 3) g';
    END""")
    m.execute("SELECT pgmq.send('mq', '{}') FROM generate_series(1, 2)")
    totals = _worker(dsn).run_until_idle(timeout=30)
    assert totals.done == 2
    _assert_nothing_escalated(conn, name)
    assert _ran_as(conn) == [name, name]  # each deferred trigger ran, as mallory; the cursors never


# ------------------------------------------------------------------- the scrub, state by state

LEAVE_EVERYTHING = """
BEGIN
    SET search_path = mallory, pg_catalog;
    SET statement_timeout = 1;
    PERFORM set_config('mallory.flag', 'planted', false);
    EXECUTE 'PREPARE planted AS SELECT 1';
    EXECUTE 'DECLARE planted_cursor CURSOR WITH HOLD FOR SELECT 1';
    EXECUTE 'LISTEN planted_channel';
    PERFORM pg_advisory_lock(424242);
    CREATE TEMP TABLE planted_table (i int);
    CREATE FUNCTION pg_temp.planted_fn() RETURNS int LANGUAGE sql AS 'SELECT 1';
END"""


def test_a_session_that_acted_as_a_registrant_is_scrubbed_before_it_serves_anyone(conn, mallory):
    name, m = mallory
    _register(m, LEAVE_EVERYTHING)
    m.execute("SELECT pgmq.send('mq', '{}')")
    login = scalar(conn, "SELECT session_user")
    path = scalar(conn, "SHOW search_path")
    timeout = scalar(conn, "SHOW statement_timeout")
    assert dispatch_as(conn, login, name, "mq", 1)[:3] == (1, 0, False)
    assert scalar(conn, "SELECT current_user") == login
    assert scalar(conn, "SHOW search_path") == path
    assert scalar(conn, "SHOW statement_timeout") == timeout
    assert scalar(conn, "SELECT current_setting('mallory.flag', true)") in (None, "")
    assert scalar(conn, "SELECT count(*) FROM pg_prepared_statements") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_cursors") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_listening_channels()") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND pid = pg_backend_pid()") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = pg_my_temp_schema()") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_mq") == 0  # and the message was delivered


def test_a_session_that_cannot_be_scrubbed_is_closed(connect):
    """A scrub that fails (here: in an aborted transaction) must not hand the session back."""
    c = connect(autocommit=False)
    with raises_sql("22012"):
        c.execute("SELECT 1 / 0")
    with raises_sql("25P02"):
        scrub(c)
    assert c.closed


# ------------------------------------------------------------- issue 30, item 10 (failures)

def test_dispatch_backs_off_a_failing_callback_and_reports_it(conn):
    """2.8.0: `CALL pgmq.dispatch('orders', 100)` ran a failing callback 100 times on one
    message (read_ct 100) and printed only CALL."""
    conn.execute("SELECT pgmq.create('orders')")
    conn.execute("CREATE PROCEDURE public.fails(msg jsonb) LANGUAGE plpgsql AS "
                 "$$ BEGIN RAISE EXCEPTION 'no such order: %', msg->>'order'; END $$")
    conn.execute("CALL pgmq.register_callback('orders', 'public.fails(jsonb)')")
    conn.execute("""SELECT pgmq.send('orders', '{"order": 7}')""")
    seen = notices(conn)
    conn.execute("CALL pgmq.dispatch('orders', 100)")
    assert scalar(conn, "SELECT read_ct FROM pgmq.q_orders") == 1
    assert any("1 of 1 callbacks failed" in text and "orders" in text for _, text in seen), seen
    assert scalar(conn, "SELECT headers->>'x-pgmq-last-error' FROM pgmq.q_orders") == "no such order: 7"
    first = scalar(conn, "SELECT extract(epoch FROM vt - clock_timestamp())::float8 FROM pgmq.q_orders")
    assert 0 < first <= 1.0
    time.sleep(first + 0.05)
    conn.execute("CALL pgmq.dispatch('orders', 100)")
    assert scalar(conn, "SELECT read_ct FROM pgmq.q_orders") == 2
    second = scalar(conn, "SELECT extract(epoch FROM vt - clock_timestamp())::float8 FROM pgmq.q_orders")
    assert 1.0 < second <= 2.0  # doubled


def test_a_nack_without_a_retry_policy_backs_off_with_its_attempts_up_to_five_minutes(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    msg = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    delays = []
    for attempts in (1, 2, 3, 9, 10, 2_000_000_000):
        conn.execute("UPDATE pgmq.q_jobs SET read_ct = %s", (attempts,))
        assert scalar(conn, "SELECT pgmq.nack('jobs', %s, 'boom')", (msg,)) is True
        delays.append(round(scalar(conn, "SELECT extract(epoch FROM vt - clock_timestamp())::float8 FROM pgmq.q_jobs")))
    assert delays == [1, 2, 4, 256, 300, 300]


def test_client_consume_with_a_failing_handler_backs_off_and_logs_rate_limited(conn, dsn, caplog):
    """2.8.0: consume() with no retry policy called a raising handler 3,364 times in 3 s, each
    with a full traceback."""
    import threading

    from pgmq_build.client import Client

    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.send('jobs', '{}')")
    calls = []

    def handler(msg):
        calls.append(msg.msg_id)
        raise ValueError("always")

    stop = threading.Event()
    with Client(dsn) as client:
        t = threading.Thread(target=client.consume, args=("jobs", handler),
                             kwargs={"stop": stop, "poll_interval": 0.05})
        with caplog.at_level(logging.WARNING, logger="pgmq_build.client"):
            t.start()
            time.sleep(3.2)
            stop.set()
            t.join(10)
    assert 2 <= len(calls) <= 3  # at 0 s, 1 s and 3 s
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1, [r.getMessage() for r in caplog.records]


# ----------------------------------------------------------- identity: the procedure approved

def test_a_callback_made_again_by_another_role_is_not_run_in_its_place(conn, connect, make_role, mallory):
    """Registering approves one procedure: one its registrant may run. Dropped and made again
    under the same name by another role (one with CREATE on the schema), it would run that
    role's code with the registrant's rights."""
    mname, m = mallory
    app_name = make_role("app", login=True)
    conn.execute("CREATE SCHEMA shared")
    conn.execute(f"GRANT CREATE, USAGE ON SCHEMA shared TO {app_name}, {mname}")
    app = connect(user=app_name)
    app.execute("SELECT pgmq.create('orders')")
    app.execute("CREATE PROCEDURE shared.handle(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN NULL; END $$")
    app.execute("CALL pgmq.register_callback('orders', 'shared.handle(jsonb)')")
    app.execute("DROP PROCEDURE shared.handle(jsonb)")
    m.execute("CREATE PROCEDURE shared.handle(msg jsonb) LANGUAGE plpgsql AS "
              "$$ BEGIN INSERT INTO mallory.log (who) VALUES (current_user); END $$")
    m.execute("GRANT EXECUTE ON PROCEDURE shared.handle(jsonb) TO PUBLIC")
    app.execute("SELECT pgmq.send('orders', '{}')")
    seen = notices(app)
    app.execute("CALL pgmq.dispatch('orders')")
    assert _ran_as(conn) == []
    assert any("1 of 1 callbacks failed" in text for _, text in seen), seen
    assert "no longer the procedure registered" in scalar(
        conn, "SELECT headers->>'x-pgmq-last-error' FROM pgmq.q_orders")
    # registering it again approves what is there now, by its new owner
    app.execute("CALL pgmq.register_callback('orders', 'shared.handle(jsonb)')")
    assert scalar(conn, "SELECT callback_owner::text FROM pgmq.callbacks") == mname
