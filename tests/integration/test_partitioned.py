"""Partitioned queues (pg_partman): create_partitioned, convert_archive_partitioned,
run_partition_maintenance, drop_queue clean-up, and the whole message API on partitioned tables.

The server has pg_partman's files installed; each test database starts without the extension,
so the tests that need it create it (fixture `partman`)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.helpers import NO_PARTMAN, column, notices, partman_available, raises_sql, scalar, send_n

QCOLS = ["msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers"]
ACOLS = ["msg_id", "read_ct", "enqueued_at", "last_read_at", "archived_at", "vt", "message", "headers"]
REQUIRED = "pg_partman is required for partitioned queues"


def columns(conn, table):
    return column(conn, """SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass
                          AND attnum > 0 AND NOT attisdropped ORDER BY attnum""", (table,))


def partkey(conn, table):
    return scalar(conn, "SELECT pg_get_partkeydef(%s::regclass)", (table,))


def partitions(conn, table):
    """Partition names of a table, the default one last."""
    return column(conn, """SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                          WHERE i.inhparent = %s::regclass
                          ORDER BY pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
                                   c.relname""", (table,))


def id_bounds(conn, table):
    """(from, to) of each msg_id range partition, ascending."""
    rows = conn.execute("""SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
                           JOIN pg_class c ON c.oid = i.inhrelid
                           WHERE i.inhparent = %s::regclass
                             AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'""", (table,)).fetchall()
    out = []
    for (bound,) in rows:  # FOR VALUES FROM ('0') TO ('10000')
        lo, hi = bound.split("FROM ('")[1].split("') TO ('")
        out.append((int(lo), int(hi.rstrip("')"))))
    return sorted(out)


def indexes(conn, table):
    return set(column(conn, "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass",
                      (table,)))


def part_config(conn, table, schema="partman"):
    cur = conn.execute(f"""SELECT control, partition_interval, premake, retention, retention_keep_table,
                                  retention_keep_index, infinite_time_partitions, automatic_maintenance
                           FROM {schema}.part_config WHERE parent_table = %s""", (table,))
    row = cur.fetchone()
    return None if row is None else dict(zip([d.name for d in cur.description], row, strict=True))


def where(conn, table, msg_id):
    """The partition holding a message."""
    return scalar(conn, f"SELECT tableoid::regclass::text FROM {table} WHERE msg_id = %s", (msg_id,))


# ------------------------------------------------------------------ pg_partman missing, arguments

