"""Stream batch handlers for the worker's tests (`--handler tests.integration.stream_handlers:record`):
importable by a worker process started with this checkout on PYTHONPATH."""

from __future__ import annotations

import time

from pgmq_build.streams import StreamBatch

# events that failed once in this process (an event {"n": k, "fail_once": true} fails its batch
# the first time only)
_failed: set[int] = set()

SETUP = "CREATE TABLE public.stream_done (n int PRIMARY KEY, batch_id bigint NOT NULL)"


def record(batch: StreamBatch, conn) -> None:
    """Each event's n into public.stream_done, on the batch's connection (a second commit of an
    event fails on the primary key); {"sleep": s} sleeps first, {"fail_once": true} raises the
    first time it is seen."""
    conn.execute("INSERT INTO public.stream_done SELECT unnest(%s::int[]), %s",
                 ([e.message["n"] for e in batch.events], batch.batch_id))
    for e in batch.events:
        if e.message.get("sleep"):
            time.sleep(float(e.message["sleep"]))
        if e.message.get("fail_once") and e.message["n"] not in _failed:
            _failed.add(e.message["n"])
            raise RuntimeError(f"event {e.message['n']} fails once")
