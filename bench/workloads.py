"""The benchmark workloads: each is one entry in WORKLOADS, measured on three systems: a plain-SQL
baseline ("raw"), upstream PGMQ and ours (see run.py).

A workload is data plus small functions, so later ones (FIFO, topics, the worker, Spark) are one
more entry each:

- ``reset(conn, side)`` gives the side a fresh, empty queue (called before every measured
  segment, on the runner's own autocommit connection, untimed);
- ``prefill`` says how many messages the queue must hold before a segment (0 for producers);
  the runner sizes it from a short warm-up and fills it with ``fill(conn, side, n)``;
- ``pgmq_op(cur)`` / ``raw_op(cur)`` do one operation on a client's cursor and return how many
  messages it handled (0 means the queue was empty: the runner counts those as "dry" ops);
  ``pgmq_op`` (and ``reset``/``fill`` with side PGMQ) run unchanged on upstream PGMQ's database
  and on ours: the same pgmq.* calls, each system's own functions;
- ``upstream`` is False for a workload upstream PGMQ 1.13 lacks the functions for (exchanges,
  the worker's dispatch): it is measured on raw and ours only;
- ``raw`` is False for a workload without a plain-SQL baseline (the worker itself);
- ``clients`` (optional) replaces --clients for the workload (the worker: one cell, its pool);
- ``runner`` (optional) replaces the clients: called like ThreadClients.run, it returns a Run
  (the worker workload runs the real Worker, see pool.py);
- ``unit`` names what one counted message is in the report (the worker rows count callbacks);
- ``msgs_per_op`` is the nominal batch size (1, 100, ...), used for sizing and the report;
- ``teardown(conn)`` (optional) drops what a workload made beyond the shared queue and table;
- ``optional`` marks a workload whose pgmq feature may be missing from the build under test: if
  it fails, the runner reports an "(unavailable: <error>)" row instead of stopping;
- ``stored(conn, side)`` (optional) counts the rows that hold the prefilled messages: the report
  gives rows per message (a stream stores one whatever its subscriptions).

The streams' workloads are in streams.py.

Both sides run with psycopg's default ``prepare_threshold`` (5): after five executions of the
same query text the client prepares it server-side, for our calls and the baseline's statements
alike, so neither side gets a plan-caching advantage the other lacks. The messages are
pre-serialised JSON text cast to jsonb on the server, so client-side JSON encoding costs the same
(nothing) on both sides.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from pgmq_build.worker import MIN_WORKERS

QUEUE = "bench"  # the pgmq queue: table pgmq.q_bench
RAW_TABLE = "bench_raw_q"  # the baseline: a plain table laid out like pgmq's queue table
RAW_KEYS = "bench_raw_keys"  # the baseline's dedup keys (send_dedup)
PGMQ_TABLE = f"pgmq.q_{QUEUE}"

# One small, realistic message; every side sends exactly these bytes.
MESSAGE = json.dumps({"order_id": 123456, "customer": "c-42", "items": [1, 2, 3], "note": "x" * 64})
BATCH = 100
# A jsonb[] literal of BATCH copies of MESSAGE, built once (array-element quoting: " and \ escaped).
_ELEM = '"' + MESSAGE.replace("\\", "\\\\").replace('"', '\\"') + '"'
BATCH_LITERAL = "{" + ",".join([_ELEM] * BATCH) + "}"

PGMQ, RAW = "pgmq", "raw"
SIDES = (RAW, PGMQ)

Op = Callable[[psycopg.Cursor], int]


# --- queue set-up (untimed) ----------------------------------------------------------------------

def _create_raw_table(conn: psycopg.Connection, table: str) -> None:
    """The same layout as pgmq's q_ table: identity PK, the same columns and defaults, vt index."""
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"""
        CREATE TABLE {table} (
            msg_id       BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
            read_ct      INT DEFAULT 0 NOT NULL,
            enqueued_at  TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
            last_read_at TIMESTAMP WITH TIME ZONE,
            vt           TIMESTAMP WITH TIME ZONE NOT NULL,
            message      JSONB,
            headers      JSONB
        )""")
    conn.execute(f"CREATE INDEX {table}_vt_idx ON {table} (vt)")


