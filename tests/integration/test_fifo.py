"""FIFO groups: read_grouped / read_grouped_rr / read_grouped_head, their _with_poll wrappers and
the FIFO index.

Messages are named like "A1": group A, first of its group. Most tests run twice, on a queue
without and with the FIFO index, because the readers take different plans in the two cases.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections import Counter, defaultdict

import psycopg
import pytest

from tests.helpers import column, notices, raises_sql, run_threads, scalar

COLS = ["msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers"]
READERS = ["read_grouped", "read_grouped_rr", "read_grouped_head"]
DEFAULT = "_default_fifo_group"


@pytest.fixture(params=["scan", "index"])
def fifo(request, conn):
    """Queue 'jobs', without or with the FIFO index; returns the connection."""
    conn.execute("SELECT pgmq.create('jobs')")
    if request.param == "index":
        conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    return conn


def group_of(tag: str) -> str | None:
    return tag.rstrip("0123456789") or None


def send(conn, tags: str, queue: str = "jobs") -> dict[str, int]:
    """Send messages named like 'A1 B1 A2' in that order; a name without letters ('1') goes to
    the default group (no header). Returns name -> msg_id."""
    ids = {}
    for tag in tags.split():
        group = group_of(tag)
        headers = None if group is None else {"x-pgmq-group": group}
        ids[tag] = scalar(conn, "SELECT pgmq.send(%s, jsonb_build_object('tag', %s::text), %s::jsonb)",
                          (queue, tag, psycopg.types.json.Jsonb(headers) if headers else None))
    return ids


def read(conn, reader: str, vt: int = 30, qty: int = 10, queue: str = "jobs") -> list[str]:
    """The names of the messages a reader leases, in the order it returns them."""
    return column(conn, f"SELECT message->>'tag' FROM pgmq.{reader}(%s, %s, %s)", (queue, vt, qty))


def hide(conn, ids, seconds: int = 300):
    conn.execute("SELECT pgmq.set_vt('jobs', %s::bigint[], %s)", (list(ids), seconds))


# ---------------------------------------------------------------------------- ordering rules

def test_read_grouped_fills_the_batch_from_the_oldest_group(fifo):
    ids = send(fifo, "A1 B1 A2 C1 B2 A3")
    assert read(fifo, "read_grouped", qty=4) == ["A1", "A2", "A3", "B1"]
    # B1 is in flight, so B2 waits; A is empty
    assert read(fifo, "read_grouped", qty=4) == ["C1"]
    fifo.execute("SELECT pgmq.delete('jobs', %s::bigint)", (ids["B1"],))
    assert read(fifo, "read_grouped", qty=4) == ["B2"]


def test_read_grouped_blocks_a_group_while_any_of_its_messages_is_invisible(fifo):
    # Upstream's rule: a message in flight or delayed anywhere in the group holds it back, so
    # two consumers never work on one group and no message overtakes an older one.
    ids = send(fifo, "A1 A2 B1 B2")
    hide(fifo, [ids["A2"]])
    send(fifo, "C1")
    fifo.execute("""SELECT pgmq.send('jobs', '{"tag": "C2"}', '{"x-pgmq-group": "C"}', 300)""")
    assert read(fifo, "read_grouped") == ["B1", "B2"]
    assert read(fifo, "read_grouped") == []


def test_read_grouped_rr_layers_groups_by_the_age_of_their_head(fifo):
    send(fifo, "A1 B1 A2 C1 B2 A3 1")
    assert read(fifo, "read_grouped_rr", qty=4) == ["A1", "B1", "C1", "1"]
    assert read(fifo, "read_grouped_rr") == []  # every head is in flight


def test_read_grouped_rr_returns_whole_layers_in_selection_order(fifo):
    send(fifo, "A1 B1 A2 C1 B2 A3 1")
    assert read(fifo, "read_grouped_rr") == ["A1", "B1", "C1", "1", "A2", "B2", "A3"]


def test_read_grouped_rr_takes_only_the_visible_run_from_the_head(fifo):
    ids = send(fifo, "A1 A2 A3 A4 B1 C1 C2")
    hide(fifo, [ids["A3"], ids["C1"]])
    # A: A1 A2 then A3 is invisible, so not A4; C: its head is invisible
    assert read(fifo, "read_grouped_rr") == ["A1", "B1", "A2"]


def test_read_grouped_head_takes_one_head_per_group(fifo):
    ids = send(fifo, "A1 B1 A2 C1 B2 A3")
    assert read(fifo, "read_grouped_head", qty=2) == ["A1", "B1"]
    assert read(fifo, "read_grouped_head") == ["C1"]
    fifo.execute("SELECT pgmq.delete('jobs', %s::bigint)", (ids["A1"],))
    assert read(fifo, "read_grouped_head") == ["A2"]


@pytest.mark.parametrize("reader", ["read_grouped_rr", "read_grouped_head"])
def test_a_group_whose_head_is_invisible_is_skipped(fifo, reader):
    ids = send(fifo, "A1 A2 B1")
    hide(fifo, [ids["A1"]])
    assert read(fifo, reader) == ["B1"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("ttl", ["queue", "header"])
def test_a_message_past_its_ttl_is_dead_lettered_not_delivered(fifo, reader, ttl):
    """The queue's TTL or a message's own x-pgmq-ttl: the grouped readers dead-letter a message
    past it (reason ttl) instead of leasing it; its group goes on after it, in order."""
    ids = send(fifo, "A1 A2 B1")
    if ttl == "queue":
        fifo.execute("SELECT pgmq.set_message_ttl('jobs', 60)")
        stale = "A1"
    else:
        ids["C1"] = scalar(fifo, """SELECT pgmq.send('jobs', '{"tag": "C1"}'::jsonb, '{"x-pgmq-group": "C", "x-pgmq-ttl": 60}'::jsonb)""")
        stale = "C1"
    fifo.execute("UPDATE pgmq.q_jobs SET enqueued_at = enqueued_at - interval '2 hours' WHERE msg_id = %s",
                 (ids[stale],))
    seen: list[str] = []
    for _ in range(3):  # a consumer that acknowledges what it gets
        got = read(fifo, reader)
        seen += got
        fifo.execute("SELECT pgmq.delete('jobs', %s::bigint[])", ([ids[t] for t in got],))
    assert sorted(seen) == sorted(t for t in ids if t != stale)
    assert [t for t in seen if t.startswith("A")] == [t for t in ("A1", "A2") if t != stale]
    assert fifo.execute("SELECT msg_id, headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_jobs").fetchall() == [
        (ids[stale], "ttl")]


def test_missing_header_means_the_default_group(fifo):
    for headers in (None, "{}", '{"other": "x"}', '{"x-pgmq-group": "_default_fifo_group"}'):
        fifo.execute("SELECT pgmq.send('jobs', jsonb_build_object('tag', 'd'), %s::jsonb)", (headers,))
    send(fifo, "A1")
    assert read(fifo, "read_grouped_head") == ["d", "A1"]
    assert read(fifo, "read_grouped_head") == []
    fifo.execute("SELECT pgmq.delete('jobs', 1::bigint)")
    got = fifo.execute("SELECT msg_id FROM pgmq.read_grouped('jobs', 30, 10)").fetchall()
    assert got == [(2,), (3,), (4,)]


@pytest.mark.parametrize("reader,first,meanwhile,after", [
    ("read_grouped", ["A1"], ["B1"], ["A1", "A2"]),
    ("read_grouped_rr", ["A1"], ["B1"], ["A1", "A2"]),
    ("read_grouped_head", ["A1"], ["B1"], ["A1"]),
])
def test_order_holds_after_a_lease_expires(fifo, reader, first, meanwhile, after):
    """Upstream #476/#477: a message whose lease expired comes back before the rest of its group."""
    send(fifo, "A1 A2 B1")
    assert read(fifo, reader, vt=1, qty=1) == first
    assert read(fifo, reader, qty=10) == meanwhile  # A2 must not overtake A1 in flight
    time.sleep(1.2)
    rows = fifo.execute(f"SELECT message->>'tag', read_ct FROM pgmq.{reader}('jobs', 30, 10)").fetchall()
    assert [tag for tag, _ in rows] == after
    assert rows[0] == ("A1", 2)


