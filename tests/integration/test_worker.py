"""The callback worker (pgmq_build.worker, `pgmq-build worker`): every committed message's
callback commits exactly once, across several dispatchers, signals, SIGKILL and server restarts."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from pgmq_build.cli import main
from pgmq_build.cluster import TempCluster
from pgmq_build.worker import Worker
from tests.helpers import column, scalar, send_n, wait_for

REPO = Path(__file__).resolve().parents[2]

# The callback records each committed run and its (top-level) transaction; {"fail": true}
# raises (its insert is rolled back), {"sleep": s} makes it slow, {"gate": k} waits for advisory
# lock k (a test holding it keeps the callback, and its batch, in flight).
SETUP = """
CREATE TABLE public.handled (n int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
                             xid xid8 NOT NULL DEFAULT pg_current_xact_id());
CREATE PROCEDURE public.handle(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    IF msg ? 'sleep' THEN
        PERFORM pg_sleep((msg->>'sleep')::float8);
    END IF;
    IF msg ? 'gate' THEN
        PERFORM pg_advisory_xact_lock_shared((msg->>'gate')::bigint);
    END IF;
    INSERT INTO public.handled (n) VALUES ((msg->>'n')::int);
    IF msg ? 'fail' THEN
        RAISE EXCEPTION 'handler failed for %', msg->>'n';
    END IF;
END $$;
CALL pgmq.create_queue('dead');
"""


def setup_db(conn: psycopg.Connection, retries: int | None = 2, delay: int = 0) -> None:
    conn.execute(SETUP)
    if retries is None:
        conn.execute("SELECT pgmq.create('work')")
    else:
        conn.execute("CALL pgmq.create_queue('work', 'N', 'dead', %s, %s)", (retries, delay))
    conn.execute("CALL pgmq.register_callback('work', 'public.handle(jsonb)')")


@pytest.fixture
def cb(conn: psycopg.Connection) -> psycopg.Connection:
    setup_db(conn)
    return conn


def assert_exactly_once(conn: psycopg.Connection, expected: set[int]) -> None:
    dupes = conn.execute("SELECT n, count(*) FROM public.handled GROUP BY n HAVING count(*) > 1").fetchall()
    assert dupes == [], f"callbacks committed twice: {dupes}"
    assert set(column(conn, "SELECT n FROM public.handled")) == expected


def in_flight(conn: psycopg.Connection) -> int:
    return scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%_dispatch_one%%' "
                        "AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()")


class Events(logging.Handler):
    """Collects (event, fields) from a Worker's logger."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), dict(getattr(record, "fields", {}))))

    def names(self) -> list[str]:
        return [e for e, _ in self.seen]


@pytest.fixture
def events(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, Events]]:
    logger = logging.getLogger(f"test_worker.{request.node.name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = Events()
    logger.addHandler(handler)
    yield logger, handler
    logger.removeHandler(handler)


def spawn(dsn: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "pgmq_build", "worker", "--dsn", dsn, *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def json_lines(stderr: str) -> list[dict]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    for d in lines:
        assert {"ts", "level", "event"} <= d.keys()
    return lines


# -- tests ---------------------------------------------------------------------------------


def test_each_message_runs_once_with_several_workers(cb, dsn, events):
    logger, ev = events
    send_n(cb, "work", 150)
    with Worker(dsn, min_workers=4, max_workers=4, naptime_ms=50, batch=7, logger=logger) as w:
        for start in range(151, 301, 30):  # more arrive while it runs, one transaction each
            send_n(cb, "work", 30, start=start)
        wait_for(lambda: scalar(cb, "SELECT count(*) FROM public.handled") >= 300, what="300 callbacks")
        wait_for(lambda: w.totals.done == 300, what="totals")
        assert w.workers == 4
    assert_exactly_once(cb, set(range(1, 301)))
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_work") == 0
    assert w.totals.done == 300 and w.totals.failed == 0
    assert ("notify_enabled", {"queue": "work", "throttle_ms": 0}) in ev.seen
    assert scalar(cb, "SELECT throttle_interval_ms FROM pgmq.list_notify_insert_throttles() "
                      "WHERE queue_name = 'work'") == 0
    assert len({f["worker"] for e, f in ev.seen if e == "dispatched"}) > 1
    assert ev.names()[-1] == "summary" and ev.seen[-1][1]["done"] == 300


def test_notification_wakes_an_idle_worker_before_its_naptime(cb, dsn):
    with Worker(dsn, min_workers=1, max_workers=1, naptime_ms=10_000) as w:
        wait_for(lambda: scalar(cb, "SELECT count(*) FROM pgmq.list_notify_insert_throttles()") == 1,
                 what="notifications enabled")
        time.sleep(0.3)  # past the first poll: from now on only a notification wakes it
        sent = time.monotonic()
        send_n(cb, "work", 1)
        wait_for(lambda: w.totals.done == 1, timeout=3, what="the callback")
        assert time.monotonic() - sent < 1.0  # the next poll would be 10 s away


def test_new_registrations_are_picked_up(cb, dsn, events):
    logger, ev = events
    with Worker(dsn, min_workers=1, refresh_interval=0.2, logger=logger) as w:
        assert w.queues == ["work"]
        cb.execute("SELECT pgmq.create('late')")
        cb.execute("CALL pgmq.register_callback('late', 'public.handle(jsonb)')")
        send_n(cb, "late", 3)
        wait_for(lambda: w.totals.done == 3, what="the late queue's messages")
    assert ("queues", {"queues": ["late", "work"], "added": ["late"], "removed": []}) in ev.seen


def test_failures_retry_after_the_policy_delay_then_dead_letter(conn, dsn):
    setup_db(conn, retries=2, delay=1)
    conn.execute("""SELECT pgmq.send('work', '{"n": 1, "fail": true}')""")
    send_n(conn, "work", 2, start=2)
    began = time.monotonic()
    with Worker(dsn, min_workers=2, naptime_ms=50) as w:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pgmq.q_dead") == 1, what="the dead letter")
        elapsed = time.monotonic() - began
    assert elapsed >= 2.0  # attempts at ~0 s, ~1 s, ~2 s
    assert w.totals.failed == 3 and w.totals.done == 2
    assert_exactly_once(conn, {2, 3})  # the failing callback's inserts were rolled back
    dl = scalar(conn, "SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_dead")
    assert dl["reason"] == "callback" and dl["attempts"] == 3 and dl["last_error"] == "handler failed for 1"
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0


def test_once_exits_zero_when_drained(cb, dsn):
    send_n(cb, "work", 40)
    cb.execute("""SELECT pgmq.send('work', '{"n": 0, "fail": true}')""")
    proc = spawn(dsn, "--once", "--min-workers", "2", "--batch", "10")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = json_lines(err)
    assert lines[-1]["event"] == "summary"
    assert (lines[-1]["done"], lines[-1]["failed"], lines[-1]["errors"]) == (40, 3, 0)
    assert_exactly_once(cb, set(range(1, 41)))
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_work") == 0
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_dead") == 1


def test_once_reports_errors_with_status_1(cb, dsn):
    cb.execute("SELECT pgmq.create('nocb')")
    proc = spawn(dsn, "--once", "--queue", "nocb", "--log-format", "text")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert " no_callback queue=nocb" in err and " dispatch_error " in err and "sqlstate=42704" in err


def test_sigterm_lets_in_flight_callbacks_finish_and_exits_zero(cb, dsn):
    send_n(cb, "work", 6, sleep=1)
    proc = spawn(dsn, "--min-workers", "2", "--max-workers", "2")
    try:
        wait_for(lambda: in_flight(cb) == 2, what="two callbacks in flight")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert time.monotonic() - signalled < 3.0
    events = [d["event"] for d in json_lines(err)]
    assert "stopping" in events and events[-1] == "summary"
    handled = column(cb, "SELECT n FROM public.handled")
    assert len(handled) >= 2  # the in-flight ones completed...
    # ...and nothing was interrupted: the rest were never attempted
    left = cb.execute("SELECT (message->>'n')::int, read_ct FROM pgmq.q_work").fetchall()
    assert sorted(handled + [n for n, _ in left]) == list(range(1, 7))
    assert all(read_ct == 0 for _, read_ct in left)
    assert json_lines(err)[-1]["done"] == len(handled)


def test_sigkill_mid_callback_loses_nothing(cb, dsn):
    send_n(cb, "work", 12, sleep=0.3)
    # the server notices the dead client within 100 ms and rolls the in-flight callbacks back
    proc = spawn(f"{dsn} options='-c client_connection_check_interval=100'", "--min-workers", "3")
    try:
        wait_for(lambda: scalar(cb, "SELECT count(*) FROM public.handled") >= 3 and in_flight(cb) >= 2,
                 what="callbacks done and in flight")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        proc.kill()
    wait_for(lambda: scalar(cb, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%_dispatch_one%%' "
                                "AND state = 'active' AND pid <> pg_backend_pid()") == 0,
             what="the orphaned backends to end")
    attempted = scalar(cb, "SELECT count(*) FROM pgmq.q_work WHERE xmax <> 0")
    assert attempted >= 1  # messages whose callback was cut short, waiting to be counted
    totals = Worker(dsn, min_workers=3).run_until_idle(timeout=30)
    assert totals.errors == 0
    assert_exactly_once(cb, set(range(1, 13)))
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_work") == 0
    assert scalar(cb, "SELECT count(*) FROM pgmq.q_dead") == 0


@pytest.mark.slow
def test_server_restart_worker_reconnects_and_finishes(pg_cluster, events):
    # our own server: restarting the session's would disturb the other tests
    logger, ev = events
    with TempCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            setup_db(admin, retries=None)
            send_n(admin, "work", 60, sleep=0.05)
        w = Worker(dsn, min_workers=2, naptime_ms=100, max_backoff=0.5, logger=logger).start()
        try:
            with psycopg.connect(dsn, autocommit=True) as admin:
                wait_for(lambda: scalar(admin, "SELECT count(*) FROM public.handled") >= 10, what="progress")
            cluster.pg_ctl("restart")
            with psycopg.connect(dsn, autocommit=True) as admin:
                send_n(admin, "work", 20, start=61)  # after the restart: found through the new LISTEN
                wait_for(lambda: scalar(admin, "SELECT count(*) FROM pgmq.q_work") == 0, timeout=30,
                         what="the queue to drain")
                w.stop()
                assert_exactly_once(admin, set(range(1, 81)))
        finally:
            w.stop()
    names = ev.names()
    assert "disconnected" in names and "reconnected" in names
    listener = [f for e, f in ev.seen if e == "reconnected" and f["worker"] == "listener"]
    assert listener, "the listener reconnected too"
    assert w.totals.reconnects >= 3 and w.totals.done >= 80


def test_pool_scales_up_when_busy_and_back_down_when_idle(cb, dsn, events):
    logger, ev = events
    send_n(cb, "work", 16, sleep=0.25)
    with Worker(dsn, min_workers=1, max_workers=3, start_delay=0.3, idle_timeout=0.8,
                naptime_ms=50, logger=logger) as w:
        wait_for(lambda: w.workers == 3, what="the pool to grow to 3")
        wait_for(lambda: w.totals.done == 16, what="the work")
        wait_for(lambda: w.workers == 1, timeout=5, what="the pool to shrink to 1")
        time.sleep(0.3)
        assert w.peak_workers == 3 and w.workers == 1
    assert_exactly_once(cb, set(range(1, 17)))
    ups = [f["workers"] for e, f in ev.seen if e == "scale_up"]
    downs = [f["workers"] for e, f in ev.seen if e == "scale_down"]
    assert ups == [2, 3] and downs == [2, 1]


def test_cli_validates_options():
    runner = CliRunner()
    result = runner.invoke(main, ["worker", "--dsn", "dbname=x", "--min-workers", "4", "--max-workers", "2"])
    assert result.exit_code == 2 and "--max-workers" in result.output
    result = runner.invoke(main, ["worker", "--dsn", "dbname=x", "--log-format", "xml"])
    assert result.exit_code == 2
    with pytest.raises(ValueError):
        Worker("x", min_workers=0)


# -- several messages per transaction (tx_batch) -------------------------------------------

def send_marked(conn: psycopg.Connection, n: int, marks: dict[int, dict]) -> None:
    """Messages {"n": 1} ... {"n": n} to queue work (one send_batch), message i with marks[i]
    merged in."""
    conn.execute("SELECT pgmq.send_batch('work', (SELECT array_agg(jsonb_build_object('n', g) "
                 "|| coalesce(%s::jsonb -> g::text, '{}') ORDER BY g) FROM generate_series(1, %s) g))",
                 (json.dumps({str(k): v for k, v in marks.items()}), n))


def per_transaction(conn: psycopg.Connection) -> list[int]:
    """How many committed callbacks each transaction ran, largest first."""
    return column(conn, "SELECT count(*) FROM public.handled GROUP BY xid ORDER BY 1 DESC")


def test_batches_share_transactions_and_a_failing_callback_fails_alone(conn, dsn):
    setup_db(conn, retries=2, delay=0)
    fails = {7, 50, 51, 120}
    send_marked(conn, 200, {i: {"fail": True} for i in fails})
    totals = Worker(dsn, min_workers=2, max_workers=2, tx_batch=20).run_until_idle(timeout=60)
    ok = set(range(1, 201)) - fails
    assert_exactly_once(conn, ok)  # the failing callbacks' batch-mates committed, once each
    assert (totals.done, totals.failed, totals.errors) == (len(ok), 3 * len(fails), 0)
    sizes = per_transaction(conn)
    assert sizes[0] <= 20  # tx_batch bounds a transaction
    assert len(sizes) < len(ok) / 4  # most callbacks shared their transaction with others
    dead = conn.execute("SELECT (message->>'n')::int, headers->'x-pgmq-dead-letter' FROM pgmq.q_dead "
                        "ORDER BY 1").fetchall()
    assert [n for n, _ in dead] == sorted(fails)
    assert all(d["reason"] == "callback" and d["attempts"] == 3 for _, d in dead)
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0


def test_tx_batch_1_commits_each_message(cb, dsn, events):
    logger, ev = events
    send_n(cb, "work", 60)
    totals = Worker(dsn, min_workers=2, tx_batch=1, logger=logger).run_until_idle(timeout=30)
    assert totals.done == 60
    assert_exactly_once(cb, set(range(1, 61)))
    assert per_transaction(cb) == [1] * 60
    assert next(f for e, f in ev.seen if e == "started")["tx_batch"] == 1


def test_stop_commits_the_batch_in_flight_and_the_totals_match(cb, dsn):
    send_n(cb, "work", 6000)
    w = Worker(dsn).start()
    try:
        wait_for(lambda: w.totals.done >= 300, what="progress")
    finally:
        asked = time.monotonic()
        totals = w.stop()
    assert time.monotonic() - asked < 2.0
    handled = column(cb, "SELECT n FROM public.handled")
    left = column(cb, "SELECT (message->>'n')::int FROM pgmq.q_work")
    assert totals.done == len(handled) and totals.failed == totals.errors == 0  # commits only
    assert left, "stopped before the queue drained"
    assert sorted(handled + left) == list(range(1, 6001))  # nothing lost, nothing twice
    assert 1 < per_transaction(cb)[0] <= 20  # default tx_batch


def test_terminated_backend_mid_batch_loses_nothing_and_counts_one_failure_each(conn, connect, dsn,
                                                                                events):
    logger, ev = events
    setup_db(conn, retries=3, delay=3)
    send_marked(conn, 40, {25: {"gate": 4242}})
    holder = connect()
    holder.execute("SELECT pg_advisory_lock(4242)")  # message 25's callback waits for it
    w = Worker(dsn, min_workers=1, max_workers=1, tx_batch=20, naptime_ms=50, logger=logger).start()
    try:
        blocked = "FROM pg_stat_activity WHERE application_name = 'pgmq-worker' AND wait_event = 'advisory'"
        wait_for(lambda: scalar(conn, f"SELECT count(*) {blocked}") == 1, what="message 25 in flight")
        pid = scalar(conn, f"SELECT pid {blocked}")
        # the batch in flight: the messages its transaction deleted (done) or still holds (25)
        batch = column(conn, "SELECT (message->>'n')::int FROM pgmq.q_work WHERE xmax = "
                             "(SELECT backend_xid FROM pg_stat_activity WHERE pid = %s) ORDER BY 1",
                       (pid,))
        assert 25 in batch and len(batch) >= 2, batch
        assert not set(batch) & set(column(conn, "SELECT n FROM public.handled"))  # uncommitted
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        holder.execute("SELECT pg_advisory_unlock(4242)")
        # the whole batch comes back, one failed delivery counted for each of its messages,
        # visible again after the retry delay
        wait_for(lambda: column(conn, "SELECT read_ct FROM pgmq.q_work WHERE (message->>'n')::int "
                                      "= ANY(%s) AND vt > now()", (batch,)) == [1] * len(batch),
                 what="the lost batch settled")
        wait_for(lambda: w.totals.done == 40, timeout=30, what="the queue to drain")
    finally:
        w.stop()
    assert_exactly_once(conn, set(range(1, 41)))
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_dead") == 0
    assert (w.totals.failed, w.totals.errors) == (0, 1)  # done == 40: the lost batch once
    lost = [f for e, f in ev.seen if e == "disconnected" and f.get("queue") == "work"]
    assert len(lost) == 1 and lost[0]["tx_batch"] >= len(batch)


def test_an_error_outside_the_callback_rolls_back_its_batch_then_fails_alone(conn, dsn, events):
    # statement_timeout (57014) is not caught by _dispatch_one's exception block: it aborts the
    # whole statement. The batch-mates come back with one failed delivery each; the worker then
    # commits that queue one message at a time, so message 15 times out alone and is
    # dead-lettered without taking the others with it.
    logger, ev = events
    setup_db(conn, retries=1, delay=0)
    send_marked(conn, 30, {15: {"sleep": 2}})
    w = Worker(f"{dsn} options='-c statement_timeout=500'", min_workers=1, max_workers=1,
               tx_batch=20, naptime_ms=50, refresh_interval=0.3, logger=logger).start()
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pgmq.q_dead") == 1, timeout=30,
                 what="message 15 dead-lettered")
        wait_for(lambda: w.totals.done == 29, what="the others")
    finally:
        w.stop()
    assert_exactly_once(conn, set(range(1, 31)) - {15})
    dl = scalar(conn, "SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_dead")
    assert dl["reason"] == "rollback" and dl["attempts"] == 2
    assert scalar(conn, "SELECT (message->>'n')::int FROM pgmq.q_dead") == 15
    errors = [f for e, f in ev.seen if e == "dispatch_error"]
    assert [f["sqlstate"] for f in errors] == ["57014", "57014"]
    assert errors[0]["tx_batch"] > 1 and errors[1]["tx_batch"] == 1  # then one at a time
    assert (w.totals.errors, w.totals.failed) == (2, 0)


def test_messages_that_time_out_do_not_stall_their_queue(conn, dsn, events):
    # Found by the chaos suite (timeouts scenario): each dispatch error used to cool the queue
    # down for min(refresh_interval, 5) s, so with the default refresh_interval every message
    # whose callback outlasts statement_timeout stopped the queue for 5 s per attempt. Errors
    # in a row now back off from 50 ms; the culprits still fail alone and are dead-lettered.
    logger, ev = events
    setup_db(conn, retries=1, delay=0)
    send_marked(conn, 30, {5: {"sleep": 2}, 15: {"sleep": 2}, 25: {"sleep": 2}})
    t0 = time.monotonic()
    w = Worker(f"{dsn} options='-c statement_timeout=300'", min_workers=1, max_workers=1,
               tx_batch=20, logger=logger).start()  # refresh_interval: the default, 10 s
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pgmq.q_dead") == 3
                 and w.totals.done == 27, timeout=30, what="the queue drained")
    finally:
        w.stop()
    took = time.monotonic() - t0
    assert_exactly_once(conn, set(range(1, 31)) - {5, 15, 25})
    assert w.totals.errors == 6  # each slow message timed out twice (1 + retries)
    assert took < 8, f"{took:.1f} s: a timed-out message stalled its queue"


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, "5", True, None])
def test_bad_tx_batch_is_refused(bad):
    with pytest.raises(ValueError, match=r"tx_batch must be an integer from 1 to 1000"):
        Worker("x", tx_batch=bad)