def reset_queue(conn: psycopg.Connection, side: str) -> None:
    """A brand-new empty queue (fresh table and indexes, no bloat from the previous segment)."""
    if side == PGMQ:
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.execute("SELECT pgmq.create(%s)", (QUEUE,))
    else:
        _create_raw_table(conn, RAW_TABLE)


def _reset_with(*setup: str) -> Callable[[psycopg.Connection, str], None]:
    """reset_queue, then (pgmq) the statements `setup` (each takes the queue name as %s): a
    feature turned on, to compare with the plain rows."""
    def reset(conn: psycopg.Connection, side: str) -> None:
        reset_queue(conn, side)
        if side == PGMQ:
            for stmt in setup:
                conn.execute(stmt, (QUEUE,))
    return reset


# a retry policy: every take is judged by the delivery rules
reset_retry_queue = _reset_with("SELECT pgmq.set_retry_policy(%s, 5)")
# delivery counting: every take counts in its session, written once a second
reset_counted_queue = _reset_with("SELECT pgmq.set_delivery_counting(%s)")


def reset_typed_queue(conn: psycopg.Connection, side: str) -> None:
    """A new queue whose payload type is text (pgmq); raw: the plain table."""
    if side == PGMQ:
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.execute("SELECT pgmq.create(%s, 'text')", (QUEUE,))
    else:
        _create_raw_table(conn, RAW_TABLE)


def fill_queue(conn: psycopg.Connection, side: str, n: int) -> None:
    """Put n visible messages in the queue (pgmq: through send_batch, in chunks), then VACUUM
    ANALYZE so both sides start from a table with fresh statistics and visibility map."""
    chunk = 50_000
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        if side == PGMQ:
            conn.execute(
                "SELECT count(*) FROM pgmq.send_batch(%s, "
                "ARRAY(SELECT %s::jsonb FROM generate_series(1, %s)))",
                (QUEUE, MESSAGE, k),
            )
        else:
            conn.execute(
                f"INSERT INTO {RAW_TABLE} (vt, message) "
                "SELECT clock_timestamp(), %s::jsonb FROM generate_series(1, %s)",
                (MESSAGE, k),
            )
    conn.execute(f"VACUUM ANALYZE {PGMQ_TABLE if side == PGMQ else RAW_TABLE}")


# --- the operations (timed) ----------------------------------------------------------------------