def test_requires_pg_partman(conn):
    # upstream's error (P0001) from upstream's functions, 42704 from ours
    with raises_sql("P0001", REQUIRED):
        conn.execute("SELECT pgmq.create_partitioned('orders')")
    with raises_sql("P0001", REQUIRED):
        conn.execute("SELECT pgmq.create_partitioned('orders', '1 day', '7 days', 2)")
    with raises_sql("P0001", REQUIRED):
        conn.execute("SELECT pgmq._ensure_pg_partman_installed()")
    conn.execute("SELECT pgmq.create('plain')")
    with raises_sql("42704", REQUIRED):
        conn.execute("SELECT pgmq.run_partition_maintenance('plain')")
    conn.execute("SELECT pgmq.drop_queue('plain')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0
    assert scalar(conn, "SELECT to_regclass('pgmq.q_orders')") is None
    assert scalar(conn, "SELECT pgmq._get_pg_partman_schema()") is None
    assert scalar(conn, "SELECT pgmq._get_pg_partman_major_version()") is None
    # Maintenance of "every partitioned queue" is a no-op without pg_partman (safe for cron).
    conn.execute("SELECT pgmq.run_partition_maintenance()")


def test_convert_archive_requires_pg_partman(conn):
    conn.execute("SELECT pgmq.create('plain')")
    # upstream fails later, in format() (22004); ours says why, with upstream's error
    with raises_sql("P0001", REQUIRED):
        conn.execute("SELECT pgmq.convert_archive_partitioned('plain')")
    assert scalar(conn, "SELECT relkind FROM pg_class WHERE oid = 'pgmq.a_plain'::regclass") == "r"


@pytest.mark.parametrize("premake,shown", [(0, "0"), (-3, "-3"), (None, "<NULL>")])
def test_premake_must_be_at_least_1(conn, partman, premake, shown):
    with raises_sql("P0001", f"premake must be at least 1, got {shown}"):
        conn.execute("SELECT pgmq.create_partitioned('orders', premake => %s::int)", (premake,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 0


def test_pg_partman_is_checked_before_premake(conn):
    """Upstream's order: the name, pg_partman, then premake."""
    with raises_sql("P0001", REQUIRED):
        conn.execute("SELECT pgmq.create_partitioned('orders', '10000', '100000', 0)")
    with raises_sql("P0001", "queue name is too long, maximum length is 47 characters"):
        conn.execute("SELECT pgmq.create_partitioned(%s, '10000', '100000', 0)", ("x" * 48,))


@pytest.mark.parametrize("interval,retention", [
    ("10000", "7 days"),     # a time retention for msg_id partitions
    ("1 day", "a week"),
    ("0", "10"),             # not a positive size
    ("", "10"),
    ("fortnightly-ish", "1 day"),
])
def test_bad_intervals_are_rejected(conn, partman, interval, retention):
    # P0001, as upstream's failure inside pg_partman, with a text of ours (a stand-in)
    with raises_sql("P0001"):
        conn.execute("SELECT pgmq.create_partitioned('orders', %s, %s)", (interval, retention))
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_time_partitions_accept_the_default_numeric_retention(conn, partman):
    # As upstream: '100000' reads as an interval of that many seconds.
    conn.execute("SELECT pgmq.create_partitioned('events', '1 day')")
    assert part_config(conn, "pgmq.q_events")["retention"] == "100000"


def test_helpers(conn, partman):
    assert scalar(conn, "SELECT pgmq._get_partition_col('10000')") == "msg_id"
    assert scalar(conn, "SELECT pgmq._get_partition_col(partition_interval => ' 42 ')") == "msg_id"
    assert scalar(conn, "SELECT pgmq._get_partition_col('1 day')") == "enqueued_at"
    assert scalar(conn, "SELECT pgmq._extension_schema('pgmq')") == "pgmq"
    assert scalar(conn, "SELECT pgmq._extension_schema('pg_partman')") == "partman"
    assert scalar(conn, "SELECT pgmq._extension_schema('no_such_extension')") is None
    assert scalar(conn, "SELECT pgmq._get_pg_partman_schema()") == "partman"
    major = scalar(conn, "SELECT split_part(extversion, '.', 1)::int FROM pg_extension WHERE extname = 'pg_partman'")
    assert major >= 4
    assert scalar(conn, "SELECT pgmq._get_pg_partman_major_version()") == major
    conn.execute("SELECT pgmq._ensure_pg_partman_installed()")


# ------------------------------------------------------------------ layout

def test_numeric_interval_layout(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('orders')")  # '10000', '100000', premake 4
    assert conn.execute("SELECT * FROM pgmq.list_queues()").fetchall()[0][:3] == ("orders", True, False)

    assert columns(conn, "pgmq.q_orders") == [*QCOLS, "priority"]  # ours after upstream's
    assert columns(conn, "pgmq.a_orders") == ACOLS
    assert partkey(conn, "pgmq.q_orders") == "RANGE (msg_id)"
    assert partkey(conn, "pgmq.a_orders") == "RANGE (msg_id)"
    # No primary key anywhere (upstream #212); msg_id is an identity BY DEFAULT on q only.
    assert scalar(conn, """SELECT count(*) FROM pg_constraint WHERE contype = 'p'
                          AND conrelid IN ('pgmq.q_orders'::regclass, 'pgmq.a_orders'::regclass)""") == 0
    assert scalar(conn, """SELECT attidentity FROM pg_attribute
                          WHERE attrelid = 'pgmq.q_orders'::regclass AND attname = 'msg_id'""") == "d"
    assert scalar(conn, """SELECT (attidentity, attnotnull)::text FROM pg_attribute
                          WHERE attrelid = 'pgmq.a_orders'::regclass AND attname = 'msg_id'""") == "(\"\",t)"
    assert scalar(conn, "SELECT pg_get_serial_sequence('pgmq.q_orders', 'msg_id')") == "pgmq.q_orders_msg_id_seq"

    assert {"pgmq.q_orders_part_idx", "pgmq.q_orders_vt_idx"} <= indexes(conn, "pgmq.q_orders")
    assert "pgmq.archived_at_idx_orders" in indexes(conn, "pgmq.a_orders")
    # Indexes on the parent reach every partition, the default included.
    assert scalar(conn, """SELECT count(*) FROM pg_index WHERE indrelid = 'pgmq.q_orders_default'::regclass""") >= 2

    # premake 4: the partition holding the current id plus 4 ahead, and a default.
    assert id_bounds(conn, "pgmq.q_orders") == [(i, i + 10000) for i in range(0, 50000, 10000)]
    assert id_bounds(conn, "pgmq.a_orders") == [(i, i + 10000) for i in range(0, 50000, 10000)]
    assert partitions(conn, "pgmq.q_orders")[-1] == "q_orders_default"
    assert partitions(conn, "pgmq.a_orders")[-1] == "a_orders_default"

    for table in ("pgmq.q_orders", "pgmq.a_orders"):
        assert part_config(conn, table) == {
            "control": "msg_id", "partition_interval": "10000", "premake": 4, "retention": "100000",
            "retention_keep_table": False, "retention_keep_index": True,
            "infinite_time_partitions": False, "automatic_maintenance": "on",
        }


def test_time_interval_layout(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('events', '1 day', '7 days', 2)")
    assert partkey(conn, "pgmq.q_events") == "RANGE (enqueued_at)"
    assert partkey(conn, "pgmq.a_events") == "RANGE (archived_at)"
    assert scalar(conn, """SELECT count(*) FROM pg_constraint WHERE contype = 'p'
                          AND conrelid IN ('pgmq.q_events'::regclass, 'pgmq.a_events'::regclass)""") == 0
    assert scalar(conn, """SELECT attidentity FROM pg_attribute
                          WHERE attrelid = 'pgmq.q_events'::regclass AND attname = 'msg_id'""") == "d"
    # Without a key, lookups by msg_id (delete, archive, set_vt) need their own index.
    assert {"pgmq.q_events_part_idx", "pgmq.q_events_vt_idx", "pgmq.q_events_msg_id_idx"} <= indexes(conn, "pgmq.q_events")
    assert "pgmq.archived_at_idx_events" in indexes(conn, "pgmq.a_events")

    # Daily partitions from premake days back to premake days ahead, plus a default.
    names = partitions(conn, "pgmq.q_events")
    assert names[-1] == "q_events_default" and len(names) == 2 + 1 + 2 + 1
    today = scalar(conn, "SELECT to_char(now(), 'YYYY_MM_DD')")
    ahead = scalar(conn, "SELECT to_char(now() + interval '2 days', 'YYYY_MM_DD')")
    assert f"q_events_p{today}" in names and f"q_events_p{ahead}" in names
    assert len(partitions(conn, "pgmq.a_events")) == 6

    q = part_config(conn, "pgmq.q_events")
    assert (q["control"], q["partition_interval"], q["premake"], q["retention"]) == ("enqueued_at", "1 day", 2, "7 days")
    assert (q["retention_keep_table"], q["retention_keep_index"], q["automatic_maintenance"]) == (False, True, "on")
    # An empty queue must keep getting partitions for "now" (messages come and go).
    assert q["infinite_time_partitions"] is True
    assert part_config(conn, "pgmq.a_events")["control"] == "archived_at"

    msg_id = scalar(conn, "SELECT * FROM pgmq.send('events', '{}')")
    assert where(conn, "pgmq.q_events", msg_id) == f"pgmq.q_events_p{today}"


@pytest.mark.parametrize("premake", [1, 6])
def test_premake_sets_how_many_partitions_are_made_ahead(conn, partman, premake):
    conn.execute("SELECT pgmq.create_partitioned('orders', '100', '1000', %s)", (premake,))
    assert id_bounds(conn, "pgmq.q_orders") == [(i, i + 100) for i in range(0, 100 * (premake + 1), 100)]
    assert part_config(conn, "pgmq.q_orders")["premake"] == premake


def test_create_partitioned_is_idempotent(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '100', 2)")
    ids = send_n(conn, "orders", 5)
    before = partitions(conn, "pgmq.q_orders"), partitions(conn, "pgmq.a_orders")
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '100', 2)")
    assert (partitions(conn, "pgmq.q_orders"), partitions(conn, "pgmq.a_orders")) == before
    assert column(conn, "SELECT msg_id FROM pgmq.q_orders ORDER BY msg_id") == ids
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 1
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 2
    # A repeated call re-applies the retention settings (as upstream does).
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '500', 3)")
    assert (part_config(conn, "pgmq.q_orders")["retention"], part_config(conn, "pgmq.q_orders")["premake"]) == ("500", 3)


def test_create_partitioned_refuses_a_plain_queue(conn, partman):
    conn.execute("SELECT pgmq.create('plain')")
    with raises_sql("P0001", 'queue "plain" already exists and is not partitioned'):
        conn.execute("SELECT pgmq.create_partitioned('plain')")
    assert conn.execute("SELECT is_partitioned FROM pgmq.meta").fetchall() == [(False,)]


def test_create_partitioned_refuses_another_partition_column(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '100')")
    with raises_sql("P0001", 'queue "orders" is already partitioned by RANGE (msg_id), not by enqueued_at'):
        conn.execute("SELECT pgmq.create_partitioned('orders', '1 day', '7 days')")


def test_create_partitioned_is_transactional(connect, partman):
    a = connect(autocommit=False)
    a.execute("SELECT pgmq.create_partitioned('tx')")
    a.rollback()
    assert scalar(a, "SELECT to_regclass('pgmq.q_tx')") is None
    assert scalar(a, "SELECT count(*) FROM pgmq.meta") == 0
    assert scalar(a, "SELECT count(*) FROM partman.part_config") == 0


@pytest.mark.parametrize("name", ["MixedCase", "with-hyphen", "has space", "x" * 47])
def test_unusual_names(conn, partman, name):
    conn.execute("SELECT pgmq.create_partitioned(%s, '10', '100')", (name,))
    msg_id = scalar(conn, "SELECT * FROM pgmq.send(%s, '{\"k\": 1}')", (name,))
    assert conn.execute("SELECT msg_id FROM pgmq.read(%s, 10, 1)", (name,)).fetchone() == (msg_id,)
    assert scalar(conn, "SELECT pgmq.archive(%s, %s::bigint)", (name, msg_id)) is True
    conn.execute("SELECT pgmq.run_partition_maintenance(%s)", (name,))
    assert scalar(conn, "SELECT pgmq.drop_queue(%s)", (name,)) is True
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 0
    # No table, partition or pg_partman template of the queue is left.
    assert scalar(conn, "SELECT count(*) FROM pg_class WHERE strpos(relname, lower(%s)) > 0", (name,)) == 0


def test_names_with_a_period_are_refused(conn, partman):
    with raises_sql("P0001", 'partitioned queue names cannot contain "."'):
        conn.execute("SELECT pgmq.create_partitioned('a.b')")
    with raises_sql("P0001", "queue name is too long, maximum length is 47 characters"):
        conn.execute("SELECT pgmq.create_partitioned(%s)", ("x" * 48,))


def test_pg_partman_in_another_schema(conn):
    if not partman_available(conn):
        pytest.skip(NO_PARTMAN)
    conn.execute("CREATE SCHEMA pm_elsewhere")
    conn.execute("CREATE EXTENSION pg_partman SCHEMA pm_elsewhere")
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '20', 1)")
    assert part_config(conn, "pgmq.q_orders", schema="pm_elsewhere")["retention"] == "20"
    send_n(conn, "orders", 45)
    conn.execute("SELECT pgmq.run_partition_maintenance('orders')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_orders_default") == 0
    assert scalar(conn, "SELECT pgmq.drop_queue('orders')") is True
    assert scalar(conn, "SELECT count(*) FROM pm_elsewhere.part_config") == 0


# ------------------------------------------------------------------ the message API

@pytest.fixture(params=["numeric", "time"])
def pqueue(request, conn, partman):
    if request.param == "numeric":
        conn.execute("SELECT pgmq.create_partitioned('jobs', '100', '1000', 2)")
    else:
        conn.execute("SELECT pgmq.create_partitioned('jobs', '1 day', '7 days', 2)")
    return "jobs"


def test_send_variants(conn, pqueue):
    a = scalar(conn, "SELECT * FROM pgmq.send('jobs', '{\"a\": 1}')")
    b = scalar(conn, "SELECT * FROM pgmq.send('jobs', '{\"b\": 1}', '{\"h\": 1}'::jsonb)")
    c = scalar(conn, "SELECT * FROM pgmq.send('jobs', '{\"c\": 1}', 60)")
    d = scalar(conn, "SELECT * FROM pgmq.send('jobs', '{\"d\": 1}', now() + interval '1 hour')")
    batch = column(conn, "SELECT * FROM pgmq.send_batch('jobs', ARRAY['{\"x\":1}','{\"x\":2}']::jsonb[], "
                         "ARRAY['{\"h\":1}','{\"h\":2}']::jsonb[])")
    assert [a, b, c, d] + batch == list(range(1, 7))
    assert scalar(conn, "SELECT headers FROM pgmq.q_jobs WHERE msg_id = %s", (b,)) == {"h": 1}
    assert scalar(conn, "SELECT vt > now() + interval '50 seconds' FROM pgmq.q_jobs WHERE msg_id = %s", (c,))
    # None of them went to the default partition.
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs_default") == 0


def test_read_pop_and_poll(conn, pqueue):
    ids = send_n(conn, "jobs", 5)
    cur = conn.execute("SELECT * FROM pgmq.read(queue_name => 'jobs', vt => 30, qty => 2)")
    assert [d.name for d in cur.description] == QCOLS
    rows = cur.fetchall()
    assert [r[0] for r in rows] == ids[:2] and all(r[1] == 1 for r in rows)
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1, '{\"n\": 4}')") == [ids[3]]
    assert column(conn, "SELECT msg_id FROM pgmq.read_with_poll('jobs', 30, 1, 1, 10)") == [ids[2]]
    assert column(conn, "SELECT msg_id FROM pgmq.pop('jobs')") == [ids[4]]
    assert column(conn, "SELECT msg_id FROM pgmq.pop('jobs', 5)") == []
    assert column(conn, "SELECT msg_id FROM pgmq.read_with_poll('jobs', 30, 1, 1, 50)") == []
    # An expired lease redelivers.
    conn.execute("SELECT pgmq.set_vt('jobs', %s::bigint, 0)", (ids[0],))
    assert conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 1)").fetchone() == (ids[0], 2)