@pytest.mark.parametrize("reader", READERS)
def test_lease_is_like_read(fifo, reader):
    send(fifo, "A1 B1")
    cur = fifo.execute(f"SELECT * FROM pgmq.{reader}(queue_name => 'jobs', vt => 30, qty => 5)")
    assert [d.name for d in cur.description] == COLS
    rows = cur.fetchall()
    assert rows
    for _, read_ct, enqueued_at, last_read_at, vt, message, headers in rows:
        assert read_ct == 1
        assert enqueued_at <= last_read_at
        assert vt - last_read_at == dt.timedelta(seconds=30)
        assert headers == {"x-pgmq-group": message["tag"][0]}
    stored = fifo.execute("SELECT msg_id, read_ct, last_read_at, vt FROM pgmq.q_jobs ORDER BY msg_id").fetchall()
    assert sorted((r[0], r[1], r[3], r[4]) for r in rows) == stored


@pytest.mark.parametrize("reader", READERS)
def test_bad_input(fifo, reader):
    send(fifo, "A1")
    with raises_sql("42P01", 'relation "pgmq.q_nope" does not exist'):
        fifo.execute(f"SELECT * FROM pgmq.{reader}('nope', 30, 1)")
    with raises_sql("P0001", "queue name contains invalid characters: $, ;, --, or \\'"):
        fifo.execute(f"SELECT * FROM pgmq.{reader}('jobs; --', 30, 1)")
    with raises_sql("2201W", "LIMIT must not be negative"):  # PostgreSQL's error, as upstream's LIMIT
        fifo.execute(f"SELECT * FROM pgmq.{reader}('jobs', 30, -1)")
    with raises_sql("22004", "qty cannot be NULL"):
        fifo.execute(f"SELECT * FROM pgmq.{reader}('jobs', 30, NULL)")
    assert read(fifo, reader, qty=0) == []
    assert scalar(fifo, "SELECT read_ct FROM pgmq.q_jobs") == 0