def pgmq_send(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send(%s, %s::jsonb)", (QUEUE, MESSAGE))
    cur.fetchall()
    return 1


def raw_send(cur: psycopg.Cursor) -> int:
    cur.execute(
        f"INSERT INTO {RAW_TABLE} (vt, message) VALUES (clock_timestamp(), %s::jsonb) "
        "RETURNING msg_id",
        (MESSAGE,),
    )
    cur.fetchall()
    return 1


def pgmq_send_batch(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send_batch(%s, %s::jsonb[])", (QUEUE, BATCH_LITERAL))
    return len(cur.fetchall())


def raw_send_batch(cur: psycopg.Cursor) -> int:
    cur.execute(
        f"INSERT INTO {RAW_TABLE} (vt, message) "
        "SELECT clock_timestamp(), m FROM unnest(%s::jsonb[]) AS m RETURNING msg_id",
        (BATCH_LITERAL,),
    )
    return len(cur.fetchall())


def pgmq_send_priority(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send(%s, %s::jsonb, %s::jsonb)", (QUEUE, MESSAGE, '{"x-pgmq-priority": 1}'))
    cur.fetchall()
    return 1


def pgmq_send_dedup(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send(%s, %s::jsonb, %s::jsonb)",
                (QUEUE, MESSAGE, json.dumps({"x-pgmq-dedup-id": uuid.uuid4().hex})))
    cur.fetchall()
    return 1


def reset_dedup(conn: psycopg.Connection, side: str) -> None:
    """reset_queue; raw also gets a key table laid out like pgmq.dedup_keys (its key, the
    message's id, an expiry with its index), without the queue column and row security."""
    reset_queue(conn, side)
    if side == RAW:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_KEYS}")
        conn.execute(f"CREATE TABLE {RAW_KEYS} (dedup_id text PRIMARY KEY, msg_id bigint, "
                     "expires_at timestamptz NOT NULL)")
        conn.execute(f"CREATE INDEX {RAW_KEYS}_expires_at_idx ON {RAW_KEYS} (expires_at)")


def raw_send_dedup(cur: psycopg.Cursor) -> int:
    """The least a dedup that outlives its messages can do: claim the key with the id the message
    gets and insert the message only if the claim succeeded, one statement."""
    key = uuid.uuid4().hex
    cur.execute(
        f"WITH k AS (INSERT INTO {RAW_KEYS} (dedup_id, msg_id, expires_at) "
        f"VALUES (%s, nextval('{RAW_TABLE}_msg_id_seq'), clock_timestamp() + interval '5 minutes') "
        "ON CONFLICT (dedup_id) DO NOTHING RETURNING msg_id) "
        f"INSERT INTO {RAW_TABLE} (msg_id, vt, message, headers) OVERRIDING SYSTEM VALUE "
        "SELECT k.msg_id, clock_timestamp(), %s::jsonb, %s::jsonb FROM k RETURNING msg_id",
        (key, MESSAGE, json.dumps({"x-pgmq-dedup-id": key})),
    )
    cur.fetchall()
    return 1


def teardown_dedup(conn: psycopg.Connection) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {RAW_KEYS}")


def pgmq_send_typed(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send_payload(%s, %s::text)", (QUEUE, MESSAGE))
    cur.fetchall()
    return 1


def pgmq_read_delete(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT * FROM pgmq.read(%s, 30, 1)", (QUEUE,))
    rows = cur.fetchall()
    for row in rows:
        cur.execute("SELECT pgmq.delete(%s, %s::bigint)", (QUEUE, row[0]))
        cur.fetchall()
    return len(rows)


def pgmq_read_delete_batch(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT * FROM pgmq.read(%s, 30, %s)", (QUEUE, BATCH))
    rows = cur.fetchall()
    if rows:
        cur.execute("SELECT pgmq.delete(%s, %s::bigint[])", (QUEUE, [r[0] for r in rows]))
        cur.fetchall()
    return len(rows)


def pgmq_pop(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT * FROM pgmq.pop(%s)", (QUEUE,))
    return len(cur.fetchall())


# The raw consumer the issue specifies: claim the oldest visible rows and delete them in one go.
# The LIMIT is a literal, not a parameter: with `LIMIT $1` psycopg's auto-prepare lets the server
# switch to a generic plan that hash-joins a sequential scan of the whole table (measured: 17 ms
# per call at 60k rows instead of 0.6 ms), which would make the baseline unfairly slow and
# dependent on the prefill size. pgmq's functions plan their dynamic SQL per call, with the value.
def _raw_consume_sql(limit: int) -> str:
    return (
        f"DELETE FROM {RAW_TABLE} WHERE msg_id IN ("
        f"SELECT msg_id FROM {RAW_TABLE} WHERE vt <= clock_timestamp() "
        f"ORDER BY msg_id LIMIT {int(limit)} FOR UPDATE SKIP LOCKED) RETURNING *"
    )


RAW_CONSUME_ONE = _raw_consume_sql(1)
RAW_CONSUME_BATCH = _raw_consume_sql(BATCH)


def raw_consume_one(cur: psycopg.Cursor) -> int:
    cur.execute(RAW_CONSUME_ONE)
    return len(cur.fetchall())


def raw_consume_batch(cur: psycopg.Cursor) -> int:
    cur.execute(RAW_CONSUME_BATCH)
    return len(cur.fetchall())


# --- FIFO (grouped) reads -----------------------------------------------------------------------
#
# The same queue and raw table as above, prefilled with messages spread round robin over
# FIFO_GROUPS groups (message i in group g<i % FIFO_GROUPS>, header {"x-pgmq-group": "g<k>"}). The
# pgmq side also gets pgmq.create_fifo_index: the (group, msg_id) btree that lets read_grouped*
# find group heads and a group's next messages without scanning the queue (without it they fall
# back to a full aggregate per call). The raw table gets the same index, so both tables carry the
# same indexes; the raw consumer never uses it: it ignores groups (DELETE ... LIMIT 10 SKIP
# LOCKED), which makes it the "what ordering costs" reference.

FIFO_GROUPS = 100
FIFO_BATCH = 10
_GROUP_KEY = "COALESCE(headers ->> 'x-pgmq-group', '_default_fifo_group')"


def reset_fifo_queue(conn: psycopg.Connection, side: str) -> None:
    reset_queue(conn, side)
    if side == PGMQ:
        conn.execute("SELECT pgmq.create_fifo_index(%s)", (QUEUE,))
    else:
        conn.execute(f"CREATE INDEX {RAW_TABLE}_fifo_idx ON {RAW_TABLE} (({_GROUP_KEY}), msg_id)")


def fill_fifo_queue(conn: psycopg.Connection, side: str, n: int) -> None:
    """n visible messages over FIFO_GROUPS groups, interleaved in msg_id order; then VACUUM ANALYZE."""
    chunk = 50_000
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        group = f"jsonb_build_object('x-pgmq-group', 'g' || mod(i, {FIFO_GROUPS}))"
        if side == PGMQ:
            conn.execute(
                "SELECT count(*) FROM pgmq.send_batch(%s, "
                "ARRAY(SELECT %s::jsonb FROM generate_series(1, %s)), "
                f"ARRAY(SELECT {group} FROM generate_series(%s::bigint, %s::bigint) AS i ORDER BY i))",
                (QUEUE, MESSAGE, k, start, start + k - 1),
            )
        else:
            conn.execute(
                f"INSERT INTO {RAW_TABLE} (vt, message, headers) "
                f"SELECT clock_timestamp(), %s::jsonb, {group} FROM generate_series(%s::bigint, %s::bigint) AS i "
                "ORDER BY i",
                (MESSAGE, start, start + k - 1),
            )
    conn.execute(f"VACUUM ANALYZE {PGMQ_TABLE if side == PGMQ else RAW_TABLE}")


# A grouped read can come back empty while the queue is full: under concurrency (measured: 4-9%
# of the calls at 4 clients, none at 1), most likely because the groups it picked were leased by
# another consumer between its look and its lease. That is not "dry" (the
# runner would re-run the segment with a bigger prefill, in vain): like a real consumer, the op
# reads again, as long as the queue holds any message (visible or in flight), so the empty calls
# cost the pgmq side their time. Bounded, in case nothing ever comes back.
FIFO_EMPTY_RETRIES = 1000


def _pgmq_read_fn_delete(fn: str) -> Op:
    sql = f"SELECT * FROM pgmq.{fn}(%s, 30, {FIFO_BATCH})"
    nonempty = f"SELECT EXISTS (SELECT 1 FROM {PGMQ_TABLE})"

    def op(cur: psycopg.Cursor) -> int:
        for _ in range(FIFO_EMPTY_RETRIES):
            cur.execute(sql, (QUEUE,))
            rows = cur.fetchall()
            if rows:
                cur.execute("SELECT pgmq.delete(%s, %s::bigint[])", (QUEUE, [r[0] for r in rows]))
                cur.fetchall()
                return len(rows)
            cur.execute(nonempty)
            if not cur.fetchone()[0]:
                break
        return 0

    op.__name__ = f"pgmq_{fn}_delete"
    return op


RAW_CONSUME_FIFO_BATCH = _raw_consume_sql(FIFO_BATCH)


def raw_consume_fifo_batch(cur: psycopg.Cursor) -> int:
    cur.execute(RAW_CONSUME_FIFO_BATCH)
    return len(cur.fetchall())


# --- topics --------------------------------------------------------------------------------------
#
# Four queues bound to 'orders.*', 'orders.#', '#' and 'billing.*': routing key 'orders.created'
# matches the first three, so each pgmq.send_topic call writes 3 messages. The baseline writes
# the same 3 rows into 3 plain tables (the queue-table layout) in one statement: three INSERTs in
# CTEs, sharing one message parameter.

TOPIC_KEY = "orders.created"
TOPIC_BINDINGS = (("orders.*", "bench_t1"), ("orders.#", "bench_t2"), ("#", "bench_t3"),
                  ("billing.*", "bench_t4"))
TOPIC_COPIES = 3
RAW_TOPIC_TABLES = tuple(f"bench_raw_t{i}" for i in range(1, TOPIC_COPIES + 1))


def teardown_topic(conn: psycopg.Connection) -> None:
    for _, queue in TOPIC_BINDINGS:  # drop_queue also removes the queue's bindings
        conn.execute("SELECT pgmq.drop_queue(%s)", (queue,))
    for table in RAW_TOPIC_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def reset_topic(conn: psycopg.Connection, side: str) -> None:
    teardown_topic(conn)  # both sides' objects: the other side's old tables must not linger
    if side == PGMQ:
        for pattern, queue in TOPIC_BINDINGS:
            conn.execute("SELECT pgmq.create(%s)", (queue,))
            conn.execute("SELECT pgmq.bind_topic(%s, %s)", (pattern, queue))
    else:
        for table in RAW_TOPIC_TABLES:
            _create_raw_table(conn, table)


def pgmq_send_topic(cur: psycopg.Cursor) -> int:
    cur.execute("SELECT pgmq.send_topic(%s, %s::jsonb)", (TOPIC_KEY, MESSAGE))
    return cur.fetchone()[0]  # the number of queues written to: 3


RAW_SEND_TOPIC = (
    "WITH " + ", ".join(
        f"i{n} AS (INSERT INTO {t} (vt, message) VALUES (clock_timestamp(), %(m)s::jsonb) "
        "RETURNING msg_id)" for n, t in enumerate(RAW_TOPIC_TABLES))
    + " SELECT " + " + ".join(f"(SELECT count(*) FROM i{n})" for n in range(len(RAW_TOPIC_TABLES)))
)


def raw_send_topic(cur: psycopg.Cursor) -> int:
    cur.execute(RAW_SEND_TOPIC, {"m": MESSAGE})
    return cur.fetchone()[0]


# --- exchanges -----------------------------------------------------------------------------------
#
# The topic cell's four queues bound to an exchange so that each publish reaches three of them:
# direct (key 'eu' on three queues, 'us' on the fourth) and headers (three bindings match the
# message's headers, one does not). Same raw baseline as send_topic.

EXCHANGE_CELLS = {
    "direct": ("eu", None, ("eu", "eu", "eu", "us")),
    "headers": (None, '{"region": "eu", "kind": "order"}',
                ('{"region": "eu"}', '{"x-match": "any", "kind": "order"}', '{"x-match": "all"}',
                 '{"region": "us"}')),
}


def _reset_exchange(kind: str) -> Callable[[psycopg.Connection, str], None]:
    def reset(conn: psycopg.Connection, side: str) -> None:
        teardown_exchange(conn)
        if side == PGMQ:
            conn.execute("SELECT pgmq.create_exchange('bench_x', %s)", (kind,))
            for (_, queue), key in zip(TOPIC_BINDINGS, EXCHANGE_CELLS[kind][2], strict=True):
                conn.execute("SELECT pgmq.create(%s)", (queue,))
                conn.execute("SELECT pgmq.bind_queue(%s, 'bench_x', %s)", (queue, key))
        else:
            for table in RAW_TOPIC_TABLES:
                _create_raw_table(conn, table)
    return reset


def teardown_exchange(conn: psycopg.Connection) -> None:
    teardown_topic(conn)
    conn.execute("SELECT pgmq.drop_exchange('bench_x', false) "
                 "FROM pgmq.exchanges WHERE exchange_name = 'bench_x'")


def _pgmq_publish(kind: str) -> Op:
    key, headers, _ = EXCHANGE_CELLS[kind]

    def op(cur: psycopg.Cursor) -> int:
        cur.execute("SELECT count(*) FROM pgmq.publish('bench_x', %s, %s::jsonb, %s::jsonb)",
                    (key, MESSAGE, headers))
        return cur.fetchone()[0]
    return op


# --- the worker's unit of work (issue: worker throughput on a no-op callback) ------------------

def reset_dispatch_queue(conn: psycopg.Connection, side: str) -> None:
    """A fresh queue with a no-op callback registered (pgmq side)."""
    reset_queue(conn, side)
    if side == PGMQ:
        conn.execute("CREATE OR REPLACE PROCEDURE public.bench_noop(msg jsonb) LANGUAGE sql AS ''")
        conn.execute("CALL pgmq.register_callback(%s, 'public.bench_noop(jsonb)')", (QUEUE,))


def pgmq_dispatch_one(cur: psycopg.Cursor) -> int:
    """What each `pgmq-build worker` thread runs per message: claim, CALL the callback in a
    subtransaction, delete, commit (autocommit: one transaction)."""
    cur.execute("SELECT pgmq._dispatch_one(%s)", (QUEUE,))
    return 1 if cur.fetchone()[0] is not None else 0


def run_worker_pool(*args, **kwargs):
    """The `worker` workload's runner (pool.py; imported late: it imports run.py)."""
    from .pool import run_worker
    return run_worker(*args, **kwargs)


def _no_op(cur: psycopg.Cursor) -> int:
    raise RuntimeError("this workload has a runner: it runs no per-client operation")


# --- the registry --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    msgs_per_op: int
    pgmq_op: Op
    raw_op: Op
    consumes: bool = False  # True: needs a prefilled queue, sized from a warm-up
    reset: Callable[[psycopg.Connection, str], None] = reset_queue
    fill: Callable[[psycopg.Connection, str, int], None] = fill_queue
    teardown: Callable[[psycopg.Connection], None] | None = None  # after the cell, untimed
    optional: bool = False  # a failure is reported as "(unavailable: ...)", not raised
    upstream: bool = True  # upstream PGMQ 1.13 has the functions pgmq_op, reset and fill call
    unit: str = "msgs"  # what msgs_per_op and the rates count
    raw: bool = True  # has a plain-SQL baseline
    clients: tuple[int, ...] | None = None  # the client counts to run (None: --clients)
    runner: Callable[..., object] | None = None  # runs a segment instead of the clients
    stored: Callable[[psycopg.Connection, str], int] | None = None  # rows holding the prefill

    def op(self, side: str) -> Op:
        return self.pgmq_op if side == PGMQ else self.raw_op


WORKLOADS: list[Workload] = [
    Workload("send", "pgmq.send, one message per call | INSERT ... RETURNING msg_id",
             1, pgmq_send, raw_send),
    Workload("send_batch", f"pgmq.send_batch of {BATCH} | INSERT ... SELECT unnest(jsonb[])",
             BATCH, pgmq_send_batch, raw_send_batch),
    Workload("read_delete", "pgmq.read(q, 30, 1) + pgmq.delete(q, id) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_read_delete, raw_consume_one, consumes=True),
    Workload("read_delete_batch",
             f"pgmq.read(q, 30, {BATCH}) + pgmq.delete(q, ids[]) | DELETE ... LIMIT {BATCH} SKIP LOCKED",
             BATCH, pgmq_read_delete_batch, raw_consume_batch, consumes=True),
    Workload("pop", "pgmq.pop(q) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_pop, raw_consume_one, consumes=True),
    # the same on a queue with a retry policy (a feature on: compare with the rows above)
    Workload("read_delete_retry", "read_delete on a queue with set_retry_policy(q, 5) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_read_delete, raw_consume_one, consumes=True, reset=reset_retry_queue, upstream=False),
    Workload("pop_retry", "pop on a queue with set_retry_policy(q, 5) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_pop, raw_consume_one, consumes=True, reset=reset_retry_queue, upstream=False),
    # the same on a queue that counts its deliveries (set_delivery_counting: issue 32)
    Workload("read_delete_counted", "read_delete on a queue with set_delivery_counting(q) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_read_delete, raw_consume_one, consumes=True, reset=reset_counted_queue, upstream=False),
    Workload("pop_counted", "pop on a queue with set_delivery_counting(q) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_pop, raw_consume_one, consumes=True, reset=reset_counted_queue, upstream=False),
    # other features on (issue 15: at most 15 % over the plain rows send and pop)
    Workload("send_priority", "send with header x-pgmq-priority 1 | INSERT ... RETURNING msg_id",
             1, pgmq_send_priority, raw_send, clients=(1,)),
    Workload("send_ttl", "send on a queue with set_message_ttl(q, 3600) | INSERT ... RETURNING msg_id",
             1, pgmq_send, raw_send, reset=_reset_with("SELECT pgmq.set_message_ttl(%s, 3600)"),
             upstream=False, clients=(1,)),
    Workload("send_dedup", "send with a new x-pgmq-dedup-id each | key INSERT ... ON CONFLICT DO NOTHING + "
             "INSERT, one statement", 1, pgmq_send_dedup, raw_send_dedup, reset=reset_dedup,
             teardown=teardown_dedup, clients=(1,)),
    Workload("send_typed", "send_payload(q, text) on a text queue | INSERT ... RETURNING msg_id",
             1, pgmq_send_typed, raw_send, reset=reset_typed_queue, upstream=False, clients=(1,)),
    Workload("pop_priority", "pop on a queue with enable_priorities | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_pop, raw_consume_one, consumes=True,
             reset=_reset_with("SELECT pgmq.enable_priorities(%s)"), upstream=False, clients=(1,)),
    Workload("pop_ttl", "pop on a queue with set_message_ttl(q, 3600) | DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_pop, raw_consume_one, consumes=True,
             reset=_reset_with("SELECT pgmq.set_message_ttl(%s, 3600)"), upstream=False, clients=(1,)),
    *(Workload(name, f"pgmq.{fn}(q, 30, {FIFO_BATCH}) + pgmq.delete(q, ids[]), {FIFO_GROUPS} groups, "
               f"create_fifo_index | DELETE ... LIMIT {FIFO_BATCH} SKIP LOCKED, no groups",
               FIFO_BATCH, _pgmq_read_fn_delete(fn), raw_consume_fifo_batch, consumes=True,
               reset=reset_fifo_queue, fill=fill_fifo_queue, optional=True)
      for name, fn in (("fifo_read_grouped", "read_grouped"),
                       ("fifo_read_grouped_rr", "read_grouped_rr"),
                       ("fifo_read_grouped_head", "read_grouped_head"))),
    Workload("worker_dispatch",
             "pgmq._dispatch_one(q): a pgmq-build worker's per-message transaction, no-op callback | "
             "DELETE ... LIMIT 1 SKIP LOCKED",
             1, pgmq_dispatch_one, raw_consume_one, consumes=True, reset=reset_dispatch_queue,
             optional=True, upstream=False, unit="callbacks"),
    Workload("worker",
             "pgmq_build.worker.Worker, every option at its default (pool of 3-10 dispatcher "
             "threads, tx_batch), on a prefilled queue, no-op callback; clients = its "
             "min_workers | no baseline",
             1, _no_op, _no_op, consumes=True, reset=reset_dispatch_queue, optional=True,
             upstream=False, raw=False, unit="callbacks", clients=(MIN_WORKERS,),
             runner=run_worker_pool),
    Workload("send_topic",
             f"pgmq.send_topic('{TOPIC_KEY}', m), 4 bindings, {TOPIC_COPIES} match | "
             f"{TOPIC_COPIES} INSERTs into {TOPIC_COPIES} tables, one statement (CTEs)",
             TOPIC_COPIES, pgmq_send_topic, raw_send_topic, reset=reset_topic,
             teardown=teardown_topic, optional=True),
    *(Workload(f"publish_{kind}",
               f"pgmq.publish to a {kind} exchange, 4 bindings, {TOPIC_COPIES} match | "
               f"{TOPIC_COPIES} INSERTs into {TOPIC_COPIES} tables, one statement (CTEs)",
               TOPIC_COPIES, _pgmq_publish(kind), raw_send_topic, reset=_reset_exchange(kind),
               teardown=teardown_exchange, optional=True, upstream=False)
      for kind in EXCHANGE_CELLS),
]

# streams.py builds its workloads on the definitions above
from .streams import STREAM_WORKLOADS  # noqa: E402

WORKLOADS += STREAM_WORKLOADS
BY_NAME = {w.name: w for w in WORKLOADS}
