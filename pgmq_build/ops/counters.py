"""Consumer-side counters per queue. Those of the hot paths are read from what PostgreSQL's
statistics system already counts for each queue table and archive (pg_stat_get_tuples_*:
pg_stat_user_tables' n_tup_ins, n_tup_upd, n_tup_del), so that send, read, pop, delete and
archive write nothing more for them; the failures (dead letters by reason, nacks) are counted
by the extension on the failure paths, in pgmq.queue_counters (2.11.0 and later).

What they count is what the statistics count: every row a statement deleted, updated or
inserted, committed or rolled back (PostgreSQL counts attempted actions), summed over a
partitioned queue's partitions. They are reported by each backend at transaction end, at most
once a second (sooner once it is idle), start again at 0 after pg_stat_reset() or a crash
(Prometheus' rate() and increase() take a counter reset in their stride), and lose a partition's
share when the partition is dropped. docs/guides/metrics-and-alerts.md says what each means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from . import db

# The tables that hold a table's rows: its leaf partitions, or itself when it is not partitioned
# (pg_partition_tree gives nothing for a plain table); NULL (a queue without an archive) none.
_LEAVES = """(SELECT t.relid FROM pg_catalog.pg_partition_tree({rel}) t WHERE t.isleaf
          UNION ALL
          SELECT c.oid::regclass FROM pg_catalog.pg_class c
          WHERE c.oid = {rel} AND NOT c.relispartition AND c.relkind <> 'p')"""

# One statement for every queue the caller may read (as pgmq.queue_metrics() chooses them): no
# table is scanned, only the statistics system's entries of its tables are summed.
COUNTERS_QUERY = f"""
SELECT m.queue_name::text AS queue_name,
       (SELECT coalesce(sum(pg_catalog.pg_stat_get_tuples_deleted(l.relid)), 0)::bigint
        FROM {_LEAVES.format(rel="r.q")} l(relid)) AS deleted,
       (SELECT coalesce(sum(pg_catalog.pg_stat_get_tuples_updated(l.relid)), 0)::bigint
        FROM {_LEAVES.format(rel="r.q")} l(relid)) AS updated,
       (SELECT coalesce(sum(pg_catalog.pg_stat_get_tuples_inserted(l.relid)), 0)::bigint
        FROM {_LEAVES.format(rel="r.a")} l(relid)) AS archived
FROM pgmq.meta m
CROSS JOIN LATERAL (
    SELECT pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', pgmq._format_table_name(m.queue_name, 'q'))) AS q,
           pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', pgmq._format_table_name(m.queue_name, 'a'))) AS a
) r
WHERE r.q IS NOT NULL AND pgmq._queue_privilege(m.queue_name, 'SELECT')
ORDER BY 1
"""

COLUMNS = ("deleted", "updated", "archived")

# pgmq.queue_counters, summed over its shards; its row security leaves the queues the caller may
# not read out. (queue, counter, reason, n) rows.
FAILURES_QUERY = """
SELECT c.queue_name::text AS queue_name, c.counter, c.reason, sum(c.n)::bigint AS n
FROM pgmq.queue_counters c
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
"""

# (name without _total, column, help)
_SERIES = (
    ("pgmq_queue_deleted_messages", "deleted",
     "Rows deleted from the queue table (all partitions): every message that left it by delete, "
     "archive, pop, read_message's take, dead-lettering or an expired reservation; not purge_queue "
     "(a TRUNCATE). Counted by PostgreSQL's statistics, rolled-back deletes included; resets with "
     "pg_stat_reset() and after a crash."),
    ("pgmq_queue_updated_messages", "updated",
     "Row updates of the queue table (all partitions): one per message leased by read, "
     "read_with_poll or read_grouped*, and one per set_vt, nack, checkpoint or failed delivery "
     "settled. Counted by PostgreSQL's statistics, rolled-back updates included; resets with "
     "pg_stat_reset() and after a crash."),
    ("pgmq_queue_archived_messages", "archived",
     "Rows inserted into the queue's archive table: archive() and the dead letters of a queue "
     "without a dead-letter queue. Counted by PostgreSQL's statistics, rolled-back inserts "
     "included; resets with pg_stat_reset() and after a crash."),
)


def read(conn: db.Conn) -> list[dict[str, Any]]:
    """The counters of every queue the caller may read, by name."""
    return db.rows(conn, COUNTERS_QUERY)


def read_failures(conn: db.Conn) -> list[dict[str, Any]]:
    """pgmq.queue_counters' sums; none from an extension older than 2.11.0 (no such table)."""
    if db.value(conn, "SELECT pg_catalog.to_regclass('pgmq.queue_counters')") is None:
        return []
    return db.rows(conn, FAILURES_QUERY)


