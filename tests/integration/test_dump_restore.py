"""pg_dump / pg_restore keeps queues, their messages, archives and the catalog rows."""

from __future__ import annotations

import subprocess

import psycopg

from pgmq_build.cluster import pg_bindir
from tests.helpers import column, scalar


def test_dump_and_restore_keep_queues_and_messages(conn, dsn, tmp_path, pg_cluster):
    conn.execute("SELECT pgmq.create('Orders')")
    conn.execute("SELECT pgmq.create_unlogged('scratch')")
    conn.execute("""SELECT pgmq.send_batch('Orders', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[])""")
    conn.execute("SELECT pgmq.archive('Orders', 1::bigint)")
    conn.execute("SELECT * FROM pgmq.read('Orders', 300, 1)")

    dump = tmp_path / "db.dump"
    bindir = pg_bindir()
    subprocess.run([str(bindir / "pg_dump"), "-Fc", "-f", str(dump), "-d", dsn], check=True)
    conn.execute("CREATE DATABASE restored")
    target = dsn.replace(f"dbname={conn.info.dbname}", "dbname=restored")
    try:
        subprocess.run([str(bindir / "pg_restore"), "--exit-on-error", "-d", target, str(dump)], check=True)
        with psycopg.connect(target, autocommit=True) as r:
            assert column(r, "SELECT queue_name FROM pgmq.list_queues()") == ["Orders", "scratch"]
            assert r.execute("SELECT msg_id, read_ct, message FROM pgmq.q_orders ORDER BY msg_id").fetchall() == [
                (2, 1, {"n": 2}), (3, 0, {"n": 3})]
            assert column(r, "SELECT msg_id FROM pgmq.a_orders") == [1]
            # the identity sequence continues where it was, and the API works on restored queues
            assert scalar(r, "SELECT pgmq.send('Orders', '{\"n\":4}')") == 4
            assert column(r, "SELECT msg_id FROM pgmq.read('Orders', 30, 5)") == [3, 4]
            assert scalar(r, "SELECT total_messages FROM pgmq.metrics('Orders')") == 4
            assert scalar(r, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") == "2.0.0"
    finally:
        conn.execute("DROP DATABASE restored WITH (FORCE)")