@pytest.mark.parametrize("reader", ["read_grouped_rr", "read_grouped"])
def test_a_row_locked_elsewhere_ends_its_group_run(fifo, connect, reader):
    """A message another transaction holds (say, being deleted) is skipped, and so is everything
    after it in its group: the group's order is never broken."""
    ids = send(fifo, "A1 B1 A2 A3 B2")
    other = connect(autocommit=False)
    other.execute("SELECT 1 FROM pgmq.q_jobs WHERE msg_id = %s FOR UPDATE", (ids["A2"],))
    fifo.execute("SET lock_timeout = '2s'")  # skipped, not waited for
    assert read(fifo, reader) == ["A1", "B1", "B2"]
    other.rollback()


# ---------------------------------------------------------------------------- transactions

@pytest.mark.parametrize("reader", READERS)
def test_an_open_transaction_keeps_its_groups(fifo, connect, reader):
    send(fifo, "A1 A2 B1 B2")
    holder = connect(autocommit=False)
    assert read(holder, reader, qty=1) == ["A1"]
    # holder's lease is not committed: the rows still look visible, but the group is taken
    got = read(fifo, reader, qty=10)
    assert got[0] == "B1" and not {"A1", "A2"} & set(got)
    holder.commit()
    assert read(fifo, reader, qty=10) == []  # A1 in flight, B taken above


@pytest.mark.parametrize("reader", READERS)
def test_a_rolled_back_read_gives_the_group_back(fifo, connect, reader):
    send(fifo, "A1 A2")
    holder = connect(autocommit=False)
    assert read(holder, reader, qty=1) == ["A1"]
    holder.rollback()
    rows = fifo.execute(f"SELECT message->>'tag', read_ct FROM pgmq.{reader}('jobs', 30, 1)").fetchall()
    assert rows == [("A1", 1)]


