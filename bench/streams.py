"""The streams' workloads (docs/concepts/queues-and-streams.md "Streams"): producing into a stream and consuming it through
subscriptions, on ours and on a plain-SQL baseline; upstream PGMQ has no streams.

- ``stream_send`` / ``stream_send_batch``: one event per call (autocommit: one transaction each)
  and 100 per call, against a plain INSERT into a table laid out like a stream's segment (the
  same columns and defaults, one index, on ev_txid).
- ``stream_consume``: one subscription reads a batch and acknowledges it in one transaction
  (``stream_read`` + ``stream_ack``); the stream is prefilled with a tick every BATCH events, so
  every batch holds BATCH events. The baseline is the floor of a log consumer: one statement
  that reads the next BATCH rows of a plain log table after the consumer's offset (by ev_id,
  which a real consumer could not trust: ids are not handed out in commit order) and moves the
  offset.
- ``stream_fanout``: the same with FANOUT subscriptions, read in turn (one client): the server
  CPU per delivered message (one message delivered to ten subscriptions counts ten) and how many
  rows the storage holds per message (ours: one, whatever the subscriptions; the baseline's log
  likewise, with one offset row per subscription).

Consumers run one client (``clients=(1,)``): the consumers of one subscription take turns (a
batch at a time), which is what the stream is for, not a measure of it.
"""

from __future__ import annotations

import itertools

import psycopg

from .workloads import BATCH, BATCH_LITERAL, MESSAGE, PGMQ, Workload

STREAM = "bench_s"  # pgmq.s_bench_s and its segments
SUB = "bench"  # stream_consume's subscription
FANOUT = 10  # stream_fanout's subscriptions: fan0 .. fan9
RAW_LOG = "bench_raw_log"  # the baseline's log table
RAW_OFFSETS = "bench_raw_offsets"  # the baseline's consumers' positions


def _create_raw_log(conn: psycopg.Connection, index: str) -> None:
    """A plain table with a segment's columns and defaults and one index (`index`: ev_txid, the
    one ours has, for the producers; ev_id for the consumers, whose reads go by it)."""
    conn.execute(f"DROP TABLE IF EXISTS {RAW_LOG}, {RAW_OFFSETS}")
    conn.execute(f"DROP SEQUENCE IF EXISTS {RAW_LOG}_seq")
    conn.execute(f"CREATE SEQUENCE {RAW_LOG}_seq")
    conn.execute(f"""
        CREATE TABLE {RAW_LOG} (
            ev_id   BIGINT NOT NULL DEFAULT nextval('{RAW_LOG}_seq'),
            ev_txid XID8 NOT NULL DEFAULT pg_current_xact_id(),
            ev_time TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT clock_timestamp(),
            message JSONB,
            headers JSONB
        )""")
    conn.execute(f"CREATE INDEX {RAW_LOG}_{index}_idx ON {RAW_LOG} ({index})")
    conn.execute(f"CREATE TABLE {RAW_OFFSETS} (sub text PRIMARY KEY, pos bigint NOT NULL)")


def _subscriptions(n: int) -> list[str]:
    return [SUB] if n == 1 else [f"fan{i}" for i in range(n)]


