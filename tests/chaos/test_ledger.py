"""The ledger check (chaos/ledger.py) on a hand-made outcome: it must see every kind
of loss and every delivery beyond the rules, and resolve sends of unknown outcome by their id.
No load and no faults here: the rows are put where a fault would leave them."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from chaos import ledger


@pytest.fixture
def book(conn: psycopg.Connection) -> ledger.Book:
    ledger.setup(conn)
    return ledger.Book()


def send(conn, book: ledger.Book, queue: str, uid: str, outcome: str = "acked",
         recorded: bool = True, **extra) -> int:
    """A send as a producer makes it (message + chaos.produced row), with the client's view."""
    msg_id = conn.execute("SELECT pgmq.send(%s, %s)", (queue, Jsonb({"id": uid, **extra}))
                          ).fetchone()[0]
    if recorded:
        conn.execute("INSERT INTO chaos.produced VALUES (%s, %s)", (uid, queue))
    book.sent([uid], queue, outcome)
    if extra.get("poison"):
        book.poison.add(uid)
    return msg_id


def consume(conn, book: ledger.Book, uid: str, msg_id: int, read_ct: int = 1) -> None:
    book.delivered([uid])
    conn.execute("INSERT INTO chaos.consumed VALUES (%s, %s, %s, 'c0')", (uid, msg_id, read_ct))
    conn.execute("SELECT pgmq.delete('work', %s::bigint)", (msg_id,))


def test_a_clean_outcome_passes(conn, book):
    consume(conn, book, "a", send(conn, book, "work", "a"))
    send(conn, book, "work", "b")  # still queued: a place too
    send(conn, book, "jobs", "c")
    conn.execute("DELETE FROM pgmq.q_jobs")
    conn.execute("INSERT INTO chaos.handled VALUES ('c')")  # the worker's callback took it
    v = ledger.check(conn, book)
    assert v.ok and (v.checked, v.lost, v.beyond_rules, v.left_in_queues) == (3, 0, 0, 1)


def test_a_message_found_nowhere_is_lost(conn, book):
    send(conn, book, "work", "a")
    conn.execute("DELETE FROM pgmq.q_work")  # deleted, never recorded by a consumer
    v = ledger.check(conn, book)
    assert (v.lost, v.ok, v.examples["lost"]) == (1, False, ["a"])


def test_an_acknowledged_send_missing_from_produced_is_lost(conn, book):
    send(conn, book, "work", "a", recorded=False)
    v = ledger.check(conn, book)
    assert v.lost == 1 and v.breakdown == {"acked_not_recorded": 1}


def test_unknown_outcomes_are_resolved_by_id(conn, book):
    send(conn, book, "work", "committed", outcome="unknown")
    book.sent(["never"], "work", "unknown")  # the connection broke before the commit
    v = ledger.check(conn, book)
    assert v.ok and (v.unknown_sends, v.unknown_committed, v.checked) == (2, 1, 1)
    conn.execute("DELETE FROM pgmq.q_work")  # now the committed one is lost
    assert ledger.check(conn, book).lost == 1


def test_duplicates_and_over_delivery_are_beyond_the_rules(conn, book):
    a = send(conn, book, "work", "twice")
    consume(conn, book, "twice", a)
    conn.execute("INSERT INTO chaos.consumed VALUES ('twice', %s, 1, 'c1')", (a,))
    b = send(conn, book, "work", "two-places")
    conn.execute("INSERT INTO chaos.consumed VALUES ('two-places', %s, 1, 'c1')", (b,))
    c = send(conn, book, "work", "five-times")
    book.delivered(["five-times"] * 4)
    consume(conn, book, "five-times", c)  # a fifth delivery: 1 + max_retries is 4
    send(conn, book, "work", "refused", outcome="failed")  # the client was told it failed
    v = ledger.check(conn, book)
    assert v.lost == 0 and not v.ok
    assert v.breakdown == {"recorded_twice": 1, "in_two_places": 1, "over_delivered": 1,
                           "failed_but_committed": 1}
    assert v.beyond_rules == 4 and v.redeliveries == 4  # five-times: deliveries 2 to 5