def test_delete_archive_set_vt(conn, pqueue):
    ids = send_n(conn, "jobs", 6)
    assert scalar(conn, "SELECT pgmq.delete('jobs', %s::bigint)", (ids[0],)) is True
    assert scalar(conn, "SELECT pgmq.delete('jobs', %s::bigint)", (ids[0],)) is False
    assert column(conn, "SELECT * FROM pgmq.delete('jobs', %s::bigint[])", ([ids[1], 999],)) == [ids[1]]
    assert scalar(conn, "SELECT pgmq.archive('jobs', %s::bigint)", (ids[2],)) is True
    assert sorted(column(conn, "SELECT * FROM pgmq.archive('jobs', %s::bigint[])", ([ids[3], ids[4], 999],))) == ids[3:5]
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs ORDER BY msg_id") == ids[2:5]
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs_default") == 0
    assert scalar(conn, "SELECT message FROM pgmq.a_jobs WHERE msg_id = %s", (ids[3],)) == {"n": 4}

    row = conn.execute("SELECT msg_id, vt > now() + interval '50 seconds' FROM pgmq.set_vt('jobs', %s::bigint, 60)",
                       (ids[5],)).fetchone()
    assert row == (ids[5], True)
    at = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)
    assert conn.execute("SELECT vt FROM pgmq.set_vt('jobs', %s::bigint[], %s::timestamptz)",
                        ([ids[5]], at)).fetchone() == (at,)
    assert column(conn, "SELECT msg_id FROM pgmq.set_vt('jobs', 999::bigint, 1)") == []


