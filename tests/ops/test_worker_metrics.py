"""`pgmq-build worker --metrics-bind`: /metrics serves the queue series and the worker's own
counters, which follow what it dispatched."""

from __future__ import annotations

import json
import urllib.error

from pgmq_build.cluster import _free_port
from tests.helpers import scalar, send_n, wait_for
from tests.integration.test_worker import setup_db
from tests.ops.support import q, scrape, spawn, stop


def test_worker_metrics_count_what_it_dispatched(conn, dsn):
    setup_db(conn, retries=1)  # a failing message fails twice, then goes to queue 'dead'
    send_n(conn, "work", 4)
    conn.execute("""SELECT pgmq.send('work', '{"n": 5, "fail": true}')""")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = spawn("worker", "--dsn", dsn, "--metrics-bind", f"127.0.0.1:{port}",
                 "--min-workers", "2", "--naptime-ms", "50")
    got: dict = {}

    def finished() -> bool:
        try:
            got.clear()
            got.update(scrape(url))
        except (urllib.error.URLError, ConnectionError):
            assert proc.poll() is None, proc.communicate()[1]
            return False
        return got.get(("pgmq_worker_failed_total", q("work")), 0) == 2 \
            and got.get(("pgmq_worker_dispatched_total", q("work")), 0) == 6

    try:
        wait_for(finished, timeout=30, what="the worker's counters")
        # a scrape queries the database before it reads the worker's counters: once these
        # counted everything (after each commit), the next scrape's queue series see it all
        got = scrape(url)
        assert got[("pgmq_worker_dispatched_total", q("work"))] == 6
        assert got[("pgmq_worker_pool_size", ())] == 2
        assert got[("pgmq_worker_reconnects_total", ())] == 0
        assert got[("pgmq_worker_dispatch_errors_total", ())] == 0
        # the queue series are there too, and the database agrees with the worker
        assert got[("pgmq_up", ())] == 1
        assert got[("pgmq_queue_sent_messages_total", q("work"))] == 5
        assert got[("pgmq_queue_depth_messages", q("work"))] == 0
        assert got[("pgmq_queue_dead_letter_messages", q("work", dead_letter_queue="dead"))] == 1
        assert got[("pgmq_queue_callbacks_total", q("work", outcome="succeeded"))] == 4
        assert got[("pgmq_queue_callbacks_total", q("work", outcome="failed"))] == 2
        assert scalar(conn, "SELECT count(*) FROM public.handled") == 4
    finally:
        code, err = stop(proc)
    assert code == 0, err
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert "metrics" in events and events[-1] == "summary"


def test_worker_metrics_count_stream_batches(conn, dsn):
    from tests.integration import stream_handlers

    conn.execute(stream_handlers.SETUP)
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'work')")
    conn.execute("SELECT pgmq.stream_send_batch('ev', ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = spawn("worker", "--dsn", dsn, "--metrics-bind", f"127.0.0.1:{port}", "--stream", "ev:work",
                 "--handler", "tests.integration.stream_handlers:record", "--naptime-ms", "50")
    key = (("stream", "ev"), ("subscription", "work"))
    got: dict = {}

    def finished() -> bool:
        try:
            got.clear()
            got.update(scrape(url))
        except (urllib.error.URLError, ConnectionError):
            assert proc.poll() is None, proc.communicate()[1]
            return False
        return got.get(("pgmq_worker_stream_events_total", key), 0) == 2

    try:
        wait_for(finished, timeout=30, what="the worker's stream counters")
        got = scrape(url)  # the next scrape's database series see the committed ack
        assert got[("pgmq_worker_stream_batches_total", (("outcome", "done"), *key))] == 1
        assert got[("pgmq_worker_stream_batches_total", (("outcome", "failed"), *key))] == 0
        assert got[("pgmq_stream_subscription_lag_events", key)] == 0
        assert got[("pgmq_worker_pool_size", ())] == 0  # streams only
        assert scalar(conn, "SELECT count(*) FROM public.stream_done") == 2
    finally:
        code, err = stop(proc)
    assert code == 0, err
