"""Every public routine racing create/drop loops (docs/concepts/queues-and-streams.md): a call succeeds or fails
with 42P01 (the queue went away), or with an error the routine documents for a missing queue
(ROUTINE_ERRORS) -- never XX000 (an OID that vanished), 40P01 (a deadlock with the drop) or
23503 (a catalog row written for a dropped queue).

The routines come from docs/api.txt (every routine of schema pgmq): each public one is driven here
or excluded with a reason (EXCLUDED), so a new routine must be classified. Its arguments are
filled by name from ARGS; queue-name arguments get the racing queues."""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import psycopg

API = Path(__file__).resolve().parents[2] / "docs" / "api.txt"

# Arguments that name a queue: they get one of the racing queues (a different one each).
QUEUE_ARGS = {"queue_name", "q_name", "source_queue", "target_queue", "dead_letter_queue",
              "new_dlq", "queue_dlq"}

# Values of the other arguments, by "name:type" or by name. An argument missing here (and not
# defaulted) fails test_every_routine_is_classified.
ARGS = {
    "vt:integer": "30", "vt:timestamp with time zone": "clock_timestamp() + interval '30 seconds'",
    "qty": "2", "msg": "'{\"n\": 1}'::jsonb", "msgs": "ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[]",
    "headers:jsonb": "'{}'::jsonb", "headers:jsonb[]": "ARRAY['{}', '{}']::jsonb[]",
    "delay:integer": "0", "delay:timestamp with time zone": "clock_timestamp()",
    "msg_id": "1", "msgid": "1", "msg_ids": "ARRAY[1, 2, 3]::bigint[]",
    "max_retries": "3", "seconds": "60", "confirm_within": "30", "throttle_interval_ms": "0",
    "max_poll_seconds": "0", "max_messages": "5",
    "payload_type:regtype": "'jsonb'::regtype", "payload": "'{\"n\": 1}'::jsonb",
    "payload_type:anyelement": "NULL::jsonb", "q_msg_body:jsonb": "'{\"n\": 1}'::jsonb",
    "q_msg_body:xml": "'<n>1</n>'::xml", "callback": "'public.race_callback(jsonb)'",
    "partitioned": "false", "prefix": "'q'",
    "e_name": "'race_x'", "e_key": "'race.k'", "exchange_name": "'race_x'",
    "routing_key": "'race.k'", "e_routing_key": "'race.k'", "pattern": "'race.#'",
    "first_ids": "ARRAY[1]::bigint[]", "last_ids": "ARRAY[3]::bigint[]",
    "after_queue": "NULL", "max_queues": "5",
    # role_name / role_oid: the test's role, filled in below
}

# Routines not driven here, and why.
EXCLUDED = {
    "format_table_name": "pure: no queue object", "validate_queue_name": "pure: no queue object",
    "validate_routing_key": "pure", "validate_topic_pattern": "pure",
    "acquire_queue_lock": "an advisory lock only", "detach_archive": "a no-op (a WARNING)",
    "notify_queue_listeners": "a trigger function",
    "create_partitioned": "needs pg_partman (test_partitioned.py)",
    "convert_archive_partitioned": "needs pg_partman (test_partitioned.py)",
    "queue_initialize": "pgpro_queue's no-op", "queue_deinitialize": "pgpro_queue's no-op",
    "create_exchange": "exchanges' own lifecycle", "drop_exchange": "exchanges' own lifecycle",
    "set_unroutable": "exchanges' own settings", "grant_publish_access": "exchanges' access",
    "revoke_publish_access": "exchanges' access",
    "create_fifo_indexes_all": "builds every queue's index in one transaction, holding each table's "
                               "lock while it waits for the next: may deadlock (40P01) with a "
                               "transaction writing two queues (move_messages, a dead-letter move); "
                               "not a drop race (create_fifo_index is driven)",
}
# Streams have their own lifecycle (drop_stream) and tests (test_stream_*.py).
STREAM_ROUTINES = re.compile(r"stream|subscribe|unsubscribe")

# What a routine may raise besides 42P01 when its queue is missing, as documented for it.
ROUTINE_ERRORS = {
    # upstream's own texts for a missing queue (P0001), kept as upstream raises them
    "enable_notify_insert": {"P0001"}, "update_notify_insert": {"P0001"},
    "disable_notify_insert": {"P0001"}, "bind_topic": {"P0001"},
    # names differing in case from an existing queue (the loops create both spellings)
    "create": {"42P07"}, "create_non_partitioned": {"42P07"}, "create_unlogged": {"42P07"},
    "create_queue": {"42P07"},
    # without pg_partman in the database
    "run_partition_maintenance": {"42704"},
    # a message the call names is not in the queue, or not in a state for it
    "confirm": {"55000"}, "read_message_by_id": {"55000"}, "read_message_by_id_xml": {"55000"},
    "read_message_by_id_any": {"55000"},
    # the queue has no callback (a worker unregistered it, or the queue was made again)
    "dispatch": {"42704"}, "unregister_callback": {"42704"},
}


