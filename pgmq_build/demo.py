"""`pgmq-build demo`: a short narrated tour of the queue on a throwaway server (or --dsn)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator

import psycopg

from . import install
from .cluster import TempCluster

Echo = Callable[[str], None]


@contextlib.contextmanager
def _server(dsn: str | None, keep: bool, echo: Echo) -> Iterator[str]:
    if dsn:
        echo(f"Using the server at {dsn!r}.")
        yield dsn
        return
    try:
        install.install_files()
        echo("Installed the extension files into the local PostgreSQL's share directory.")
    except install.InstallError as exc:
        echo(f"(extension files not installed: {exc}; the standalone script will be used)")
    echo("Starting a throwaway PostgreSQL server...")
    cluster = TempCluster(keep=keep)
    with cluster:
        who = f" as OS user '{cluster._user.pw_name}'" if cluster._user else ""
        echo(f"  running{who} on 127.0.0.1:{cluster.port}, data in {cluster.base}")
        yield cluster.dsn()
    echo("Stopped the throwaway server" + (f" (kept {cluster.base})." if keep else " and removed its files."))


def _show(echo: Echo, sql: str, rows: list[tuple]) -> None:
    echo(f"  sql> {sql}")
    for row in rows:
        echo("       " + " | ".join(_fmt(v) for v in row))


def _fmt(value: object) -> str:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if hasattr(value, "isoformat"):
        return value.isoformat(timespec="seconds")  # type: ignore[union-attr]
    return str(value)


def run_demo(dsn: str | None = None, keep: bool = False, echo: Echo = print) -> None:
    queue = f"demo_orders_{os.getpid()}"
    with _server(dsn, keep, echo) as url, psycopg.connect(url, autocommit=True) as conn:
        how = install.ensure_pgmq(conn)
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
        echo(f"pgmq is ready: {how}" + (f", extension version {version[0]}" if version else ""))

        def q(sql: str, *params: object) -> list[tuple]:
            rows = conn.execute(sql, params).fetchall()
            _show(echo, sql.replace("%s", "{}").format(*[repr(p) for p in params]), rows)
            return rows

        echo("\n1. Create a queue: a table pgmq.q_<name> plus its archive pgmq.a_<name>.")
        q("SELECT pgmq.create(%s)", queue)

        echo("\n2. Send three orders; one is delayed by 60 seconds. Each send returns the new msg_id.")
        q("SELECT * FROM pgmq.send(%s, %s::jsonb)", queue, '{"order": 1, "item": "book"}')
        q("SELECT * FROM pgmq.send(%s, %s::jsonb, %s::jsonb)", queue, '{"order": 2, "item": "pen"}',
          '{"x-trace": "abc"}')
        q("SELECT * FROM pgmq.send(%s, %s::jsonb, 60)", queue, '{"order": 3, "item": "later"}')

        echo("\n3. Read with a 30-second lease: the messages stay but are hidden from other readers.")
        leased = q("SELECT msg_id, read_ct, message FROM pgmq.read(%s, 30, 5)", queue)
        echo(f"   {len(leased)} messages leased; the delayed one is not visible yet.")
        q("SELECT msg_id FROM pgmq.read(%s, 30, 5)", queue)
        echo("   A second read gets nothing: the leased messages are invisible until their vt passes.")

        echo("\n4. Done with order 1: archive it (kept in pgmq.a_<name> for audit).")
        first = leased[0][0]
        q("SELECT pgmq.archive(%s, %s::bigint)", queue, first)

        echo("\n5. Give order 2 back early: set its visibility timeout to 0, then pop it (read + delete).")
        second = leased[1][0]
        q("SELECT msg_id, vt FROM pgmq.set_vt(%s, %s::bigint, 0)", queue, second)
        q("SELECT msg_id, message FROM pgmq.pop(%s)", queue)

        echo("\n6. Metrics: one message left (the delayed one), three sent in total.")
        q("SELECT queue_name, queue_length, queue_visible_length, total_messages FROM pgmq.metrics(%s)",
          queue)
        q("SELECT msg_id, archived_at IS NOT NULL AS archived, message FROM pgmq.a_" + queue)

        exchange = f"demo_regions_{os.getpid()}"
        echo("\n7. Route through an exchange: bind the queue to a direct exchange under key 'eu', then"
             "\n   publish by routing key. publish returns one row per queue that got a copy.")
        q("SELECT pgmq.create_exchange(%s::name, 'direct')", exchange)
        q("SELECT pgmq.bind_queue(%s::name, %s::name, 'eu')", queue, exchange)
        q("SELECT * FROM pgmq.publish(%s, 'eu', %s::jsonb)", exchange, '{"order": 4, "item": "map"}')
        q("SELECT count(*) AS copies FROM pgmq.publish(%s, 'us', %s::jsonb)", exchange, '{"order": 5}')
        echo("   Nothing is bound to 'us': the publish wrote nothing and said so in a NOTICE"
             "\n   (pgmq.set_unroutable can make that an error or send it to an alternate exchange).")

        echo("\n8. Clean up: dropping the exchange with cascade drops the queues bound to it.")
        q("SELECT pgmq.drop_exchange(%s::name, true)", exchange)
        q("SELECT count(*) AS queues_left FROM pgmq.meta WHERE queue_name = %s", queue)
        echo("\nDemo finished: create, send, read with a lease, archive, set_vt, pop, metrics, exchanges.")


def run_migrate_demo(dsn: str | None = None, keep: bool = False, echo: Echo = print) -> None:
    """Upstream PGMQ (its SQL-only install, from the PyPI package) with a queue in use becomes
    ours in place: `pgmq-build migrate`, then the messages are shown to be there."""
    from psycopg import sql

    from . import migrate

    version, upstream = migrate.upstream_sql()
    name = f"pgmq_migrate_demo_{os.getpid()}"
    with _server(dsn, keep, echo) as url, psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        target = psycopg.conninfo.make_conninfo(url, dbname=name)
        echo(f"Made a scratch database {name} for the demo.")
        try:
            with psycopg.connect(target, autocommit=True) as conn:

                def q(text: str) -> list[tuple]:
                    rows = conn.execute(text).fetchall()
                    _show(echo, text, rows)
                    return rows

                echo(f"\n1. Install upstream PGMQ {version} from the PyPI package's pgmq.sql, as an SQL-only install"
                     "\n   (what pgmq-py's installer and managed databases do: schema pgmq, no extension).")
                conn.execute(upstream)
                echo("\n2. Use it with upstream's functions: a queue, three orders, one leased, one archived.")
                conn.execute("SELECT pgmq.create('orders')")
                conn.execute("SELECT pgmq.send_batch('orders', ARRAY['{\"order\": 1}', '{\"order\": 2}', "
                             "'{\"order\": 3}']::jsonb[])")
                conn.execute("SELECT * FROM pgmq.read('orders', 300, 1)")
                conn.execute("SELECT pgmq.archive('orders', 2::bigint)")
                conn.execute("SELECT pgmq.bind_topic('shop.*', 'orders')")
                q("SELECT msg_id, read_ct, message FROM pgmq.q_orders ORDER BY msg_id")
                q("SELECT msg_id, message FROM pgmq.a_orders ORDER BY msg_id")

            echo("\n3. pgmq-build migrate --dry-run: what it would do (nothing is changed).")
            migrate.migrate(target, dry_run=True, echo=lambda line: echo("   " + line))
            echo("\n4. pgmq-build migrate: the same, in one transaction.")
            migrate.migrate(target, echo=lambda line: echo("   " + line))

            with psycopg.connect(target, autocommit=True) as conn:

                def q2(text: str) -> list[tuple]:
                    rows = conn.execute(text).fetchall()
                    _show(echo, text, rows)
                    return rows

                echo("\n5. Every message is where it was (message 1 still leased, 2 archived); ids continue.")
                q2("SELECT msg_id, read_ct, message FROM pgmq.q_orders ORDER BY msg_id")
                q2("SELECT msg_id, message FROM pgmq.a_orders ORDER BY msg_id")
                q2("SELECT * FROM pgmq.send('orders', '{\"order\": 4}'::jsonb)")
                echo("\n6. Our features on the old queue: a priority message is served first; the topic"
                     "\n   binding is a binding of exchange 'pgmq.topic' now.")
                q2("SELECT * FROM pgmq.send('orders', '{\"order\": 5, \"rush\": true}'::jsonb, "
                   "'{\"x-pgmq-priority\": -1}'::jsonb)")
                q2("SELECT msg_id, message FROM pgmq.read('orders', 30, 3)")
                q2("SELECT pattern, queue_name FROM pgmq.topic_bindings")
                q2("SELECT extversion FROM pg_extension WHERE extname = 'pgmq' UNION ALL "
                   "SELECT obj_description('pgmq'::regnamespace) WHERE obj_description('pgmq'::regnamespace) IS NOT NULL")
        finally:
            if not keep:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        echo("\nMigration demo finished: upstream PGMQ became pgmq in place, messages kept.")