@pytest.mark.parametrize("reader", READERS)
def test_simultaneous_readers_never_take_the_same_group(connect, reader):
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    setup.execute("SELECT pgmq.create_fifo_index('jobs')")
    send(setup, " ".join(f"{g}{i}" for i in range(1, 6) for g in "ABCDEF"))
    readers = [connect(autocommit=False) for _ in range(8)]
    barrier = threading.Barrier(len(readers))
    got: list[list[str]] = [[] for _ in readers]

    def work(i: int) -> None:
        barrier.wait()
        got[i] = read(readers[i], reader, qty=3)

    run_threads([threading.Thread(target=work, args=(i,)) for i in range(len(readers))])
    owners = defaultdict(set)
    for i, tags in enumerate(got):
        for tag in tags:
            owners[group_of(tag)].add(i)
        by_group = defaultdict(list)
        for tag in tags:
            by_group[group_of(tag)].append(int(tag[1:]))
        assert all(n == list(range(1, len(n) + 1)) for n in by_group.values()), got
    assert all(len(o) == 1 for o in owners.values()), got
    # a reader that finds a group taken moves on to the next one instead of coming back empty
    assert sorted(owners) == list("ABCDEF"), got
    for c in readers:
        c.commit()


# ---------------------------------------------------------------------------- polling

POLLERS = [r + "_with_poll" for r in READERS]


@pytest.mark.parametrize("poller", POLLERS)
def test_with_poll_returns_as_soon_as_a_message_arrives(connect, poller):
    reader, writer = connect(), connect()
    reader.execute("SELECT pgmq.create('jobs')")

    def later():
        time.sleep(0.4)
        send(writer, "A1")

    t = threading.Thread(target=later)
    start = time.monotonic()
    t.start()
    got = column(reader, f"SELECT message->>'tag' FROM pgmq.{poller}('jobs', 30, 5, 5, 50)")
    elapsed = time.monotonic() - start
    t.join()
    assert got == ["A1"]
    assert 0.3 < elapsed < 4


@pytest.mark.parametrize("poller", POLLERS)
def test_with_poll_validation_and_a_single_read(fifo, poller):
    with raises_sql("22023", "poll_interval_ms must be positive"):
        fifo.execute(f"SELECT * FROM pgmq.{poller}('jobs', 5, 1, 1, 0)")
    with raises_sql("22023", "max_poll_seconds must be non-negative"):
        fifo.execute(f"SELECT * FROM pgmq.{poller}('jobs', 5, 1, -1)")
    with raises_sql("42P01"):
        fifo.execute(f"SELECT * FROM pgmq.{poller}('nope', 5, 1)")
    start = time.monotonic()
    assert fifo.execute(f"SELECT * FROM pgmq.{poller}('jobs', 5, 1, 0)").fetchall() == []
    assert time.monotonic() - start < 0.5
    send(fifo, "A1 A2")
    got = column(fifo, f"""SELECT message->>'tag' FROM pgmq.{poller}(queue_name => 'jobs', vt => 5, qty => 1,
                           max_poll_seconds => 0, poll_interval_ms => 10)""")
    assert got == ["A1"]


def test_with_poll_gives_up_after_max_poll_seconds(fifo):
    send(fifo, "A1")
    hide(fifo, [1])
    start = time.monotonic()
    assert fifo.execute("SELECT * FROM pgmq.read_grouped_with_poll('jobs', 30, 1, 1, 100)").fetchall() == []
    assert 0.9 < time.monotonic() - start < 3


# ---------------------------------------------------------------------------- FIFO index

def fifo_index(conn, table="q_jobs"):
    return conn.execute("""SELECT indexname, indexdef FROM pg_indexes
                           WHERE schemaname = 'pgmq' AND tablename = %s AND indexname LIKE '%%fifo%%'""",
                        (table,)).fetchall()


def test_create_fifo_index_is_idempotent(conn, queue):
    conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    conn.execute("SELECT pgmq.create_fifo_index(queue_name => 'jobs')")
    conn.execute("SELECT pgmq._create_fifo_index_if_not_exists('jobs')")
    [(name, definition)] = fifo_index(conn)
    assert name == "q_jobs_fifo_idx"
    assert "USING btree" in definition
    assert "'x-pgmq-group'" in definition and definition.endswith(", msg_id)")
    assert scalar(conn, """SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmq' AND tablename = 'q_jobs'
                           AND indexdef LIKE '%x-pgmq-group%'""") == 1
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.create_fifo_index('nope')")