def test_poison_must_be_dead_lettered_after_its_deliveries(conn, book):
    p = send(conn, book, "work", "poison", poison=True)
    book.delivered(["poison"] * 4)
    for _ in range(1 + ledger.MAX_RETRIES):
        conn.execute("SELECT * FROM pgmq.read('work', 0, 1)")
        conn.execute("SELECT pgmq.nack('work', %s::bigint, 'poison')", (p,))
    v = ledger.check(conn, book)
    assert v.ok and (v.dead_lettered, v.dead_lettered_poison, v.redeliveries) == (1, 1, 0)
    # a poison message recorded as handled broke the rules
    conn.execute("INSERT INTO chaos.handled VALUES ('poison')")
    assert ledger.check(conn, book).breakdown["poison_handled"] == 1


def test_client_side_records_may_repeat(conn, book):
    m = send(conn, book, "client", "x")
    book.delivered(["x", "x"])  # handled, ack lost, lease ran out, handled again
    conn.execute("INSERT INTO chaos.client_seen VALUES ('x'), ('x')")
    conn.execute("SELECT pgmq.archive('client', %s::bigint)", (m,))
    v = ledger.check(conn, book)
    assert v.ok and v.redeliveries == 1
    conn.execute("DELETE FROM chaos.client_seen")  # archived but never handled
    assert ledger.check(conn, book).breakdown == {"client_archived_unhandled": 1}


def test_over_the_limit_by_the_clients_count_only_is_told_apart_after_a_crash(conn, book):
    m = send(conn, book, "work", "erased")
    book.delivered(["erased"] * 4)  # one of these takes left no trace in the crash
    consume(conn, book, "erased", m, read_ct=4)  # the server counted 4
    v = ledger.check(conn, book)
    assert v.breakdown == {"over_delivered": 1} and not v.ok
    v = ledger.check(conn, book, crashed=True)
    assert v.ok and v.uncounted_after_crash == 1 and v.beyond_rules == 0
    conn.execute("UPDATE chaos.consumed SET read_ct = 5")  # the server's own count over: strict
    assert ledger.check(conn, book, crashed=True).breakdown == {"over_delivered": 1}


@pytest.fixture
def spark_book(conn: psycopg.Connection) -> ledger.Book:
    ledger.setup(conn, spark=True)
    return ledger.Book()


def through_spark(conn, uid: str, msg_id: int, copies: int = 1) -> None:
    """What the Spark query does: publish into spark_done (exactly once), archive the source."""
    for _ in range(copies):
        conn.execute("SELECT pgmq.send('spark_done', %s)", (Jsonb({"id": uid}),))
    conn.execute("SELECT pgmq.archive('spark', %s::bigint)", (msg_id,))


def test_the_spark_query_must_publish_each_message_once(conn, spark_book):
    book = spark_book
    through_spark(conn, "once", send(conn, book, "spark", "once"))
    send(conn, book, "spark", "waiting")  # not through yet: still a place
    v = ledger.check(conn, book)
    assert v.ok and v.spark == {"sent": 2, "through": 1, "archived": 1, "staging_left": 0}
    assert v.left_in_queues == 1 and v.redeliveries == 0

    through_spark(conn, "twice", send(conn, book, "spark", "twice"), copies=2)
    m = send(conn, book, "spark", "archived-unpublished")
    conn.execute("SELECT pgmq.archive('spark', %s::bigint)", (m,))  # the archive is no place
    m = send(conn, book, "spark", "published-not-acked")
    conn.execute("SELECT pgmq.send('spark_done', %s)", (Jsonb({"id": "published-not-acked"}),))
    conn.execute("SELECT pgmq.send('spark_done', %s)", (Jsonb({"id": "from-nowhere"}),))
    v = ledger.check(conn, book)
    assert v.examples["lost"] == ["archived-unpublished"]
    assert v.breakdown == {"recorded_twice": 1, "in_two_places": 1, "unknown_origin": 1}
    assert v.examples["recorded_twice"] == ["twice"]
    assert v.examples["in_two_places"] == ["published-not-acked"]


def test_without_spark_the_ledger_has_no_spark_places(conn, book):
    consume(conn, book, "a", send(conn, book, "work", "a"))
    assert "q_spark_done" not in ledger.places(conn)
    assert ledger.check(conn, book).spark == {}