@pytest.mark.parametrize("bad", ["0", "1001", "many"])
def test_cli_refuses_a_bad_tx_batch(bad):
    result = CliRunner().invoke(main, ["worker", "--dsn", "dbname=x", "--tx-batch", bad])
    assert result.exit_code == 2 and "--tx-batch" in result.output


def test_every_replaced_connection_is_counted_even_when_the_first_attempt_works(cb, dsn, events):
    # Issue 33: after a failover (or pg_terminate_backend) the first reconnect usually works,
    # and pgmq_worker_reconnects_total stayed 0 then.
    from prometheus_client import generate_latest

    from pgmq_build.ops.metrics import WorkerCollector, registry_for

    logger, ev = events
    backends = ("FROM pg_stat_activity WHERE application_name = 'pgmq-worker' "
                "AND datname = current_database()")
    w = Worker(dsn, min_workers=2, max_workers=2, naptime_ms=50, logger=logger).start()
    try:
        wait_for(lambda: scalar(cb, f"SELECT count(*) {backends}") == 3,
                 what="two dispatchers and the listener connected")
        assert w.totals.reconnects == 0
        assert scalar(cb, f"SELECT count(pg_terminate_backend(pid)) {backends}") == 3
        send_n(cb, "work", 30, sleep=0.01)  # work for both dispatchers: each finds its loss
        wait_for(lambda: w.totals.done == 30, timeout=30, what="the queue to drain")
        lost = [f["worker"] for e, f in ev.seen if e == "disconnected"]
        wait_for(lambda: w.totals.reconnects == len(lost) >= 2, what="the reconnects counted")
        assert "listener" in lost
        text = generate_latest(registry_for(WorkerCollector(w))).decode()
        assert f"pgmq_worker_reconnects_total {float(w.totals.reconnects)}" in text
    finally:
        w.stop()
    again = [f for e, f in ev.seen if e == "reconnected"]
    assert len(again) == w.totals.reconnects and {f["attempts"] for f in again} == {1}
    assert_exactly_once(cb, set(range(1, 31)))


