"""pg_dump / pg_restore keeps queues, their messages, archives and the catalog rows."""

from __future__ import annotations

from pgmq_build.manifest import MANIFEST
from tests.helpers import column, restored_copy, scalar

# The queues whose branch the static send path holds.
STATIC_QUEUES = """SELECT m[1] FROM regexp_matches(
                       (SELECT prosrc FROM pg_proc WHERE oid = 'pgmq._static_send(timestamptz, jsonb, jsonb, text)'::regprocedure),
                       'IF \\$4 OPERATOR\\(pg_catalog\\.=\\) ''([^'']*)'' THEN', 'g') AS m ORDER BY 1"""


def test_dump_and_restore_keep_queues_and_messages(conn, dsn, tmp_path, pg_cluster):
    conn.execute("SELECT pgmq.create('Orders')")
    conn.execute("SELECT pgmq.create_unlogged('scratch')")
    conn.execute("""SELECT pgmq.send_batch('Orders', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[])""")
    conn.execute("SELECT pgmq.archive('Orders', 1::bigint)")
    conn.execute("SELECT * FROM pgmq.read('Orders', 300, 1)")

    with restored_copy(conn, dsn, tmp_path) as r:
        assert column(r, "SELECT queue_name FROM pgmq.list_queues()") == ["Orders", "scratch"]
        # loading pgmq.meta rebuilt the static paths (their bodies are not in the dump)
        assert column(r, STATIC_QUEUES) == ["Orders", "scratch"]
        assert r.execute("SELECT msg_id, read_ct, message FROM pgmq.q_orders ORDER BY msg_id").fetchall() == [
            (2, 1, {"n": 2}), (3, 0, {"n": 3})]
        assert column(r, "SELECT msg_id FROM pgmq.a_orders") == [1]
        # the identity sequence continues where it was, and the API works on restored queues
        assert scalar(r, "SELECT pgmq.send('Orders', '{\"n\":4}')") == 4
        assert column(r, "SELECT msg_id FROM pgmq.read('Orders', 30, 5)") == [3, 4]
        assert scalar(r, "SELECT total_messages FROM pgmq.metrics('Orders')") == 4
        assert scalar(r, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") == MANIFEST.version


def test_dump_and_restore_keep_exchanges_bindings_and_access(conn, dsn, tmp_path, make_role):
    role = make_role("restore_reader")
    conn.execute("SELECT pgmq.create('eu')")
    conn.execute("SELECT pgmq.create('logs')")
    conn.execute("SELECT pgmq.create_exchange('orders', 'direct')")
    conn.execute("SELECT pgmq.create_exchange('orders_ae')")
    conn.execute("SELECT pgmq.bind_queue('eu', 'orders', 'eu')")
    conn.execute("SELECT pgmq.bind_queue('logs', 'orders_ae', NULL)")
    conn.execute("SELECT pgmq.set_unroutable('orders', 'error', 'orders_ae')")
    conn.execute("SELECT pgmq.bind_topic('app.*', 'logs')")
    conn.execute("CALL pgmq.revoke_publish_access('orders', 'public')")
    conn.execute(f"CALL pgmq.grant_publish_access('orders', '{role}')")
    conn.execute(f"CALL pgmq.grant_queue_access('eu', '{role}')")

    with restored_copy(conn, dsn, tmp_path) as r:
        assert r.execute("SELECT exchange_name, exchange_type, on_unroutable, alternate_exchange "
                         "FROM pgmq.list_exchanges()").fetchall() == [
            ("orders", "direct", "error", "orders_ae"), ("orders_ae", "fanout", "notice", None),
            ("pgmq.topic", "topic", "notice", None)]
        assert column(r, "SELECT role_name FROM pgmq.exchange_publishers "
                         "WHERE exchange_name = 'orders'") == [role]
        assert column(r, "SELECT pattern FROM pgmq.list_topic_bindings()") == ["app.*"]
        assert column(r, "SELECT queue_name FROM pgmq.publish('orders', 'us', '{}')") == ["logs"]
        assert scalar(r, "SELECT pgmq.send_topic('app.x', '{}')") == 1
        assert scalar(r, "SELECT has_table_privilege(%s, 'pgmq.q_eu', 'INSERT')", (role,)) is True
        assert scalar(r, "SELECT count(*) FROM pg_policies WHERE schemaname = 'pgmq'") > 0


def test_dump_and_restore_keep_streams_and_positions(conn, dsn, tmp_path):
    """Segments, ticks, subscriptions and a batch out survive; the restored stream goes on."""
    conn.execute("SELECT pgmq.create_stream('ev')")
    conn.execute("SELECT pgmq.subscribe('ev', 'a', 'earliest')")
    conn.execute("SELECT pgmq.stream_send('ev', '{\"n\": 1}')")
    batch = scalar(conn, "SELECT batch_id FROM pgmq.stream_read('ev', 'a')")
    with restored_copy(conn, dsn, tmp_path) as r:
        assert scalar(r, "SELECT count(*) FROM pgmq.stream_batches") == 1
        # the static paths followed the restored catalog (features/streams, paths.sql.j2)
        assert 'INSERT INTO pgmq."s_ev$0" ' in scalar(r, "SELECT prosrc FROM pg_proc WHERE oid = 'pgmq.stream_send'::regproc")
        r.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (batch,))
        r.execute("SELECT pgmq.stream_send('ev', '{\"n\": 2}')")
        assert column(r, "SELECT message->>'n' FROM pgmq.stream_read('ev', 'a')") == ["2"]
        r.execute("SELECT pgmq.stream_tick()")  # tick ids go on past the restored ones
        assert scalar(r, "SELECT count(DISTINCT tick_id) = count(*) FROM pgmq.stream_ticks")