def test_create_fifo_index_replaces_upstreams_gin_index(conn, queue):
    conn.execute("CREATE INDEX q_jobs_fifo_idx ON pgmq.q_jobs USING gin (headers)")
    seen = notices(conn)
    conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    [(_, definition)] = fifo_index(conn)
    assert "USING btree" in definition
    assert seen == []  # replaced quietly: upstream's create_fifo_index prints nothing of the kind


def test_the_grouped_readers_use_the_fifo_index(conn, queue):
    """With the index, a read must not visit the whole queue (upstream #496)."""
    conn.execute("""SELECT pgmq.send_batch('jobs',
                        (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 5000)),
                        (SELECT array_agg(jsonb_build_object('x-pgmq-group', 'g' || (i % 50)) ORDER BY i)
                         FROM generate_series(1, 5000) i))""")
    conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    conn.execute("VACUUM ANALYZE pgmq.q_jobs")

    def seq_scanned(sql):
        before = scalar(conn, "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = 'q_jobs'")
        conn.execute(sql).fetchall()
        after = scalar(conn, "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = 'q_jobs'")
        return (after or 0) - (before or 0)

    with conn.transaction():
        for reader in READERS:
            assert seq_scanned(f"SELECT * FROM pgmq.{reader}('jobs', 30, 10)") == 0, reader


