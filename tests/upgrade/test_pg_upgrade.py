"""A database using pgmq goes through pg_upgrade (docs/guides/upgrading.md): its catalogs hold no
reg* column whose OIDs pg_upgrade does not preserve (2.8.0's callbacks.callback was a
regprocedure, so `pg_upgrade --check` refused every database with the extension), and queues,
messages and callbacks work on the new cluster as before."""

from __future__ import annotations

import psycopg

from pgmq_build.cluster import TempCluster, pg_bindir
from tests.helpers import scalar


def test_a_database_with_queues_and_callbacks_goes_through_pg_upgrade():
    old, new = TempCluster(), TempCluster()
    try:
        old.start()
        with psycopg.connect(old.dsn(), autocommit=True) as c:
            c.execute("CREATE ROLE app LOGIN")
            c.execute("CREATE DATABASE appdb OWNER app")
        with psycopg.connect(old.dsn("appdb"), autocommit=True) as c:
            c.execute("CREATE EXTENSION pgmq")
        with psycopg.connect(old.dsn("appdb").replace("user=postgres", "user=app"), autocommit=True) as app:
            app.execute("SELECT pgmq.create('orders')")
            app.execute("CREATE TABLE seen (n int)")
            app.execute("CREATE PROCEDURE handle(msg jsonb) LANGUAGE sql "
                        "AS $$ INSERT INTO seen VALUES ((msg->>'n')::int) $$")
            app.execute("CALL pgmq.register_callback('orders', 'handle(jsonb)')")
            app.execute("""SELECT pgmq.send('orders', jsonb_build_object('n', g)) FROM generate_series(1, 3) g""")
            # a typed queue: its type is held as a regtype (pg_upgrade keeps type OIDs)
            app.execute("CREATE TYPE mood AS ENUM ('ok', 'sad')")
            app.execute("SELECT pgmq.create('moods', 'mood'::regtype)")
            app.execute("SELECT pgmq.send_payload('moods', 'sad'::mood)")
        old.pg_ctl("stop")
        new.start()
        new.pg_ctl("stop")

        bindir = str(pg_bindir())
        upgrade = new._run([f"{bindir}/pg_upgrade", "-b", bindir, "-B", bindir,
                            "-d", str(old.datadir), "-D", str(new.datadir), "-U", "postgres",
                            "-p", str(old.port), "-P", str(new.port), "-s", str(new.base)],
                           check=False)
        assert upgrade.returncode == 0, upgrade.stdout[-3000:] + upgrade.stderr[-2000:]

        new.pg_ctl("start")
        with psycopg.connect(new.dsn("appdb").replace("user=postgres", "user=app"), autocommit=True) as app:
            assert scalar(app, "SELECT count(*) FROM pgmq.q_orders") == 3
            assert scalar(app, "SELECT callback FROM pgmq.list_callbacks()") == "public.handle(jsonb)"
            app.execute("CALL pgmq.dispatch('orders')")
            assert scalar(app, "SELECT array_agg(n ORDER BY n)::text FROM seen") == "{1,2,3}"
            assert scalar(app, "SELECT count(*) FROM pgmq.q_orders") == 0
            assert scalar(app, "SELECT payload::text FROM pgmq.pop_payload('moods', 1, NULL::mood)") == "sad"
            app.execute("SELECT pgmq.send_payload('moods', 'ok'::mood)")
    finally:
        old.stop()
        new.stop()