def failures_logged(events: Events) -> list[tuple[str, int, str]]:
    return [(f["queue"], f["msg_id"], f["error"]) for e, f in events.seen if e == "callback_failed"]


@pytest.mark.parametrize("tx_batch", [1, 20])
def test_each_failure_is_logged_once_with_its_msg_id_and_error(conn, dsn, events, tx_batch):
    logger, seen = events
    setup_db(conn, retries=0)
    fails = {3, 4, 17}
    ids = {n: scalar(conn, "SELECT pgmq.send('work', %s::jsonb)", (json.dumps({"n": n} | ({"fail": True} if n in fails else {})),))
           for n in range(1, 31)}
    totals = Worker(dsn, min_workers=1, max_workers=1, tx_batch=tx_batch, logger=logger).run_until_idle(timeout=60)
    assert (totals.done, totals.failed) == (27, 3)
    assert sorted(failures_logged(seen)) == sorted(("work", ids[n], f"handler failed for {n}") for n in fails)
    summary = [f for e, f in seen.seen if e == "summary"]
    assert len(summary) == 1 and (summary[0]["done"], summary[0]["failed"]) == (27, 3)
    assert "callback_failures_suppressed" not in seen.names()


def test_failures_past_ten_per_queue_are_counted_not_logged(conn, dsn, events):
    logger, seen = events
    setup_db(conn, retries=0)
    send_marked(conn, 25, {i: {"fail": True} for i in range(1, 26)})
    totals = Worker(dsn, min_workers=1, max_workers=1, tx_batch=5, logger=logger).run_until_idle(timeout=60)
    assert totals.failed == 25
    logged = failures_logged(seen)
    assert len(logged) == 10 and len({m for _, m, _ in logged}) == 10
    assert all(q == "work" and e.startswith("handler failed for ") for q, _, e in logged)
    suppressed = [f for e, f in seen.seen if e == "callback_failures_suppressed"]
    assert [(f["queue"], f["suppressed"]) for f in suppressed] == [("work", 15)]  # said at stop
    assert seen.names().index("callback_failures_suppressed") < seen.names().index("summary")
