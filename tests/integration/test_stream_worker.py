"""The worker's stream consumers (Worker(streams=..., handler=...), `pgmq-build worker --stream
S:SUB --handler M:F`): each batch's handler work commits with its ack exactly once, across
several consumers, a failing handler, SIGTERM and SIGKILL."""

from __future__ import annotations

import json
import signal
import threading
import time

import psycopg
import pytest

from pgmq_build.worker import SettingError, Worker
from tests.helpers import column, run_threads, scalar, wait_for
from tests.integration import stream_handlers
from tests.integration.test_worker import json_lines, spawn

HANDLER = "tests.integration.stream_handlers:record"


@pytest.fixture
def work(conn: psycopg.Connection) -> str:
    """Stream ev with subscription work, and the handler's table."""
    conn.execute(stream_handlers.SETUP)
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'work')")
    return "ev:work"


def send(conn: psycopg.Connection, first: int, n: int, **extra: object) -> None:
    """Events {"n": first} ... {"n": first + n - 1} (plus extra) in one stream_send_batch."""
    conn.execute("SELECT pgmq.stream_send_batch('ev', (SELECT array_agg(jsonb_build_object('n', g) "
                 "|| %s::jsonb ORDER BY g) FROM generate_series(%s::int, %s::int) g))",
                 (json.dumps(extra), first, first + n - 1))


def done(conn: psycopg.Connection) -> list[int]:
    return column(conn, "SELECT n FROM public.stream_done ORDER BY n")


def test_several_consumers_do_every_event_once(conn, connect, dsn, work):
    w = Worker(dsn, streams=[work], handler=stream_handlers.record, stream_consumers=3,
               naptime_ms=20)
    w.start()
    try:
        assert w.consumers == 3 and w.workers == 0  # streams only: no callback dispatchers

        def producer(first: int) -> None:
            c = connect()
            for k in range(first, first + 300, 10):
                send(c, k, 10)
                time.sleep(0.005)

        run_threads([threading.Thread(target=producer, args=(s,)) for s in (0, 300)])
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM public.stream_done") == 600,
                 timeout=60, what="every event")
    finally:
        totals = w.stop()
    assert done(conn) == list(range(600))
    batches = scalar(conn, "SELECT count(DISTINCT batch_id) FROM public.stream_done")
    assert (totals.events, totals.batches) == (600, batches) and batches > 3
    assert (totals.errors, totals.batches_failed, totals.batches_expired, totals.done) == (0, 0, 0, 0)
    assert w.stream_totals() == {("ev", "work"): (batches, 600, 0, 0)}
    assert scalar(conn, "SELECT lag_events FROM pgmq.stream_info('ev')") == 0


def test_a_failed_batch_is_rolled_back_and_comes_back_after_its_lease(conn, dsn, work):
    send(conn, 1, 1, fail_once=True)
    send(conn, 2, 2)  # the same batch: no tick in between
    began = time.monotonic()
    totals = Worker(dsn, streams=[work], handler=stream_handlers.record, stream_lease=1,
                    naptime_ms=20).run_until_idle(timeout=1.5)
    # once mode ends at the first read that finds nothing: the failed batch is still leased
    assert (totals.batches_failed, totals.batches) == (1, 0)
    assert done(conn) == []  # its insert was rolled back
    assert scalar(conn, "SELECT batches_out FROM pgmq.stream_info('ev')") == 1
    wait_for(lambda: time.monotonic() - began > 1.1, what="the lease to run out")
    totals = Worker(dsn, streams=[work], handler=stream_handlers.record,
                    naptime_ms=20).run_until_idle(timeout=30)
    assert (totals.batches, totals.events, totals.batches_failed) == (1, 3, 0)
    assert done(conn) == [1, 2, 3]


def test_an_unknown_subscription_is_refused_before_any_thread_starts(conn, dsn, work):
    threads = threading.active_count()
    with pytest.raises(SettingError, match="no such subscription: 'ev:nobody'") as info:
        Worker(dsn, streams=[work, "ev:nobody"], handler=stream_handlers.record).start()
    assert info.value.setting == "streams" and threading.active_count() == threads


def test_queues_and_streams_side_by_side(conn, dsn, work):
    """--queue and --stream together: both are served."""
    from tests.integration.test_worker import setup_db

    setup_db(conn)
    conn.execute("SELECT pgmq.send('work', '{\"n\": 1}')")
    send(conn, 1, 2)
    totals = Worker(dsn, ["work"], streams=[work], handler=stream_handlers.record,
                    naptime_ms=20).run_until_idle(timeout=30)
    assert (totals.done, totals.events) == (1, 2)
    assert column(conn, "SELECT n FROM public.handled") == [1] and done(conn) == [1, 2]


# -- the command line ---------------------------------------------------------------------

def test_cli_once_then_sigterm_finishes_the_batch_in_flight(conn, dsn, work):
    send(conn, 1, 5)
    proc = spawn(dsn, "--stream", work, "--handler", HANDLER, "--once")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json_lines(err)[-1]
    assert summary["event"] == "summary" and (summary["events"], summary["batches"]) == (5, 1)
    assert done(conn) == [1, 2, 3, 4, 5]

    send(conn, 6, 1, sleep=1.5)
    proc = spawn(dsn, "--stream", work, "--handler", HANDLER, "--naptime-ms", "20")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE state = "
                                      "'idle in transaction' AND application_name = 'pgmq-worker'") == 1,
                 timeout=30, what="the handler to be running")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopping" in [d["event"] for d in json_lines(err)]
    assert done(conn) == [1, 2, 3, 4, 5, 6]  # the batch in flight was finished and committed
    assert scalar(conn, "SELECT lag_events FROM pgmq.stream_info('ev')") == 0


def test_cli_sigkill_mid_batch_loses_nothing(conn, dsn, work):
    send(conn, 1, 3, sleep=3)
    proc = spawn(dsn, "--stream", work, "--handler", HANDLER, "--lease", "2")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE state = "
                                      "'idle in transaction' AND application_name = 'pgmq-worker'") == 1,
                 timeout=30, what="the handler to be running")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert done(conn) == []  # killed before its commit
    time.sleep(2)  # the lease
    proc = spawn(dsn, "--stream", work, "--handler", HANDLER, "--once")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert done(conn) == [1, 2, 3]


@pytest.mark.parametrize("args,words", [
    (["--stream", "ev:nobody"], ["no such subscription: 'ev:nobody'"]),
    (["--stream", "nostream:work"], ["no such subscription: 'nostream:work'"]),
])
def test_cli_refuses_unknown_subscriptions_with_exit_2(dsn, work, args, words):
    proc = spawn(dsn, *args, "--handler", HANDLER)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    line = json_lines(err)[-1]
    assert line["event"] == "bad_options" and line["setting"] == "streams"
    for word in words:
        assert word in line["error"]