@dataclass(frozen=True)
class Routine:
    name: str
    kind: str       # function | procedure
    args: tuple[tuple[str, str, bool], ...]  # (name, type, has a default)

    def call(self, queues: list[str], role: str, all_queues: bool = False) -> str | None:
        """The statement calling it with named arguments (None when an argument has no value).
        `all_queues`: leave out defaulted queue arguments (the "every queue" form)."""
        parts, pool = [], iter(queues)
        for name, typ, default in self.args:
            if name in QUEUE_ARGS:
                if default and all_queues:
                    continue
                value = f"'{next(pool)}'::{typ}"
            elif name == "role_name":
                value = f"'{role}'"
            elif name == "role_oid":
                value = f"'{role}'::regrole::oid"
            elif f"{name}:{typ}" in ARGS or name in ARGS:
                value = ARGS.get(f"{name}:{typ}", ARGS.get(name))
            elif default:
                continue
            else:
                return None
            parts.append(f"{name} => {value}")
        head = "CALL" if self.kind == "procedure" else "SELECT"
        return f"{head} pgmq.{self.name}({', '.join(parts)})"

    @property
    def takes_queue(self) -> bool:
        return any(a[0] in QUEUE_ARGS for a in self.args)


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([" or -(ch in ")]")
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur.strip()] if p]


def public_routines() -> list[Routine]:
    out = []
    for line in API.read_text().splitlines():
        m = re.match(r"\w+\s+(function|procedure)\s+pgmq\.(\w+)\((.*?)\)(?: RETURNS .*)?$", line)
        if not m or m.group(2).startswith("_"):
            continue
        args = []
        for a in _split_args(m.group(3)):
            if a.startswith("OUT "):
                continue
            name, rest = re.sub(r"^(IN|INOUT) ", "", a).split(" ", 1)
            typ, _, _default = rest.partition(" DEFAULT ")
            args.append((name, typ, " DEFAULT " in rest))
        out.append(Routine(m.group(2), m.group(1), tuple(args)))
    return out


def driven(role: str) -> list[tuple[Routine, bool]]:
    """(routine, all_queues) pairs to call: each routine that takes a queue with racing queues,
    and those whose queue arguments are optional also in their every-queue form."""
    out = []
    for r in public_routines():
        if r.name in EXCLUDED or STREAM_ROUTINES.search(r.name):
            continue
        out.append((r, False))
        if r.takes_queue and all(d for n, _, d in r.args if n in QUEUE_ARGS):
            out.append((r, True))
    return out


def test_every_routine_is_classified():
    missing = [r.name for r, every in driven("r") if r.call(["a", "b", "c"], "r", every) is None]
    assert not missing, f"no argument values for {missing}: add them to ARGS or EXCLUDED"


# Queues made and dropped in a loop, each made under one spelling and dropped under another.
SPELLINGS = [("race_a", "RACE_A"), ("Race_B", "race_b"), ("race_c", "race_c")]
NAMES = sorted({n for pair in SPELLINGS for n in pair})
# Where a call's queue arguments go: each call draws distinct queues (any spelling of each).
PLACES = ["<q0>", "<q1>", "<q2>"]
STORM_SECONDS = 6
# ... and at least this many create/drop cycles (a loaded machine gets more time, up to MAX_SECONDS).
MIN_CYCLES = 12
MAX_SECONDS = 30
WORKERS = 4
# The loop's own calls: made and dropped, the creators racing the workers' creators.
LOOP_ERRORS = {"42P07"}
SETUP = """
CREATE PROCEDURE public.race_callback(msg jsonb) LANGUAGE sql AS '';
SELECT pgmq.create_exchange('race_x', 'topic');
"""
CREATORS = ["SELECT pgmq.create(%s)", "SELECT pgmq.create_unlogged(%s)", "CALL pgmq.create_queue(%s)",
            "SELECT pgmq.create(%s, 'jsonb'::regtype)"]
DROPPERS = ["SELECT pgmq.drop_queue(%s)", "CALL pgmq.drop_queue(%s::name)"]
# Consumers' transactions of several calls.
TRANSACTIONS = {
    "txn:read+archive": ["SELECT msg_id FROM pgmq.read(%(q)s, 30, 3)", "SELECT pgmq.archive(%(q)s, 1::bigint)"],
    "txn:read+delete": ["SELECT msg_id FROM pgmq.read(%(q)s, 30, 3)", "SELECT pgmq.delete(%(q)s, 2::bigint)"],
    "txn:policy+send": ["SELECT pgmq.set_retry_policy(%(q)s, 3)", "SELECT pgmq.send(%(q)s, '{}')"],
    "txn:send+metrics": ["SELECT pgmq.send(%(q)s, '{}')", "SELECT pgmq.metrics(%(q)s)"],
}


