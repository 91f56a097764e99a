"""The consumer-side counters (pgmq_build/ops/counters.py) after real workloads: each counter's
value is exact once the workload's backend has reported its statistics (pg_stat_force_next_flush:
at its next transaction end)."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from pgmq_build.ops import counters
from tests.helpers import send_n
from tests.ops.support import q, samples


def flushed(conn: psycopg.Connection) -> None:
    """Have conn's backend report its table statistics now (at the end of this statement)."""
    conn.execute("SELECT pg_stat_force_next_flush()")


def exported(ops) -> dict:
    result = ops("metrics")
    assert result.exit_code == 0, result.output
    return samples(result.stdout)


def values(got: dict, queue: str) -> tuple[float, float, float]:
    return tuple(got[(f"pgmq_queue_{c}_messages_total", q(queue))]
                 for c in ("deleted", "updated", "archived"))


def test_each_consumer_operation_counts(ops, conn, queue):
    assert values(exported(ops), "jobs") == (0, 0, 0)
    ids = send_n(conn, queue, 20)
    conn.execute("SELECT * FROM pgmq.read('jobs', 60, 4)")                       # 4 leases
    conn.execute("SELECT pgmq.delete('jobs', %s::bigint[])", (ids[:3],))         # 3 deleted
    conn.execute("SELECT pgmq.archive('jobs', %s::bigint[])", (ids[3:5],))       # 2 archived
    conn.execute("SELECT * FROM pgmq.pop('jobs', 3)")                            # 3 deleted
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 30)", (ids[10],))               # 1 update
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (ids[11],))             # 1 update
    flushed(conn)
    assert values(exported(ops), "jobs") == (3 + 2 + 3, 4 + 1 + 1, 2)

    # a dead letter (no dead-letter queue: the archive): a settle, a delete, an archive insert
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0)")
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (ids[12],))
    # a rolled-back pop counts too (the statistics count attempts)
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    # purge_queue truncates: no row is counted
    conn.execute("SELECT pgmq.purge_queue('jobs')")
    flushed(conn)
    assert values(exported(ops), "jobs") == (8 + 1 + 1, 6 + 1, 2 + 1)


def test_dead_letters_leave_the_queue_and_enter_the_dead_letter_queue(ops, conn, queue):
    conn.execute("SELECT pgmq.create('jobs_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    (msg_id,) = send_n(conn, queue, 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (msg_id,))
    flushed(conn)
    got = exported(ops)
    assert values(got, "jobs") == (1, 2, 0)      # read + settle, then moved out
    assert values(got, "jobs_dlq") == (0, 0, 0)  # received, not consumed


def test_partitioned_queue_sums_its_partitions(ops, conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('parts', '10', '100')")
    ids = send_n(conn, "parts", 35)  # three partitions
    conn.execute("SELECT * FROM pgmq.read('parts', 60, 25)")
    conn.execute("SELECT pgmq.delete('parts', %s::bigint[])", (ids[:5] + ids[20:25],))
    conn.execute("SELECT pgmq.archive('parts', %s::bigint[])", (ids[12:15],))
    flushed(conn)
    assert values(exported(ops), "parts") == (13, 25, 3)


def test_one_query_for_every_queue_the_caller_may_read(conn, connect, make_role, queue):
    conn.execute("SELECT pgmq.create('other')")
    send_n(conn, "other", 2)
    conn.execute("SELECT * FROM pgmq.pop('other', 2)")
    flushed(conn)
    role = make_role("reader")
    conn.execute(f"CALL pgmq.grant_queue_access('other', '{role}')")
    mine = connect(row_factory=dict_row)
    assert [r["queue_name"] for r in counters.read(mine)] == ["jobs", "other"]
    mine.execute(f"SET ROLE {role}")
    assert counters.read(mine) == [{"queue_name": "other", "deleted": 2, "updated": 0, "archived": 0}]


def failures(got: dict, queue: str) -> dict:
    """{reason: dead letters} and the nacks of queue, as exported."""
    dead = {dict(labels)["reason"]: v for (name, labels), v in got.items()
            if name == "pgmq_queue_dead_lettered_messages_total" and dict(labels)["queue"] == queue}
    return {"dead": dead, "nacked": got.get(("pgmq_queue_nacked_messages_total", q(queue)), 0)}


def test_failures_are_counted_by_reason_in_their_transaction(ops, conn, queue):
    conn.execute("SELECT pgmq.create('jobs_dlq')")
    ids = send_n(conn, queue, 6)
    assert failures(exported(ops), "jobs") == {"dead": {}, "nacked": 0}
    for i in ids[:2]:
        conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (i,))  # retried (no policy)
    conn.execute("SELECT pgmq.nack('JOBS', %s, 'boom')", (ids[2],))  # counted for jobs too
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (ids[0],))  # dead-lettered
    assert not conn.execute("SELECT pgmq.nack('jobs', 999, 'boom')").fetchone()[0]  # no message
    with conn.transaction(force_rollback=True):  # rolled back: counts nothing
        conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (ids[1],))
    conn.execute("UPDATE pgmq.q_jobs SET headers = '{\"x-pgmq-ttl\": 1}', "
                 "enqueued_at = now() - interval '1 hour' WHERE msg_id = ANY(%s)", (ids[4:],))
    assert conn.execute("SELECT pgmq.expire_messages('jobs')").fetchone()[0] == 2
    got = failures(exported(ops), "jobs")
    assert got == {"dead": {"nack": 1, "ttl": 2}, "nacked": 4}
    assert failures(exported(ops), "jobs_dlq") == {"dead": {}, "nacked": 0}
    assert conn.execute("SELECT count(*) FROM pgmq.q_jobs_dlq").fetchone()[0] == 3


