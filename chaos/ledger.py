"""The ledger: what the clients know about every message, and the check that every message
that was produced is in exactly one place and was delivered no more often than the rules allow.

Three queues, each with a retry policy (``MAX_RETRIES``) and a dead-letter queue ``<q>_dlq``:

* ``work``: consumers that read, record and delete in ONE transaction (load.Consumer). The
  record, ``chaos.consumed``, is a final place: a message is in it once, or not at all.
* ``jobs``: the worker (pgmq_build.worker.Worker), whose callback ``chaos.handle`` records the
  message in ``chaos.handled`` in the transaction that deletes it: a final place too.
* ``client``: pgmq_build.client.Client.consume, at-least-once by design (the handler's own
  transaction, then ``archive``). Its record, ``chaos.client_seen``, is a side effect: the
  message's place is the queue, the archive or the dead-letter queue; a handled message
  recorded again after an acknowledgement that did not commit is a redelivery, which its
  rules allow.
* ``spark`` (only with ``--spark``): a Spark structured streaming query (spark_query.py), the
  connector's stream source into its exactly-once sink, queue ``spark_done``. The connector
  documents that pair as exactly-once end to end, so a message's place is ``spark`` (not yet
  through) or ``spark_done``, once; the source archives what Spark committed into ``a_spark``,
  a trace rather than a place. No retry policy: the stream source ignores it, and no message
  for Spark is poison.

A message's payload carries a unique id (``{"id": "p1-42", ...}``). A producer sends and records
the id in ``chaos.produced`` in one transaction, so a send whose commit status the client could
not learn (the connection broke) is resolved after the run by looking the id up there. Poison
messages (``"poison": true``; and ``"slow"`` ones, whose callback outlasts the worker's
statement_timeout in the timeouts scenario) always fail: they must end in the dead-letter queue
after exactly ``1 + MAX_RETRIES`` deliveries.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass, field

import psycopg

MAX_RETRIES = 3
QUEUES = ("work", "jobs", "client")
FINAL_RESULTS = {"work": "chaos.consumed", "jobs": "chaos.handled"}  # one row per message
SPARK_QUEUE = "spark"
SPARK_RESULT = "spark_done"  # the Spark query's exactly-once sink: one row per message
DELIVERED_NOTICE = "chaos-delivered "
SLOW_SECONDS = 0.3  # a "slow" message's callback sleeps this long (past the worker's timeout)

SCHEMA_SQL = [
    "CREATE SCHEMA chaos",
    # written in the send's own transaction: the commit status of a send is its row here
    "CREATE TABLE chaos.produced (uid text PRIMARY KEY, queue text NOT NULL)",
    # no unique constraints: a message recorded twice must be seen, not refused
    "CREATE TABLE chaos.consumed (uid text NOT NULL, msg_id bigint NOT NULL, "
    "read_ct int NOT NULL, consumer text NOT NULL)",
    "CREATE TABLE chaos.handled (uid text NOT NULL)",
    "CREATE TABLE chaos.client_seen (uid text NOT NULL)",
    f"""CREATE PROCEDURE chaos.handle(m jsonb) LANGUAGE plpgsql AS $$
    BEGIN
        RAISE NOTICE '{DELIVERED_NOTICE}%', m->>'id';  -- reaches the worker even if we fail
        IF (m->>'poison')::boolean THEN
            RAISE EXCEPTION 'poison message %', m->>'id';
        END IF;
        PERFORM pg_sleep((m->>'slow')::float8);  -- NULL: no sleep
        INSERT INTO chaos.handled (uid) VALUES (m->>'id');
    END $$""",
]


def setup(conn: psycopg.Connection, tablespace: str | None = None, spark: bool = False) -> None:
    """The schema, the queues (in `tablespace` when given; the Spark query's two with `spark`)
    and the worker's callback."""
    for stmt in SCHEMA_SQL:
        conn.execute(stmt)
    if tablespace:
        conn.execute(f"SET default_tablespace = {tablespace}")
    for q in QUEUES:
        conn.execute("SELECT pgmq.create(%s)", (q,))
        conn.execute("SELECT pgmq.create(%s)", (f"{q}_dlq",))
        conn.execute("SELECT pgmq.set_retry_policy(%s, %s, 0, 1, NULL, %s)",
                     (q, MAX_RETRIES, f"{q}_dlq"))
    if spark:
        for q in (SPARK_QUEUE, SPARK_RESULT):
            conn.execute("SELECT pgmq.create(%s)", (q,))
    if tablespace:
        conn.execute("RESET default_tablespace")
    conn.execute("CALL pgmq.register_callback('jobs', 'chaos.handle(jsonb)')")


@dataclass
class Book:
    """What the clients saw, filled in by every thread (under one lock)."""

    acked: dict[str, str] = field(default_factory=dict)  # uid -> queue: the commit returned
    failed: set[str] = field(default_factory=set)  # the server refused: rolled back
    unknown: dict[str, str] = field(default_factory=dict)  # the connection broke: look it up
    poison: set[str] = field(default_factory=set)
    deliveries: Counter[str] = field(default_factory=Counter)  # handed to a consumer or callback
    errors: Counter[str] = field(default_factory=Counter)  # SQLSTATE (or "connection") -> count
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sent(self, uids: list[str], queue: str, outcome: str) -> None:
        with self.lock:
            if outcome == "acked":
                self.acked.update(dict.fromkeys(uids, queue))
            elif outcome == "failed":
                self.failed.update(uids)
            else:
                self.unknown.update(dict.fromkeys(uids, queue))

    def delivered(self, uids: list[str]) -> None:
        with self.lock:
            self.deliveries.update(uids)

    def error(self, exc: BaseException) -> None:
        key = getattr(exc, "sqlstate", None) or "connection"
        with self.lock:
            self.errors[key] += 1


@dataclass
class Verdict:
    checked: int = 0  # messages whose send committed
    lost: int = 0
    beyond_rules: int = 0  # the sum of the breakdown below
    redeliveries: int = 0  # deliveries after the first, poison messages' planned ones excluded
    left_in_queues: int = 0
    dead_lettered: int = 0
    dead_lettered_poison: int = 0
    unknown_sends: int = 0
    unknown_committed: int = 0
    failed_sends: int = 0
    spark: dict[str, int] = field(default_factory=dict)  # sent, through, archived, staging_left
    breakdown: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)  # a few uids per problem
    over_delivered: dict[str, dict] = field(default_factory=dict)  # uid -> what was counted
    uncounted_after_crash: int = 0  # over the limit by the clients' count only, after a crash

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.beyond_rules == 0

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def _uids(conn: psycopg.Connection, sql: str) -> Counter[str]:
    return Counter(r[0] for r in conn.execute(sql))