def teardown(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
    conn.execute(f"DROP TABLE IF EXISTS {RAW_LOG}, {RAW_OFFSETS}")
    conn.execute(f"DROP SEQUENCE IF EXISTS {RAW_LOG}_seq")


def _reset(subscriptions: int, raw_index: str):
    def reset(conn: psycopg.Connection, side: str) -> None:
        teardown(conn)  # the other side's objects must not linger either
        if side == PGMQ:
            conn.execute("SELECT pgmq.create_stream(%s)", (STREAM,))
            for sub in _subscriptions(subscriptions):
                conn.execute("SELECT pgmq.subscribe(%s, %s, 'earliest')", (STREAM, sub))
        else:
            _create_raw_log(conn, raw_index)
            for sub in _subscriptions(subscriptions):
                conn.execute(f"INSERT INTO {RAW_OFFSETS} VALUES (%s, 0)", (sub,))
    return reset


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def fill(conn: psycopg.Connection, side: str, n: int) -> None:
    """n events; ours in transactions of BATCH events with a tick after each (so that every
    batch a subscription reads holds BATCH events), in one DO block that commits as it goes."""
    if side == PGMQ:
        conn.execute(f"""
            DO $$
            BEGIN
                FOR i IN 1..ceil({int(n)} / {BATCH}::numeric) LOOP
                    PERFORM pgmq.stream_send_batch('{STREAM}', ARRAY(
                        SELECT {_literal(MESSAGE)}::jsonb
                        FROM generate_series(1, least({BATCH}, {int(n)} - (i - 1) * {BATCH}))));
                    COMMIT;
                    PERFORM pgmq.stream_tick('{STREAM}');
                    COMMIT;
                END LOOP;
            END $$""")
        conn.execute(f"VACUUM ANALYZE pgmq.s_{STREAM}")
    else:
        conn.execute(f"INSERT INTO {RAW_LOG} (message) SELECT %s::jsonb FROM generate_series(1, %s)",
                     (MESSAGE, n))
        conn.execute(f"VACUUM ANALYZE {RAW_LOG}")


def stored_rows(conn: psycopg.Connection, side: str) -> int:
    """The rows holding events (ours: every segment, through the parent table)."""
    table = f"pgmq.s_{STREAM}" if side == PGMQ else RAW_LOG
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


# --- the operations ------------------------------------------------------------------------------

def pgmq_stream_send(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.stream_send(%s, %s::jsonb)", (STREAM, MESSAGE))
    cur.fetchall()
    return 1


def raw_stream_send(cur: psycopg.Cursor) -> int:
    cur.execute(f"INSERT INTO {RAW_LOG} (message) VALUES (%s::jsonb) RETURNING ev_id", (MESSAGE,))
    cur.fetchall()
    return 1


def pgmq_stream_send_batch(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.stream_send_batch(%s, %s::jsonb[])", (STREAM, BATCH_LITERAL))
    return len(cur.fetchall())


def raw_stream_send_batch(cur: psycopg.Cursor) -> int:
    cur.execute(f"INSERT INTO {RAW_LOG} (message) SELECT m FROM unnest(%s::jsonb[]) AS m RETURNING ev_id",
                (BATCH_LITERAL,))
    return len(cur.fetchall())


def _pgmq_consume(subscriptions: int):
    turn = itertools.cycle(_subscriptions(subscriptions))

    def op(cur: psycopg.Cursor) -> int:
        """The next batch of the next subscription, read and acknowledged in one transaction."""
        sub = next(turn)
        with cur.connection.transaction():
            cur.execute("SELECT * FROM pgmq.stream_read(%s, %s, 30)", (STREAM, sub))
            rows = cur.fetchall()
            if rows:
                cur.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (STREAM, sub, rows[0][0]))
                cur.fetchall()
        return len(rows)
    op.__name__ = "pgmq_stream_consume" if subscriptions == 1 else "pgmq_stream_fanout"
    return op


RAW_LOG_CONSUME = f"""
    WITH o AS (SELECT pos FROM {RAW_OFFSETS} WHERE sub = %(sub)s FOR UPDATE),
         ev AS (SELECT l.* FROM {RAW_LOG} l WHERE l.ev_id > (SELECT pos FROM o) ORDER BY l.ev_id LIMIT {BATCH}),
         moved AS (UPDATE {RAW_OFFSETS} SET pos = (SELECT max(ev_id) FROM ev)
                   WHERE sub = %(sub)s AND EXISTS (SELECT FROM ev))
    SELECT * FROM ev"""


def _raw_consume(subscriptions: int):
    turn = itertools.cycle(_subscriptions(subscriptions))

    def op(cur: psycopg.Cursor) -> int:
        cur.execute(RAW_LOG_CONSUME, {"sub": next(turn)})
        return len(cur.fetchall())
    op.__name__ = "raw_log_consume" if subscriptions == 1 else "raw_log_fanout"
    return op


_SENDERS = {"reset": _reset(0, "ev_txid"), "teardown": teardown, "optional": True, "upstream": False}
_CONSUMERS = {"fill": fill, "teardown": teardown, "consumes": True, "optional": True, "upstream": False,
              "clients": (1,), "stored": stored_rows}

STREAM_WORKLOADS = [
    Workload("stream_send", "pgmq.stream_send, one event per call | INSERT ... RETURNING ev_id into a "
             "table laid out like a segment", 1, pgmq_stream_send, raw_stream_send, **_SENDERS),
    Workload("stream_send_batch", f"pgmq.stream_send_batch of {BATCH} | INSERT ... SELECT unnest(jsonb[]) "
             "into that table", BATCH, pgmq_stream_send_batch, raw_stream_send_batch, **_SENDERS),
    Workload("stream_consume", f"pgmq.stream_read + pgmq.stream_ack in one transaction, {BATCH} events a "
             f"batch, 1 subscription | one statement: the next {BATCH} rows of a log after the offset "
             "(by ev_id) and the offset moved", BATCH, _pgmq_consume(1), _raw_consume(1),
             reset=_reset(1, "ev_id"), **_CONSUMERS),
    Workload("stream_fanout", f"stream_consume over {FANOUT} subscriptions in turn (CPU per delivered "
             f"message) | the same log with {FANOUT} offsets", BATCH, _pgmq_consume(FANOUT),
             _raw_consume(FANOUT), reset=_reset(FANOUT, "ev_id"), **_CONSUMERS),
]