def test_failure_counters_follow_the_queue_privileges(conn, connect, make_role):
    conn.execute("SELECT pgmq.create('mine'), pgmq.create('theirs')")
    for name in ("mine", "theirs"):
        (msg_id,) = send_n(conn, name, 1)
        conn.execute("SELECT pgmq.nack(%s, %s)", (name, msg_id))
    role = make_role("tenant")
    conn.execute(f"CALL pgmq.grant_queue_access('mine', '{role}')")
    tenant = connect(row_factory=dict_row)
    tenant.execute(f"SET ROLE {role}")
    assert [(r["queue_name"], r["n"]) for r in counters.read_failures(tenant)] == [("mine", 1)]
    (msg_id,) = send_n(conn, "mine", 1)
    tenant.execute("SELECT pgmq.nack('mine', %s)", (msg_id,))  # its own queue: counted
    assert [(r["queue_name"], r["n"]) for r in counters.read_failures(tenant)] == [("mine", 2)]
    for sql in ("INSERT INTO pgmq.queue_counters VALUES ('theirs', 'nacked', '', 99, 1000)",
                "UPDATE pgmq.queue_counters SET n = 1000 WHERE queue_name = 'theirs'",
                "DELETE FROM pgmq.queue_counters WHERE queue_name = 'theirs'"):
        try:
            tenant.execute(sql)
        except psycopg.errors.InsufficientPrivilege:
            pass  # refused by row security
    assert conn.execute("SELECT sum(n) FROM pgmq.queue_counters WHERE queue_name = 'theirs'"
                        ).fetchone()[0] == 1
    conn.execute("SELECT pgmq.drop_queue('theirs')")  # its counters go with it
    assert conn.execute("SELECT count(*) FROM pgmq.queue_counters WHERE queue_name = 'theirs'"
                        ).fetchone()[0] == 0


def test_an_extension_before_the_failure_counters_is_still_scraped(ops, conn):
    """2.10.0 has no pgmq.queue_counters: the statistics' counters only, and pgmq_up 1."""
    conn.execute("DROP EXTENSION pgmq CASCADE")
    conn.execute("CREATE EXTENSION pgmq VERSION '2.10.0'")
    conn.execute("SELECT pgmq.create('old')")
    send_n(conn, "old", 3)
    conn.execute("SELECT * FROM pgmq.pop('old', 2)")
    flushed(conn)
    got = exported(ops)
    assert got[("pgmq_up", ())] == 1
    assert values(got, "old") == (2, 0, 0)
    assert not any(name.startswith(("pgmq_queue_dead_lettered", "pgmq_queue_nacked")) for name, _ in got)


def test_concurrent_failures_never_wait_for_each_other(conn, connect, queue):
    """A consumer that failed a message holds its count's row until it commits (a long
    transaction, say); another one failing a message meanwhile counts on another row at once."""
    ids = send_n(conn, queue, 3)
    conn.execute("SELECT pgmq.nack('jobs', %s)", (ids[0],))
    first, second = connect(autocommit=False), connect(autocommit=False)
    second.execute("SET lock_timeout = '2s'")
    first.execute("SELECT pgmq.nack('jobs', %s)", (ids[1],))   # holds the counter's row
    second.execute("SELECT pgmq.nack('jobs', %s)", (ids[2],))  # would time out if it waited
    second.commit()
    first.commit()
    assert conn.execute("SELECT sum(n), count(*) FROM pgmq.queue_counters WHERE counter = 'nacked'"
                        ).fetchone() == (3, 2)
    conn.execute("SELECT pgmq.nack('jobs', %s)", (ids[0],))  # nobody holds them: no new row
    assert conn.execute("SELECT sum(n), count(*) FROM pgmq.queue_counters").fetchone() == (4, 2)


def test_a_planted_count_near_the_maximum_never_stops_dead_lettering(conn, connect, make_role):
    """A consumer may write its queue's counter rows (row security lets it count its failures):
    a row at the bigint maximum must not make the next count overflow, which would fail every
    later dead-lettering of the queue (and every read that dead-letters)."""
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('jobs_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    role = make_role("consumer")
    conn.execute(f"CALL pgmq.grant_queue_access('jobs', '{role}')")
    tenant = connect()
    tenant.execute(f"SET ROLE {role}")
    tenant.execute("INSERT INTO pgmq.queue_counters VALUES ('jobs', 'dead_lettered', 'nack', 1, 9223372036854775806)")
    tenant.execute("INSERT INTO pgmq.queue_counters VALUES ('jobs', 'nacked', '', 1, 9223372036854775807)")
    tenant.commit()
    ids = send_n(conn, "jobs", 3)
    for msg_id in ids:
        assert conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (msg_id,)).fetchone()[0] is True
    assert conn.execute("SELECT count(*) FROM pgmq.q_jobs_dlq").fetchone()[0] == 3
    assert conn.execute("SELECT n FROM pgmq.queue_counters WHERE queue_name = 'jobs' ORDER BY counter"
                        ).fetchall() == [(9223372036854775807,), (9223372036854775807,)]
