"""Queue management: create / create_unlogged / drop / purge / list, names and validation."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import column, notices, raises_sql, scalar


def relpersistence(conn, table):
    return scalar(conn, "SELECT relpersistence FROM pg_class WHERE oid = %s::regclass", (table,))


def test_create_makes_tables_indexes_and_meta_row(conn):
    conn.execute("SELECT pgmq.create('orders')")
    assert conn.execute("SELECT * FROM pgmq.list_queues()").fetchall()[0][:3] == ("orders", False, False)
    cols = column(conn, """SELECT attname FROM pg_attribute WHERE attrelid = 'pgmq.q_orders'::regclass
                          AND attnum > 0 AND NOT attisdropped ORDER BY attnum""")
    assert cols[:7] == ["msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers"]
    acols = column(conn, """SELECT attname FROM pg_attribute WHERE attrelid = 'pgmq.a_orders'::regclass
                           AND attnum > 0 AND NOT attisdropped ORDER BY attnum""")
    assert acols[:8] == ["msg_id", "read_ct", "enqueued_at", "last_read_at", "archived_at", "vt",
                         "message", "headers"]
    idx = set(column(conn, "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgmq'"))
    assert {"q_orders_pkey", "q_orders_vt_idx", "a_orders_pkey", "archived_at_idx_orders"} <= idx
    assert scalar(conn, "SELECT pg_get_serial_sequence('pgmq.q_orders', 'msg_id')") == "pgmq.q_orders_msg_id_seq"
    assert relpersistence(conn, "pgmq.q_orders") == "p"


def test_create_is_idempotent_and_keeps_messages(conn):
    conn.execute("SELECT pgmq.create('orders')")
    conn.execute("""SELECT pgmq.send('orders', '{"a": 1}')""")
    conn.execute("SELECT pgmq.create('orders')")
    conn.execute("SELECT pgmq.create_non_partitioned('orders')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_orders") == 1


def test_create_unlogged_keeps_archive_logged(conn):
    conn.execute("SELECT pgmq.create_unlogged(queue_name => 'fast')")
    assert relpersistence(conn, "pgmq.q_fast") == "u"
    assert relpersistence(conn, "pgmq.a_fast") == "p"
    assert conn.execute("SELECT is_partitioned, is_unlogged FROM pgmq.meta").fetchone() == (False, True)


@pytest.mark.parametrize("name", ["MixedCase", "with-hyphen", "has space", 'quote"in', "x" * 47, "ünïcode"])
def test_unusual_names_work_end_to_end(conn, name):
    conn.execute("SELECT pgmq.create(%s)", (name,))
    msg_id = scalar(conn, "SELECT * FROM pgmq.send(%s, '{\"k\": 1}')", (name,))
    assert conn.execute("SELECT msg_id FROM pgmq.read(%s, 10, 1)", (name,)).fetchone() == (msg_id,)
    assert scalar(conn, "SELECT pgmq.archive(%s, %s::bigint)", (name, msg_id)) is True
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == [name]
    assert scalar(conn, "SELECT pgmq.drop_queue(%s)", (name,)) is True
    assert scalar(conn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' "
                        "AND tablename ~ '^[qa]_'") == 0


def test_name_too_long(conn):
    # upstream's error (P0001, its text) from upstream's function; ours from our own functions
    with raises_sql("P0001", "queue name is too long, maximum length is 47 characters"):
        conn.execute("SELECT pgmq.create(%s)", ("x" * 48,))
    with raises_sql("42622", "queue name is too long, maximum length is 47 characters"):
        conn.execute("CALL pgmq.create_queue(%s)", ("x" * 48,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_multibyte_name_too_long_in_bytes(conn):
    """47 characters fit upstream's limit but not the 63-byte identifiers: our refusal (42622)."""
    with raises_sql("42622", "queue name is too long, maximum length is 47 bytes"):
        conn.execute("SELECT pgmq.create(%s)", ("\u00e9" * 24,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


@pytest.mark.parametrize("name", ["a$b", "a;b", "a--b", "a'b", "x'; DROP TABLE pgmq.meta; --"])
def test_injection_characters_rejected(conn, name):
    # upstream's text ends in a backslash and a quote
    with raises_sql("P0001", "queue name contains invalid characters: $, ;, --, or \\'"):
        conn.execute("SELECT pgmq.create(%s)", (name,))
    with raises_sql("P0001", "queue name contains invalid characters: $, ;, --, or \\'"):
        conn.execute("SELECT pgmq.send(%s, '{}')", (name,))
    with raises_sql("42602", "queue name contains invalid characters: $, ;, --, or \\'"):
        conn.execute("SELECT pgmq.enable_notify_msg_id(%s)", (name,))  # ours
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


@pytest.mark.parametrize("name,state,message", [
    (None, "22004", "null values cannot be formatted as an SQL identifier"),  # upstream's error
    ("", "42602", "queue name cannot be NULL or empty"),                      # our refusal
])
def test_null_and_empty_names_rejected(conn, name, state, message):
    with raises_sql(state, message):
        conn.execute("SELECT pgmq.create(%s::text)", (name,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_names_differing_only_in_case_conflict(conn):
    conn.execute("SELECT pgmq.create('Orders')")
    with raises_sql("42P07", 'queue "orders" conflicts with existing queue "Orders"'):
        conn.execute("SELECT pgmq.create('orders')")
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == ["Orders"]


def test_format_table_name_and_validate(conn):
    assert scalar(conn, "SELECT pgmq.format_table_name('MyQueue', 'q')") == "q_myqueue"
    assert scalar(conn, "SELECT pgmq.format_table_name(queue_name => 'X', prefix => 'a')") == "a_x"
    conn.execute("SELECT pgmq.validate_queue_name(%s)", ("y" * 47,))
    with raises_sql("P0001", "queue name is too long, maximum length is 47 characters"):
        conn.execute("SELECT pgmq.validate_queue_name(%s)", ("y" * 48,))
    with raises_sql("42622", "queue name is too long, maximum length is 47 characters"):
        conn.execute("SELECT pgmq._validate_queue_name(%s)", ("y" * 48,))


def test_drop_queue(conn):
    conn.execute("SELECT pgmq.create('gone')")
    conn.execute("SELECT pgmq.send('gone', '{}')")
    assert scalar(conn, "SELECT pgmq.drop_queue('gone')") is True
    assert scalar(conn, "SELECT to_regclass('pgmq.q_gone')") is None
    assert scalar(conn, "SELECT to_regclass('pgmq.a_gone')") is None
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_drop_missing_queue_notices_and_returns_false(conn):
    seen = notices(conn)
    assert scalar(conn, "SELECT pgmq.drop_queue('nope')") is False
    assert ("NOTICE", "pgmq queue `nope` does not exist") in seen


def test_deprecated_drop_queue_warns_then_drops(conn):
    conn.execute("SELECT pgmq.create('old')")
    seen = notices(conn)
    assert scalar(conn, "SELECT pgmq.drop_queue('old', false)") is True
    assert any(sev == "WARNING" and "deprecated" in msg for sev, msg in seen)
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_detach_archive_is_a_warning_only(conn, queue):
    seen = notices(conn)
    conn.execute("SELECT pgmq.detach_archive(%s)", (queue,))
    assert any(sev == "WARNING" and "no-op" in msg for sev, msg in seen)
    assert scalar(conn, "SELECT to_regclass('pgmq.a_jobs')::text") == "pgmq.a_jobs"


def test_purge_queue_counts_and_keeps_archive(conn, queue):
    conn.execute("SELECT pgmq.send_batch('jobs', array_fill('{}'::jsonb, ARRAY[5]))")
    conn.execute("SELECT pgmq.archive('jobs', 1::bigint)")
    assert scalar(conn, "SELECT pgmq.purge_queue('jobs')") == 4
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 1


def test_unknown_queue_is_a_clear_error(conn):
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.send('missing', '{}')")
    with raises_sql("42P01"):
        conn.execute("SELECT * FROM pgmq.read('missing', 1, 1)")
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.purge_queue('missing')")
    with raises_sql("42P01"):
        conn.execute("SELECT * FROM pgmq.metrics('missing')")


def test_acquire_queue_lock_serialises_create(connect):
    a, b = connect(autocommit=False), connect()
    a.execute("SELECT pgmq.acquire_queue_lock('locked')")
    b.execute("SET lock_timeout = '200ms'")
    with raises_sql("55P03"):
        b.execute("SELECT pgmq.create('locked')")
    a.rollback()
    b.execute("SELECT pgmq.create('locked')")
    assert scalar(b, "SELECT count(*) FROM pgmq.meta") == 1


def test_create_and_drop_are_transactional(connect):
    a = connect(autocommit=False)
    a.execute("SELECT pgmq.create('tx')")
    a.rollback()
    assert scalar(a, "SELECT to_regclass('pgmq.q_tx')") is None
    assert scalar(a, "SELECT count(*) FROM pgmq.meta") == 0


def test_queue_tables_survive_drop_extension(conn, queue):
    conn.execute("SELECT pgmq.send('jobs', '{\"keep\": true}')")
    conn.execute("DROP EXTENSION pgmq CASCADE")
    assert scalar(conn, "SELECT message FROM pgmq.q_jobs") == {"keep": True}


def test_queue_tables_are_not_extension_members(conn, queue):
    members = column(conn, """SELECT c.relname FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
                             WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgmq')
                               AND d.classid = 'pg_class'::regclass""")
    assert "meta" in members
    assert not {"q_jobs", "a_jobs", "q_jobs_msg_id_seq"} & set(members)


def test_config_dump_registers_meta(conn):
    cfg = column(conn, "SELECT unnest(extconfig)::regclass::text FROM pg_extension WHERE extname = 'pgmq'")
    assert "pgmq.meta" in cfg


def test_pg_monitor_can_read_but_not_write(conn, queue):
    conn.execute("CREATE ROLE mon LOGIN IN ROLE pg_monitor")
    conn.execute("SET ROLE mon")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT pgmq.send('jobs', '{}')")
    conn.execute("RESET ROLE")