def test_partitioned_queue(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('jobs', '4', '100')")
    send(conn, "A1 B1 A2 C1 B2 A3 A4 B3 C2")  # across three partitions
    assert read(conn, "read_grouped_rr", vt=0) == ["A1", "B1", "C1", "A2", "B2", "C2", "A3", "B3", "A4"]
    conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    seen = notices(conn)
    conn.execute("SELECT pgmq.create_fifo_index('jobs')")
    assert seen == [("NOTICE", 'relation "q_jobs_fifo_idx" already exists, skipping')]  # upstream's
    assert scalar(conn, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'pgmq.q_jobs_fifo_idx'::regclass")
    assert read(conn, "read_grouped_head", vt=0) == ["A1", "B1", "C1"]
    assert read(conn, "read_grouped", qty=5) == ["A1", "A2", "A3", "A4", "B1"]
    assert read(conn, "read_grouped", qty=5) == ["C1", "C2"]


def test_create_fifo_indexes_all_covers_every_queue(conn):
    conn.execute("SELECT pgmq.create('a')")
    conn.execute("SELECT pgmq.create('MyQueue')")
    conn.execute("SELECT pgmq.create_unlogged('u')")
    conn.execute("SELECT pgmq.create_fifo_indexes_all()")
    conn.execute("SELECT pgmq.create_fifo_indexes_all()")
    for table in ("q_a", "q_myqueue", "q_u"):
        assert [name for name, _ in fifo_index(conn, table)] == [table + "_fifo_idx"]


# ---------------------------------------------------------------------------- concurrency

class FifoModel:
    """What consumers may see, checked as they see it.

    pending[g]: the ids of group g not yet deleted, ascending. holder[g]: the consumer working on
    g. lease_until[id]: the end of a lease a consumer gave up on (it must not be re-leased
    earlier). A consumer releases a group before the statement that lets others take it
    (delete, commit, rollback), so a check never fires on a legitimate hand-over.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, list[int]] = defaultdict(list)
        self.holder: dict[str, str] = {}
        self.lease_until: dict[int, dt.datetime] = {}
        self.deliveries: Counter[int] = Counter()
        self.errors: list[str] = []
        self.producing = True

    def add(self, group: str, msg_id: int) -> None:
        with self.lock:
            self.pending[group].append(msg_id)

    def done(self) -> bool:
        with self.lock:
            return not self.producing and not any(self.pending.values())

    def receive(self, who: str, rows) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        with self.lock:
            for msg_id, group, last_read_at, _ in rows:
                groups.setdefault(group, []).append(msg_id)
                self.deliveries[msg_id] += 1
                until = self.lease_until.get(msg_id)
                if until is not None and last_read_at < until:
                    self.errors.append(f"{who} got {msg_id} at {last_read_at}, leased until {until}")
            for group, ids in groups.items():
                if self.holder.get(group, who) != who:
                    self.errors.append(f"{who} got {ids} of {group} while {self.holder[group]} holds it")
                if ids != self.pending[group][:len(ids)]:
                    self.errors.append(f"{who} got {ids} of {group}; oldest were {self.pending[group][:5]}")
                self.holder[group] = who
        return groups

    def release(self, who: str, groups: dict[str, list[int]], deleted: bool, rows=()) -> None:
        with self.lock:
            for group, ids in groups.items():
                if self.holder.get(group) == who:
                    del self.holder[group]
                if deleted:
                    self.pending[group] = [i for i in self.pending[group] if i not in ids]
            for msg_id, _, _, vt in rows:
                self.lease_until[msg_id] = vt


def consume(model: FifoModel, conn: psycopg.Connection, who: str, reader: str, seed: int) -> None:
    """A consumer: autocommit (deletes, or abandons a 1 s lease) or in transactions (deletes and
    commits, or rolls back)."""
    rng = random.Random(seed)
    in_tx = not conn.autocommit
    deadline = time.monotonic() + 60
    while not model.done():
        if time.monotonic() > deadline:
            model.errors.append(f"{who}: gave up waiting")
            return
        abandon = rng.random() < 0.1
        vt = 1 if abandon and not in_tx else 30
        rows = conn.execute(
            f"SELECT msg_id, COALESCE(headers->>'x-pgmq-group', %s), last_read_at, vt "
            f"FROM pgmq.{reader}('jobs', %s, %s)", (DEFAULT, vt, rng.randint(1, 4))).fetchall()
        if not rows:
            if in_tx:
                conn.rollback()
            time.sleep(0.01)
            continue
        groups = model.receive(who, rows)
        ids = [r[0] for r in rows]
        if not in_tx:
            # at the database: nothing else of these groups is in flight
            others = column(conn, """SELECT msg_id FROM pgmq.q_jobs
                                     WHERE COALESCE(headers->>'x-pgmq-group', %s) = ANY(%s)
                                       AND vt > clock_timestamp() AND NOT msg_id = ANY(%s)""",
                            (DEFAULT, list(groups), ids))
            if others:
                model.errors.append(f"{who} got {ids} while {others} of the same groups are in flight")
        time.sleep(rng.random() * 0.005)  # work
        if abandon:
            model.release(who, groups, deleted=False, rows=[] if in_tx else rows)
            if in_tx:
                conn.rollback()
        else:
            model.release(who, groups, deleted=True)
            conn.execute("SELECT pgmq.delete('jobs', %s::bigint[])", (ids,))
            if in_tx:
                conn.commit()


def produce(model: FifoModel, conn: psycopg.Connection, tags: list[str]) -> None:
    for tag in tags:
        group = group_of(tag) or DEFAULT
        with conn.transaction():  # registered before anyone can see it
            model.add(group, send(conn, tag)[tag])
        time.sleep(0.001)
    model.producing = False


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index"])
@pytest.mark.parametrize("reader", READERS)
def test_concurrent_consumers_keep_every_group_in_order(connect, reader, indexed):
    """Six consumers (three autocommit, three in transactions, some giving up on their
    messages) and a producer. Checked on every read: a group is never held by two consumers,
    a group's messages come oldest first with none skipped (also after a lease expired or a
    transaction rolled back), no message is leased again before its lease ends; at the end
    every message was delivered and deleted."""
    setup = connect()
    setup.execute("SELECT pgmq.create('jobs')")
    if indexed:
        setup.execute("SELECT pgmq.create_fifo_index('jobs')")
    rng = random.Random(7)
    tags = [f"{g}{i}" for g in "ABCDEFGHIJ" for i in range(1, 13)] + [str(i) for i in range(1, 13)]
    rng.shuffle(tags)
    model = FifoModel()
    first, later = tags[:80], tags[80:]
    for tag in first:
        model.add(group_of(tag) or DEFAULT, send(setup, tag)[tag])
    consumers = [connect(autocommit=i % 2 == 0) for i in range(6)]
    threads = [threading.Thread(target=consume, args=(model, c, f"c{i}", reader, i))
               for i, c in enumerate(consumers)]
    threads.append(threading.Thread(target=produce, args=(model, connect(), later)))
    run_threads(threads)
    assert model.errors == []
    assert len(model.deliveries) == len(tags)
    assert scalar(setup, "SELECT count(*) FROM pgmq.q_jobs") == 0
