"""Consumer-side counters per queue, read from what PostgreSQL's statistics system already counts
for each queue table and archive (pg_stat_get_tuples_*: pg_stat_user_tables' n_tup_ins,
n_tup_upd, n_tup_del), so that send, read, pop, delete and archive write nothing more for them.

What they count is what the statistics count: every row a statement deleted, updated or
inserted, committed or rolled back (PostgreSQL counts attempted actions), summed over a
partitioned queue's partitions. They are reported by each backend at transaction end, at most
once a second (sooner once it is idle), start again at 0 after pg_stat_reset() or a crash
(Prometheus' rate() and increase() take a counter reset in their stride), and lose a partition's
share when the partition is dropped. docs/guides/metrics-and-alerts.md says what each means.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

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


def families(rows: list[dict[str, Any]]) -> list[Metric]:
    """The counter families of a set of read() rows."""
    out = []
    for name, column, text in _SERIES:
        family = CounterMetricFamily(name, text, labels=["queue"])
        for r in rows:
            family.add_metric([r["queue_name"]], r[column])
        out.append(family)
    return out