def storm(connect, role: str, seconds: float = STORM_SECONDS) -> dict[str, Counter]:
    """Run the loop and the workers; per call (routine name, or loop:/txn: entries) a Counter of
    outcomes: None for success, else the SQLSTATE; examples of each error in `.examples`."""
    calls = [(r.name, r.call(PLACES, role, every), every) for r, every in driven(role)]
    results: dict[str, Counter] = defaultdict(Counter)
    examples: dict[tuple[str, str], str] = {}
    lock = threading.Lock()
    start = time.monotonic()
    cycles = [0]

    def going() -> bool:
        elapsed = time.monotonic() - start
        return elapsed < MAX_SECONDS and (elapsed < seconds or cycles[0] < MIN_CYCLES)

    def record(key: str, err: psycopg.Error | None) -> None:
        with lock:
            results[key][err.sqlstate if err else None] += 1
            if err is not None:
                examples.setdefault((key, err.sqlstate), str(err) if err.sqlstate == "40P01" else str(err).splitlines()[0])

    def run(c: psycopg.Connection, key: str, stmts: list[tuple[str, object]]) -> None:
        try:
            if len(stmts) == 1:
                c.execute(*stmts[0])  # autocommit: dispatch commits
            else:
                with c.transaction():
                    for sql, params in stmts:
                        c.execute(sql, params)
            record(key, None)
        except psycopg.Error as e:
            record(key, e)

    def loop() -> None:
        c = connect()
        while going():
            for made, _ in SPELLINGS:
                run(c, "loop:create", [(random.choice(CREATORS), (made,))])
                run(c, "loop:send", [("SELECT pgmq.send_batch(%s, ARRAY['{}', '{}', '{}']::jsonb[])", (made,))])
            time.sleep(random.random() * 0.02)
            for _, dropped in SPELLINGS:
                run(c, "loop:drop", [(random.choice(DROPPERS), (dropped,))])
            cycles[0] += 1

    def worker(seed: int) -> None:
        c = connect()
        c.execute("SET statement_timeout = '20s'")
        rng = random.Random(seed)
        todo: list = []
        while going():
            if not todo:
                todo = calls + [(k, None, False) for k in TRANSACTIONS]
                rng.shuffle(todo)
            name, sql, _ = todo.pop()
            queues = [rng.choice(pair) for pair in rng.sample(SPELLINGS, len(SPELLINGS))]
            if sql is None:
                run(c, name, [(s, {"q": queues[0]}) for s in TRANSACTIONS[name]])
            else:
                for place, q in zip(PLACES, queues, strict=True):
                    sql = sql.replace(place, q)
                run(c, name, [(sql, None)])

    setup = connect()
    setup.execute(SETUP)
    threads = [threading.Thread(target=loop)] + [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    storm.examples = examples  # type: ignore[attr-defined]
    return results


def unexpected(results: dict[str, Counter]) -> dict[str, dict[str, int]]:
    out = {}
    for key, counts in results.items():
        name = key.split(":")[0] if ":" in key and not key.startswith(("loop:", "txn:")) else key
        allowed = {None, "42P01"} | ROUTINE_ERRORS.get(name, set()) | (LOOP_ERRORS if key.startswith("loop:") else set())
        bad = {s: n for s, n in counts.items() if s not in allowed}
        if bad:
            out[key] = bad
    return out


def test_routines_racing_drops_succeed_or_get_42P01(connect, make_role):
    role = make_role("race")
    results = storm(connect, role)
    bad = unexpected(results)
    detail = {k: {s: storm.examples.get((k, s)) for s in v} for k, v in bad.items()}  # type: ignore[attr-defined]
    assert not bad, f"unexpected SQLSTATEs: {bad}\n{detail}"
    # every routine was called, and the loop really made and dropped queues meanwhile
    called = {k for k in results}
    assert {r.name for r, _ in driven(role)} <= called
    assert results["loop:drop"][None] > 10 and results["loop:create"][None] > 10


def test_first_registrations_racing_make_one_runner(connect, make_role):
    """A registrant's runner is made once: registrations racing for it wait for the first maker
    and find its runner (2.8.0 looked it up in a catalog cache that could miss it: 42723, in
    about half of the rounds). Each round with a new registrant, whose runner is still to be made."""
    connect().execute("CREATE PROCEDURE public.race_callback(msg jsonb) LANGUAGE sql AS ''")
    errors: list[str] = []

    def register(c: psycopg.Connection, q: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            c.execute("CALL pgmq.register_callback(%s, 'public.race_callback(jsonb)')", (q,))
        except psycopg.Error as e:
            errors.append(f"{e.sqlstate}: {e}")

    rounds = 6
    for n in range(rounds):
        role = make_role(f"registrant{n}", login=True)
        conns = [connect(user=role) for _ in range(4)]
        names = [f"reg_{n}_{i}" for i in range(len(conns))]
        for c, q in zip(conns, names, strict=True):
            c.execute("SELECT pgmq.create(%s)", (q,))
        barrier = threading.Barrier(len(conns))
        threads = [threading.Thread(target=register, args=(c, q, barrier)) for c, q in zip(conns, names, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert connect().execute("SELECT count(*) FROM pgmq.callbacks").fetchone()[0] == 4 * rounds