def has_spark(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                        (f"pgmq.q_{SPARK_RESULT}",)).fetchone()[0]


def _spark_tables(conn: psycopg.Connection) -> tuple[list[str], list[str]]:
    """The Spark query's places (its queue, its result) and traces (the source's archive)."""
    if not has_spark(conn):
        return [], []
    return [f"q_{SPARK_QUEUE}", f"q_{SPARK_RESULT}"], [f"a_{SPARK_QUEUE}"]


def _staging_left(conn: psycopg.Connection) -> int:
    """Rows the exactly-once sink staged and neither published nor dropped (a batch it never
    finished: each one Spark runs again drops its earlier attempts' rows)."""
    if not conn.execute("SELECT to_regclass('pgmq_spark.staging') IS NOT NULL").fetchone()[0]:
        return 0
    return conn.execute("SELECT count(*) FROM pgmq_spark.staging").fetchone()[0]


def places(conn: psycopg.Connection) -> dict[str, Counter[str]]:
    """Every place a message can be, uid -> how many times it is there."""
    out: dict[str, Counter[str]] = {}
    spark_places, spark_traces = _spark_tables(conn)
    for q in QUEUES:
        for table in (f"q_{q}", f"a_{q}", f"q_{q}_dlq", f"a_{q}_dlq"):
            out[table] = _uids(conn, f"SELECT message->>'id' FROM pgmq.{table}")
    for table in spark_places + spark_traces:
        out[table] = _uids(conn, f"SELECT message->>'id' FROM pgmq.{table}")
    for table in FINAL_RESULTS.values():
        out[table] = _uids(conn, f"SELECT uid FROM {table}")
    out["chaos.client_seen"] = _uids(conn, "SELECT uid FROM chaos.client_seen")
    return out