# Each queue that counts deliveries (pgmq.set_delivery_counting): its sessions seen in the last
# minute, and what its sessions' rows hold (queue_consumers; the rows of sessions gone are summed
# into queue_counters), as row security lets the caller see them (2.13.0 and later).
CONSUMERS_WINDOW = 60  # seconds
CONSUMERS_QUERY = f"""
SELECT s.queue_name::text AS queue_name,
       count(c.pid) FILTER (WHERE c.last_seen > pg_catalog.now() - interval '{CONSUMERS_WINDOW} seconds')::bigint
           AS consumers,
       coalesce(sum(c.delivered), 0) AS delivered,
       coalesce(sum(c.redelivered), 0) AS redelivered
FROM pgmq.queue_settings s
LEFT JOIN pgmq.queue_consumers c ON pg_catalog.lower(c.queue_name) = pg_catalog.lower(s.queue_name)
WHERE s.count_deliveries AND pgmq._queue_privilege(s.queue_name, 'SELECT')
GROUP BY 1
ORDER BY 1
"""


def read_consumers(conn: db.Conn) -> list[dict[str, Any]]:
    """(queue_name, consumers) of the queues that count deliveries; none from an extension older
    than 2.13.0 (no queue_consumers table)."""
    if db.value(conn, "SELECT pg_catalog.to_regclass('pgmq.queue_consumers')") is None:
        return []
    return db.rows(conn, CONSUMERS_QUERY)


def families(rows: Iterable[dict[str, Any]], failures: Iterable[dict[str, Any]] = (),
             consumers: Iterable[dict[str, Any]] = ()) -> list[Metric]:
    """The counter families of a set of read(), read_failures() and read_consumers() rows."""
    rows, out = list(rows), []
    for name, column, text in _SERIES:
        family = CounterMetricFamily(name, text, labels=["queue"])
        for r in rows:
            family.add_metric([r["queue_name"]], r[column])
        out.append(family)
    dead = CounterMetricFamily(
        "pgmq_queue_dead_lettered_messages", "Messages of the queue moved out as dead letters (to "
        "its dead-letter queue, or its archive when it has none), by reason as in their "
        "x-pgmq-dead-letter header: ttl (past their TTL), expired (deliveries used up), nack, "
        "callback, rollback. Counted in the transaction that moves them (a rollback takes the "
        "count back); queues with a dead letter only.", labels=["queue", "reason"])
    nacked = CounterMetricFamily(
        "pgmq_queue_nacked_messages", "Failed deliveries reported with nack() (each is retried "
        "or dead-lettered); queues with a nack only.", labels=["queue"])
    delivered = CounterMetricFamily(
        "pgmq_queue_delivered_messages", "Messages handed to consumers by read, read_with_poll, "
        "read_unordered, pop, read_grouped* and the payload reads, in committed transactions; "
        "queues that count deliveries (pgmq.set_delivery_counting) only.", labels=["queue"])
    redelivered = CounterMetricFamily(
        "pgmq_queue_redelivered_messages", "Of pgmq_queue_delivered_messages_total, the messages "
        "that had been delivered before (a lease ran out or a consumer rolled back).",
        labels=["queue"])
    seen = GaugeMetricFamily(
        "pgmq_queue_consumers", f"Sessions that were handed messages of the queue in the last "
        f"{CONSUMERS_WINDOW} seconds; queues that count deliveries only.", labels=["queue"])
    # deliveries: the live sessions' rows plus what the sessions gone left in queue_counters
    sums: dict[str, dict[str, float]] = {}
    for r in consumers:
        seen.add_metric([r["queue_name"]], r["consumers"])
        sums[r["queue_name"]] = {"delivered": float(r["delivered"]), "redelivered": float(r["redelivered"])}
    for r in failures:
        if r["counter"] == "dead_lettered":
            dead.add_metric([r["queue_name"], r["reason"]], r["n"])
        elif r["counter"] == "nacked":
            nacked.add_metric([r["queue_name"]], r["n"])
        elif r["counter"] in ("delivered", "redelivered"):
            queue = sums.setdefault(r["queue_name"], {"delivered": 0.0, "redelivered": 0.0})
            queue[r["counter"]] += float(r["n"])
    for queue, n in sorted(sums.items()):
        delivered.add_metric([queue], n["delivered"])
        redelivered.add_metric([queue], n["redelivered"])
    return [*out, dead, nacked, delivered, redelivered, seen]
