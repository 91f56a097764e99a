"""``python3 -m bench --scrape``: the exporter's counters of the bench queue, read through the
exporter's own collector (pgmq_build/ops/metrics.py) before and after each segment of ours in the
send, read and pop cells, next to the bench's own count of the messages its clients handled.

The counters come from PostgreSQL's table statistics, which a backend reports at transaction
end at most once a second and at exit: after a segment the clients' connections are closed, and
the scrape waits until their backends are gone (a backend reports its counts before it leaves
pg_stat_activity), so the two agree exactly. The bench's count is of the timed operations; the
untimed warm-up operations before them (WARM_OPS per client) are counted apart and added.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from pgmq_build.ops import metrics

from .workloads import QUEUE

SERIES = {
    "pgmq_queue_sent_messages_total": "sent",
    "pgmq_queue_deleted_messages_total": "deleted",
    "pgmq_queue_updated_messages_total": "updated",
    "pgmq_queue_archived_messages_total": "archived",
    "pgmq_queue_delivered_messages_total": "delivered",
}
# The workloads scraped, and the counters that must move by exactly the bench's count: a send
# inserts, a read leases (an update) and its delete deletes, a pop deletes; on a queue that counts
# its deliveries (set_delivery_counting) each read or pop also counts what it was handed.
COUNTED: dict[str, tuple[str, ...]] = {
    "send": ("sent",),
    "send_batch": ("sent",),
    "read_delete": ("updated", "deleted"),
    "read_delete_batch": ("updated", "deleted"),
    "pop": ("deleted",),
    "read_delete_counted": ("updated", "deleted", "delivered"),
    "pop_counted": ("deleted", "delivered"),
}
GONE_TIMEOUT = 30.0  # seconds for the clients' backends to exit


class Scraper:
    """The exporter's collector on the bench database, over its own connection."""

    def __init__(self, dsn: str) -> None:
        self._source = metrics.QueueMetricsSource(dsn)
        self._registry = metrics.registry_for(metrics.QueueCollector(self._source.read))
        self._conn = psycopg.connect(dsn, autocommit=True)

    def counters(self) -> dict[str, float]:
        """The bench queue's counters, as one scrape of /metrics gives them."""
        text = metrics.generate_latest(self._registry).decode()
        got: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "pgmq_up" and s.value != 1:
                    raise RuntimeError("--scrape: the exporter could not query the bench database")
                if s.name in SERIES and s.labels.get("queue") == QUEUE:
                    got[SERIES[s.name]] = s.value
        return got

    def wait_gone(self, pids: list[int]) -> None:
        """Until the backends `pids` have exited (and so reported their statistics)."""
        deadline = time.monotonic() + GONE_TIMEOUT
        while self._conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                 (pids,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"--scrape: client backends {pids} still there after {GONE_TIMEOUT:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        self._source.close()
        self._conn.close()


def compare(workload: str, before: dict[str, float], after: dict[str, float], bench: int,
            warm: int) -> dict[str, Any]:
    """One segment's record: the bench's count (timed + warm-up), each counter's increase, and
    whether the counters the workload moves moved by exactly that."""
    moved = {k: int(after.get(k, 0) - before.get(k, 0)) for k in SERIES.values()}
    expected = bench + warm
    return {"bench_msgs": bench, "warmup_msgs": warm, "counters": moved,
            "checked": list(COUNTED[workload]),
            "agree": all(moved[k] == expected for k in COUNTED[workload])}


def format_lines(records: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The report's lines: one per scraped segment."""
    if not records:
        return []
    lines = [f"Counters scraped from the exporter (--scrape; queue {QUEUE}, ours): each segment's "
             "timed messages + warm-up ones, and each counter's increase over it ("
             + ", ".join(f"{v} = {k}" for k, v in SERIES.items()) + "):"]
    for label, r in records:
        moved = ", ".join(f"{k} +{v:,}" for k, v in r["counters"].items())
        mark = "agree" if r["agree"] else "DIFFER"
        lines.append(f"  {label}: bench {r['bench_msgs']:,} + {r['warmup_msgs']:,} warm-up = "
                     f"{r['bench_msgs'] + r['warmup_msgs']:,} | {moved} | "
                     f"{'/'.join(r['checked'])}: {mark}")
    return lines
