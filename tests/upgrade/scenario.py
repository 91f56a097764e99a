"""Databases for the upgrade tests: make one, fill it with queues of every kind, record its
messages."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg

from tests.helpers import PARTMAN_SQL

# Everything a user can set up, with the objects each makes per queue: plain, unlogged,
# partitioned (pg_partman), FIFO-indexed, typed, retry policy with a dead-letter queue, TTL and
# dedup settings, pgpro_queue's create_queue, an exchange with bindings and restricted
# publishers, a topic binding, both kinds of notifications, a callback, queue access for a role.
SETUP = """
CREATE PROCEDURE public.handle(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
SELECT pgmq.create('plain');
SELECT pgmq.create_unlogged('unlogged');
SELECT pgmq.create('fifo');
SELECT pgmq.create_fifo_index('fifo');
SELECT pgmq.create('typed', 'text'::regtype);
SELECT pgmq.create('typed_bytes', 'bytea'::regtype);
SELECT pgmq.create('typed_int', 'integer'::regtype);
SELECT pgmq.create('dlq');
SELECT pgmq.create('work');
SELECT pgmq.set_retry_policy('work', 0, 0, 1, NULL, 'dlq');
SELECT pgmq.set_message_ttl('plain', 3600);
SELECT pgmq.set_dedup_window('fifo', 60);
CALL pgmq.create_queue('pq');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('plain', 'orders', 'eu');
SELECT pgmq.bind_queue('fifo', 'orders', 'us');
CALL pgmq.revoke_publish_access('orders', 'public');
SELECT pgmq.bind_topic('logs.*', 'work');
SELECT pgmq.enable_notify_insert('plain', 250);
SELECT pgmq.enable_notify_msg_id('work');
CALL pgmq.register_callback('pq', 'public.handle(jsonb)');
"""

PARTITIONED = ";\n".join(PARTMAN_SQL) + """;
SELECT pgmq.create_partitioned('parted', '10', '20');
"""

# Messages: visible, delayed, leased (read with vt 300), archived, dead-lettered, typed,
# routed, partitioned.
MESSAGES = """
SELECT pgmq.send_batch('plain', ARRAY['{"n":1}','{"n":2}','{"n":3}','{"n":4}']::jsonb[]);
SELECT pgmq.send('plain', '{"n":5}', '{"x-pgmq-priority": 2}'::jsonb, 60);
SELECT * FROM pgmq.read('plain', 300, 2);
SELECT pgmq.archive('plain', 3::bigint);
SELECT pgmq.send('unlogged', '{"u":1}');
SELECT pgmq.send('fifo', '{"f":1}', '{"x-pgmq-group": "g1"}'::jsonb);
SELECT pgmq.send('fifo', '{"f":2}', '{"x-pgmq-group": "g2"}'::jsonb);
SELECT pgmq.send_payload('typed', 'hello'::text);
SELECT pgmq.send_payload('typed_bytes', '\\x0102'::bytea);
SELECT pgmq.send_payload('typed_int', 7);
SELECT pgmq.send('work', '{"w":1}');
SELECT pgmq.send('work', '{"w":2}');
SELECT * FROM pgmq.read('work', 300, 1);
SELECT pgmq.nack('work', 1, 'boom');
SELECT pgmq.publish('orders', 'eu', '{"o":1}');
SELECT pgmq.send_topic('logs.error', '{"l":1}');
CALL pgmq.insert_message('pq', '{"p":1}');
"""
PARTITIONED_MESSAGES = """
SELECT pgmq.send_batch('parted', (SELECT array_agg(jsonb_build_object('i', g)) FROM generate_series(1, 12) g));
SELECT * FROM pgmq.read('parted', 300, 3);
SELECT pgmq.archive('parted', ARRAY[4, 5]::bigint[]);
"""


def populate(conn: psycopg.Connection, role: str, partman: bool, messages: bool = True) -> None:
    """The same queues, settings and grants in any database (the role exists cluster-wide)."""
    conn.execute(SETUP)
    conn.execute(psycopg.sql.SQL("CALL pgmq.grant_queue_access('plain', {})").format(psycopg.sql.Literal(role)))
    conn.execute(psycopg.sql.SQL("CALL pgmq.grant_publish_access('orders', {})").format(psycopg.sql.Literal(role)))
    if partman:
        conn.execute(PARTITIONED)
    if messages:
        conn.execute(MESSAGES)
        if partman:
            conn.execute(PARTITIONED_MESSAGES)


def queue_rows(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """Every row of every q_/a_ table (all columns), by table, in msg_id order."""
    tables = [r[0] for r in conn.execute(
        """SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'pgmq'::regnamespace
           AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname ~ '^[qa]_'
           ORDER BY 1""").fetchall()]
    return {t: conn.execute(psycopg.sql.SQL("SELECT * FROM pgmq.{} ORDER BY msg_id")
                            .format(psycopg.sql.Identifier(t))).fetchall() for t in tables}


class Databases:
    """Creates databases on the test server (dropped at the end); hands out DSNs."""

    def __init__(self, admin: psycopg.Connection, dsn: str) -> None:
        self.admin, self.dsn, self.names = admin, dsn, []

    def create(self, label: str) -> str:
        name = f"up_{label}_{uuid.uuid4().hex[:8]}"
        self.admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        self.names.append(name)
        return self.dsn.replace(f"dbname={self.admin.info.dbname}", f"dbname={name}")

    def drop_all(self) -> None:
        for name in self.names:
            with contextlib.suppress(psycopg.Error):
                self.admin.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)")
                                   .format(psycopg.sql.Identifier(name)))


@contextlib.contextmanager
def connected(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


# Rows that count what happened, not what is configured: the fresh install counts the scenario's
# failures (a nack), the old version the upgraded database ran them on did not (and a count's
# slot is the counting transaction's id). Compared as a table, without its rows.
COUNTS = "pgmq.queue_counters"


def without_counts(snap: dict) -> dict:
    return {**snap, "config_rows": {k: v for k, v in snap.get("config_rows", {}).items() if k != COUNTS}}