def test_metrics_and_purge(conn, pqueue):
    send_n(conn, "jobs", 4)
    conn.execute("SELECT * FROM pgmq.read('jobs', 60, 1)")
    cur = conn.execute("SELECT * FROM pgmq.metrics('jobs')")
    m = dict(zip([d.name for d in cur.description], cur.fetchone(), strict=True))
    assert (m["queue_name"], m["queue_length"], m["queue_visible_length"], m["total_messages"]) == ("jobs", 4, 3, 4)
    assert m["default_partition_length"] == 0
    assert [r[0] for r in conn.execute("SELECT * FROM pgmq.metrics_all()").fetchall()] == ["jobs"]
    assert scalar(conn, "SELECT pgmq.purge_queue('jobs')") == 4
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


# ------------------------------------------------------------------ default partition, maintenance

def test_overflow_lands_in_default_and_shows_in_metrics(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('burst', '10', '1000', 1)")  # covers ids 0..19
    assert id_bounds(conn, "pgmq.q_burst") == [(0, 10), (10, 20)]
    ids = send_n(conn, "burst", 30)
    assert where(conn, "pgmq.q_burst", 19) == "pgmq.q_burst_p10"
    assert where(conn, "pgmq.q_burst", 20) == "pgmq.q_burst_default"
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_burst_default") == 11
    # Archiving overflowed messages fills the archive's default partition the same way.
    assert sorted(column(conn, "SELECT * FROM pgmq.archive('burst', ARRAY[29, 30]::bigint[])")) == [29, 30]
    assert where(conn, "pgmq.a_burst", 30) == "pgmq.a_burst_default"

    conn.execute("ANALYZE pgmq.q_burst_default")
    conn.execute("ANALYZE pgmq.a_burst_default")
    cur = conn.execute("SELECT queue_length, default_partition_length FROM pgmq.metrics('burst')")
    assert cur.fetchone() == (len(ids) - 2, 9 + 2)

    # A plain queue has no default partition.
    conn.execute("SELECT pgmq.create('plain')")
    assert scalar(conn, "SELECT default_partition_length FROM pgmq.metrics('plain')") is None


def test_maintenance_moves_overflow_out_of_default(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('burst', '10', '1000', 1)")
    ids = send_n(conn, "burst", 35)
    conn.execute("SELECT pgmq.archive('burst', ARRAY[25, 26]::bigint[])")
    conn.execute("SELECT * FROM pgmq.read('burst', 60, 3)")
    before = conn.execute("SELECT msg_id, read_ct, vt, message FROM pgmq.q_burst ORDER BY msg_id").fetchall()

    conn.execute("SELECT pgmq.run_partition_maintenance('burst')")

    assert scalar(conn, "SELECT count(*) FROM pgmq.q_burst_default") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_burst_default") == 0
    # Every message is still there, unchanged, now in a real partition.
    assert conn.execute("SELECT msg_id, read_ct, vt, message FROM pgmq.q_burst ORDER BY msg_id").fetchall() == before
    assert where(conn, "pgmq.q_burst", 31) == "pgmq.q_burst_p30"
    assert where(conn, "pgmq.a_burst", 25) == "pgmq.a_burst_p20"
    # and maintenance premade beyond the highest id again.
    assert id_bounds(conn, "pgmq.q_burst")[-1][1] > max(ids)
    conn.execute("ANALYZE pgmq.q_burst_default")
    conn.execute("ANALYZE pgmq.a_burst_default")
    assert scalar(conn, "SELECT default_partition_length FROM pgmq.metrics('burst')") == 0
    new = scalar(conn, "SELECT * FROM pgmq.send('burst', '{}')")
    assert where(conn, "pgmq.q_burst", new) == "pgmq.q_burst_p30"
    assert column(conn, "SELECT msg_id FROM pgmq.read('burst', 60, 2)") == [4, 5]


def test_maintenance_premakes_as_ids_advance(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('grow', '10', '1000', 2)")
    send_n(conn, "grow", 15)
    conn.execute("SELECT pgmq.run_partition_maintenance()")
    assert id_bounds(conn, "pgmq.q_grow") == [(i, i + 10) for i in range(0, 40, 10)]


def test_retention_drops_old_id_partitions(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('ret', '10', '20', 10)")
    ids = send_n(conn, "ret", 60)
    conn.execute("SELECT pgmq.archive('ret', %s::bigint[])", (ids[:5] + ids[-3:],))
    assert "q_ret_p0" in partitions(conn, "pgmq.q_ret")

    conn.execute("SELECT pgmq.run_partition_maintenance('ret')")

    remaining = column(conn, "SELECT msg_id FROM pgmq.q_ret ORDER BY msg_id")
    assert {"q_ret_p0", "q_ret_p10"}.isdisjoint(partitions(conn, "pgmq.q_ret"))
    assert min(remaining) >= 30 and remaining[-8:] == list(range(50, 58))
    # The archive has the same retention: its old partition went too, recent rows stayed.
    assert "a_ret_p0" not in partitions(conn, "pgmq.a_ret")
    assert column(conn, "SELECT msg_id FROM pgmq.a_ret ORDER BY msg_id") == ids[-3:]
    # Dropped tables, not kept detached.
    assert scalar(conn, "SELECT to_regclass('pgmq.q_ret_p0')") is None


def test_a_queue_kept_empty_gets_partitions_ahead_and_loses_old_empty_ones(conn, partman):
    """pg_partman finds the newest id in the rows: with the queue consumed to empty at each
    maintenance it made nothing ahead, and every later message went to the default partition
    (which then held every dead row the reads stepped over). The identity sequence leads now."""
    conn.execute("SELECT pgmq.create_partitioned('drained', '10', '30', 2)")
    kept = send_n(conn, "drained", 1)  # one message nobody consumes, in the first partition
    for _ in range(6):
        ids = send_n(conn, "drained", 10)
        conn.execute("SELECT pgmq.archive('drained', %s::bigint[])", (ids,))
        conn.execute("SELECT pgmq.run_partition_maintenance('drained')")
    conn.execute("SELECT pg_stat_force_next_flush()")
    assert scalar(conn, "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'q_drained_default'") == 0
    last = scalar(conn, "SELECT pg_sequence_last_value('pgmq.q_drained_msg_id_seq')")
    bounds = id_bounds(conn, "pgmq.q_drained")
    assert last == 61 and bounds[-1] == (80, 90)  # the partition of the next id and two ahead
    # empty partitions wholly older than 30 ids behind the sequence are gone; the one holding
    # the unconsumed message stays (pg_partman's own retention decides about rows)
    assert bounds[0] == (0, 10) and (10, 20) not in bounds and (20, 30) not in bounds
    assert column(conn, "SELECT msg_id FROM pgmq.read('drained', 30, 5)") == kept


def test_retention_drops_old_time_partitions(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('daily', '1 day', '2 days', 4)")
    old_day = scalar(conn, "SELECT to_char(now() - interval '3 days 12 hours', 'YYYY_MM_DD')")
    assert f"q_daily_p{old_day}" in partitions(conn, "pgmq.q_daily")
    conn.execute("""INSERT INTO pgmq.q_daily (enqueued_at, vt, message)
                    VALUES (now() - interval '3 days 12 hours', now(), '{"old": true}')""")
    conn.execute("""INSERT INTO pgmq.a_daily (msg_id, enqueued_at, archived_at, vt, message)
                    VALUES (0, now() - interval '4 days', now() - interval '3 days 12 hours', now(), '{}')""")
    fresh = scalar(conn, "SELECT * FROM pgmq.send('daily', '{\"new\": true}')")

    conn.execute("SELECT pgmq.run_partition_maintenance()")  # every partitioned queue

    assert column(conn, "SELECT msg_id FROM pgmq.q_daily") == [fresh]
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_daily") == 0
    assert f"q_daily_p{old_day}" not in partitions(conn, "pgmq.q_daily")
    assert f"a_daily_p{old_day}" not in partitions(conn, "pgmq.a_daily")
    today = scalar(conn, "SELECT to_char(now(), 'YYYY_MM_DD')")
    assert f"q_daily_p{today}" in partitions(conn, "pgmq.q_daily")


def test_run_partition_maintenance_errors(conn, partman):
    with raises_sql("42P01", 'queue "nope" does not exist'):
        conn.execute("SELECT pgmq.run_partition_maintenance('nope')")
    conn.execute("SELECT pgmq.create('plain')")
    with raises_sql("42809", 'queue "plain" is not partitioned'):
        conn.execute("SELECT pgmq.run_partition_maintenance('plain')")
    # All queues: plain ones are skipped.
    conn.execute("SELECT pgmq.run_partition_maintenance()")
    conn.execute("SELECT pgmq.run_partition_maintenance(NULL)")


def test_run_partition_maintenance_documents_how_it_runs(conn):
    comment = scalar(conn, "SELECT obj_description('pgmq.run_partition_maintenance(text)'::regprocedure)")
    assert "pg_partman_bgw" in comment and "pg_cron" in comment


# ------------------------------------------------------------------ drop_queue

def test_drop_queue_removes_part_config_rows_and_templates(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('gone', '10', '100')")
    conn.execute("SELECT pgmq.create_partitioned('kept', '1 day', '7 days')")
    send_n(conn, "gone", 30)
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 4
    assert scalar(conn, "SELECT to_regclass('partman.template_pgmq_q_gone')") is not None

    assert scalar(conn, "SELECT pgmq.drop_queue('gone')") is True
    assert sorted(column(conn, "SELECT parent_table FROM partman.part_config")) == ["pgmq.a_kept", "pgmq.q_kept"]
    assert scalar(conn, "SELECT to_regclass('partman.template_pgmq_q_gone')") is None
    assert scalar(conn, "SELECT to_regclass('partman.template_pgmq_a_gone')") is None
    assert scalar(conn, "SELECT to_regclass('partman.template_pgmq_q_kept')") is not None
    assert scalar(conn, "SELECT count(*) FROM pg_class WHERE relname LIKE '%gone%'") == 0
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == ["kept"]
    # pg_partman's own maintenance of everything still works (no dangling config).
    conn.execute("SELECT partman.run_maintenance()")
    # and the name can be used again.
    conn.execute("SELECT pgmq.create_partitioned('gone', '10', '100')")
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 4


def test_drop_queue_of_a_converted_archive_removes_its_config(conn, partman):
    conn.execute("SELECT pgmq.create('plain')")
    conn.execute("SELECT pgmq.convert_archive_partitioned('plain', '10', '100')")
    assert scalar(conn, "SELECT pgmq.drop_queue('plain')") is True
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 0


def test_drop_plain_queue_with_pg_partman_present(conn, partman):
    conn.execute("SELECT pgmq.create('plain')")
    conn.execute("SELECT pgmq.create_partitioned('part')")
    assert scalar(conn, "SELECT pgmq.drop_queue('plain')") is True
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 2


# ------------------------------------------------------------------ convert_archive_partitioned

def test_convert_archive_partitioned(conn, partman):
    conn.execute("SELECT pgmq.create('conv')")
    ids = send_n(conn, "conv", 25)
    conn.execute("SELECT pgmq.archive('conv', ARRAY[1, 2]::bigint[])")

    conn.execute("SELECT pgmq.convert_archive_partitioned('conv', '10', '50')")

    # The old archive keeps its rows under a new name; the new one starts empty.
    assert column(conn, "SELECT msg_id FROM pgmq.a_conv_old ORDER BY msg_id") == [1, 2]
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_conv") == 0
    assert partkey(conn, "pgmq.a_conv") == "RANGE (msg_id)"
    assert columns(conn, "pgmq.a_conv") == ACOLS
    assert indexes(conn, "pgmq.a_conv") >= {"pgmq.a_conv_pkey", "pgmq.archived_at_idx_conv"}
    assert indexes(conn, "pgmq.a_conv_old") == {"pgmq.a_conv_old_pkey", "pgmq.archived_at_idx_conv_old"}
    cfg = part_config(conn, "pgmq.a_conv")
    assert (cfg["control"], cfg["partition_interval"], cfg["retention"]) == ("msg_id", "10", "50")
    assert (cfg["retention_keep_table"], cfg["retention_keep_index"], cfg["infinite_time_partitions"]) == (False, False, True)
    # The queue itself is unchanged.
    assert conn.execute("SELECT is_partitioned FROM pgmq.meta").fetchall() == [(False,)]
    assert scalar(conn, "SELECT relkind FROM pg_class WHERE oid = 'pgmq.q_conv'::regclass") == "r"

    # Partitions start at the queue's current ids, so new archive rows do not overflow.
    assert sorted(column(conn, "SELECT * FROM pgmq.archive('conv', ARRAY[20, 25]::bigint[])")) == [20, 25]
    assert where(conn, "pgmq.a_conv", 20) == "pgmq.a_conv_p20"
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_conv_default") == 0
    assert len(ids) == 25


def test_convert_archive_partitioned_by_time(conn, partman):
    conn.execute("SELECT pgmq.create('conv')")
    conn.execute("SELECT pgmq.convert_archive_partitioned('conv', '1 day', '30 days')")
    assert partkey(conn, "pgmq.a_conv") == "RANGE (archived_at)"
    # A key must contain the partition column: none for time partitioning.
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE contype = 'p' AND conrelid = 'pgmq.a_conv'::regclass") == 0
    msg_id = scalar(conn, "SELECT * FROM pgmq.send('conv', '{}')")
    assert scalar(conn, "SELECT pgmq.archive('conv', %s::bigint)", (msg_id,)) is True
    today = scalar(conn, "SELECT to_char(now(), 'YYYY_MM_DD')")
    assert where(conn, "pgmq.a_conv", msg_id) == f"pgmq.a_conv_p{today}"


def test_convert_archive_partitioned_notices(conn, partman):
    # upstream's texts, quirks included: "%s" prints the name then an "s"; "does not exists"
    seen = notices(conn)
    conn.execute("SELECT pgmq.convert_archive_partitioned('nope')")
    assert seen == [("NOTICE", "Table a_nopes does not exists")]
    conn.execute("SELECT pgmq.create_partitioned('part')")
    seen.clear()
    conn.execute("SELECT pgmq.convert_archive_partitioned('part')")
    assert seen == [("NOTICE", "Table a_parts is already partitioned")]
    conn.execute("SELECT pgmq.create('plain')")
    seen.clear()
    conn.execute("SELECT pgmq.convert_archive_partitioned(table_name => 'plain')")
    assert seen == []
    conn.execute("SELECT pgmq.convert_archive_partitioned(table_name => 'plain')")
    assert seen == [("NOTICE", "Table a_plains is already partitioned")]
    assert scalar(conn, "SELECT count(*) FROM partman.part_config") == 3
    assert scalar(conn, "SELECT to_regclass('pgmq.a_plain_old_old')") is None


def test_dedup_sends_into_a_partitioned_queue(conn, partman):
    # the message's id comes from the partitioned table's own identity sequence
    conn.execute("SELECT pgmq.create_partitioned('pq', '10', '20')")
    first = scalar(conn, "SELECT pgmq.send('pq', '{}', '{\"x-pgmq-dedup-id\": \"k\"}'::jsonb)")
    assert scalar(conn, "SELECT pgmq.send('pq', '{}', '{\"x-pgmq-dedup-id\": \"k\"}'::jsonb)") == first
    assert scalar(conn, "SELECT pgmq.send('pq', '{}')") == first + 1
    assert scalar(conn, "SELECT pgmq.send('pq', '{}', '{\"x-pgmq-dedup-id\": \"k2\"}'::jsonb)") == first + 2
    assert column(conn, "SELECT msg_id FROM pgmq.q_pq ORDER BY msg_id") == [first, first + 1, first + 2]