def check(conn: psycopg.Connection, book: Book, crashed: bool = False) -> Verdict:
    """The ledger check (see the module doc); conn is a connection after the load stopped.

    crashed: the server was stopped with -m immediate during the run. A take whose transaction
    dies in such a crash before its WAL reached the disk leaves no trace at all, so the server
    cannot count that delivery (tests/chaos/test_crash_trace.py shows it). A message the
    clients saw more than 1 + MAX_RETRIES times while the server's own counts (read_ct,
    dead-letter attempts) stay within the limit is then reported as uncounted_after_crash,
    apart from the deliveries beyond the rules (which stay strict)."""
    produced = {r[0]: r[1] for r in conn.execute("SELECT uid, queue FROM chaos.produced")}
    where = places(conn)
    read_cts = {uid: ct for uid, ct in conn.execute("SELECT uid, max(read_ct) FROM chaos.consumed "
                                                    "GROUP BY uid")}
    attempts = {uid: int(a) for q in QUEUES for uid, a in conn.execute(
        f"SELECT message->>'id', headers->'x-pgmq-dead-letter'->>'attempts' "
        f"FROM pgmq.q_{q}_dlq")}
    with book.lock:
        acked, failed = dict(book.acked), set(book.failed)
        unknown, poison = dict(book.unknown), set(book.poison)
        deliveries = Counter(book.deliveries)

    v = Verdict(unknown_sends=len(unknown), failed_sends=len(failed))
    problems: dict[str, list[str]] = {k: [] for k in (
        "lost", "in_two_places", "recorded_twice", "acked_not_recorded", "failed_but_committed",
        "unknown_origin", "over_delivered", "poison_handled", "dead_letter_attempts",
        "client_archived_unhandled", "uncounted_after_crash")}
    committed = dict(acked)
    for uid, q in unknown.items():
        if uid in produced:
            committed[uid] = q
            v.unknown_committed += 1
    for uid in acked:
        if uid not in produced:
            problems["acked_not_recorded"].append(uid)
    for uid in failed & produced.keys():
        problems["failed_but_committed"].append(uid)
    limit = 1 + MAX_RETRIES
    spark_places, spark_traces = _spark_tables(conn)
    final_tables = [t for q in QUEUES for t in (f"q_{q}", f"a_{q}", f"q_{q}_dlq", f"a_{q}_dlq")]
    final_tables += list(FINAL_RESULTS.values()) + spark_places
    results_tables = list(FINAL_RESULTS.values()) + spark_places[1:]
    if spark_places:
        v.spark = {"sent": 0, "through": 0, "archived": 0, "staging_left": _staging_left(conn)}
    seen_anywhere: set[str] = set()
    for table in final_tables + spark_traces:
        seen_anywhere.update(where[table])
    for uid in seen_anywhere - committed.keys() - set(problems["failed_but_committed"]):
        problems["unknown_origin"].append(uid)  # in a place, but no send of it committed
    for uid, q in committed.items():
        n = sum(where[t][uid] for t in final_tables)
        if n == 0:
            problems["lost"].append(uid)
        elif n > 1:
            results = sum(where[t][uid] for t in results_tables)
            problems["recorded_twice" if results > 1 else "in_two_places"].append(uid)
        if where[f"q_{q}"][uid]:
            v.left_in_queues += 1
        if q == SPARK_QUEUE:
            v.spark["sent"] += 1
            v.spark["through"] += where[spark_places[1]][uid] > 0
            v.spark["archived"] += where[spark_traces[0]][uid] > 0
            continue  # no delivery counts or retry limits: the stream source has none
        if where[f"q_{q}_dlq"][uid]:
            v.dead_lettered += 1
            v.dead_lettered_poison += uid in poison
        if q == "client" and where["a_client"][uid] and not where["chaos.client_seen"][uid]:
            problems["client_archived_unhandled"].append(uid)
        d = deliveries[uid]
        server_over = read_cts.get(uid, 0) > limit or attempts.get(uid, 0) > limit
        if d > limit or server_over:
            key = "uncounted_after_crash" if crashed and not server_over else "over_delivered"
            problems[key].append(uid)
            v.over_delivered[uid] = {
                "queue": q, "client_deliveries": d, "read_ct": read_cts.get(uid),
                "dead_letter_attempts": attempts.get(uid), "poison": uid in poison,
                "places": {t: n for t in final_tables + ["chaos.client_seen"]
                           if (n := where[t][uid])}}
        if uid in poison:
            handled = sum(where[t][uid] for t in FINAL_RESULTS.values())
            if handled or where["a_client"][uid]:
                problems["poison_handled"].append(uid)
            if uid in attempts and attempts[uid] != limit:
                problems["dead_letter_attempts"].append(uid)
        elif d > 1:
            v.redeliveries += d - 1
    v.checked = len(committed)
    v.lost = len(problems["lost"]) + len(problems["acked_not_recorded"])
    v.breakdown = {k: len(u) for k, u in problems.items() if k not in ("lost",) and u}
    v.beyond_rules = sum(n for k, n in v.breakdown.items()
                         if k not in ("acked_not_recorded", "uncounted_after_crash"))
    v.uncounted_after_crash = len(problems["uncounted_after_crash"])
    v.examples = {k: sorted(u)[:5] for k, u in problems.items() if u}
    return v
