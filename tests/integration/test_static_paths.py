"""Static paths (templates/_macros/static_paths.sql.j2): each queue's hot statements compiled
into generated PL/pgSQL that follows pgmq.meta; any queue they do not hold still works through
EXECUTE, and a path that meets a queue it should hold rebuilds itself."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest

from tests.helpers import column, scalar

PATHS = ["send", "send_dedup", "send_batch", "read", "read_judged", "read_ttl", "read_clean", "pop", "pop_judged",
         "pop_ttl", "pop_clean", "read_ttl_clean", "pop_ttl_clean", "peek", "claim_next", "claim_next_ranked",
         "delete", "delete_one", "archive", "set_vt"]


def routed(conn: psycopg.Connection, path: str = "send") -> list[str]:
    """The queue names path _static_<path> has a branch for, sorted."""
    src = scalar(conn, "SELECT prosrc FROM pg_proc WHERE proname = %s AND pronamespace = 'pgmq'::regnamespace",
                 (f"_static_{path}",))
    pattern = r"IF \$\d+ OPERATOR\(pg_catalog\.=\) '((?:[^']|'')*)' THEN"
    return sorted((m.replace("''", "'") for m in re.findall(pattern, src)), key=lambda n: n.encode())


def roundtrip(conn: psycopg.Connection, q: str) -> None:
    """Every path once on queue q, checking what comes back."""
    a = scalar(conn, "SELECT pgmq.send(%s, '{\"n\":1}')", (q,))
    b, c, d = column(conn, "SELECT * FROM pgmq.send_batch(%s, ARRAY['{\"n\":2}','{\"n\":3}','{\"n\":4}']::jsonb[])", (q,))
    assert [a, b, c, d] == list(range(a, a + 4))
    assert column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 2)", (q,)) == [a, b]
    assert column(conn, "SELECT msg_id FROM pgmq.set_vt(%s, ARRAY[%s::bigint], 0)", (q, a)) == [a]
    assert column(conn, "SELECT msg_id FROM pgmq.pop(%s)", (q,)) == [a]
    assert scalar(conn, "SELECT pgmq.delete(%s, %s::bigint)", (q, b)) is True
    assert scalar(conn, "SELECT pgmq.delete(%s, %s::bigint)", (q, b)) is False
    assert column(conn, "SELECT * FROM pgmq.archive(%s, ARRAY[%s, %s]::bigint[])", (q, c, 999999)) == [c]
    assert column(conn, "SELECT * FROM pgmq.delete(%s, ARRAY[%s]::bigint[])", (q, d)) == [d]
    assert scalar(conn, "SELECT queue_length FROM pgmq.metrics(%s)", (q,)) == 0


def dedup_roundtrip(conn: psycopg.Connection, q: str) -> None:
    """A send with a dedup key, and its duplicate, on queue q (its statement names the queue and
    its sequence: literals in a static path, parameters in the EXECUTE fallback)."""
    sql = "SELECT pgmq.send(%s, '{}', '{\"x-pgmq-dedup-id\": \"rt\"}'::jsonb)"
    first = scalar(conn, sql, (q,))
    assert scalar(conn, sql, (q,)) == first
    assert scalar(conn, "SELECT msg_id FROM pgmq.dedup_keys WHERE queue_name = lower(%s)", (q,)) == first
    assert scalar(conn, "SELECT pgmq.delete(%s, %s::bigint)", (q, first)) is True


def test_paths_follow_create_and_drop(conn):
    assert all(routed(conn, p) == [] for p in PATHS)
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.create_unlogged('Fast')")
    assert all(routed(conn, p) == ["Fast", "jobs"] for p in PATHS)
    roundtrip(conn, "jobs")
    roundtrip(conn, "Fast")
    conn.execute("SELECT pgmq.drop_queue('jobs')")
    assert all(routed(conn, p) == ["Fast"] for p in PATHS)
    # creating an existing queue again changes nothing (no rebuild: the paths' rows stay)
    xmin = scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'")
    conn.execute("SELECT pgmq.create('Fast')")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'") == xmin


def test_a_rolled_back_create_leaves_the_paths_as_they_were(conn):
    conn.execute("SELECT pgmq.create('kept')")
    with pytest.raises(psycopg.errors.RaiseException):
        with conn.transaction():
            conn.execute("SELECT pgmq.create('gone')")
            assert routed(conn) == ["gone", "kept"]
            conn.execute("DO $$BEGIN RAISE EXCEPTION 'undo'; END$$")
    assert routed(conn) == ["kept"]


def test_names_are_quoted_and_other_spellings_fall_back(conn):
    odd = 'we"ird Näme'
    conn.execute("SELECT pgmq.create(%s)", (odd,))
    assert routed(conn) == [odd]
    roundtrip(conn, odd)
    dedup_roundtrip(conn, odd)
    # another case spelling reaches the same table through EXECUTE, without a rebuild
    conn.execute("SELECT pgmq.create('mixed')")
    xmin = scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'")
    roundtrip(conn, "MIXED")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'") == xmin
    # an unknown queue: upstream's error, from the fallback
    with pytest.raises(psycopg.errors.UndefinedTable, match='relation "pgmq.q_nope" does not exist'):
        conn.execute("SELECT pgmq.send('nope', '{}')")


def test_the_first_hundred_queues_are_static_the_rest_work_through_execute(conn):
    conn.execute("SELECT pgmq.create(format('q%s', lpad(i::text, 3, '0'))) FROM generate_series(0, 101) i")
    names = routed(conn)
    assert names == [f"q{i:03d}" for i in range(100)]
    assert all(routed(conn, p) == names for p in PATHS)
    for q in ("q000", "q057", "q099", "q100", "q101"):
        roundtrip(conn, q)
        dedup_roundtrip(conn, q)
    # over the cap nothing rebuilds on each call
    xmin = scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'")
    roundtrip(conn, "q101")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'") == xmin
    # nor does a create or drop of a queue past the first hundred: the paths would be the same
    # (each rewrite of 20 paths of 100 branches cost a create or drop 0.1-0.3 s)
    conn.execute("SELECT pgmq.create('q102')")
    conn.execute("SELECT pgmq.drop_queue('q101')")
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'") == xmin
    roundtrip(conn, "q102")
    # dropping one lets the next in line in
    conn.execute("SELECT pgmq.drop_queue('q010')")
    assert routed(conn)[-1] == "q100" and "q010" not in routed(conn)
    assert scalar(conn, "SELECT xmin::text FROM pg_proc WHERE proname = '_static_send'") != xmin


def test_a_catalog_row_without_its_table_does_not_stop_the_paths(conn):
    # drop_queue cleans up such a row; until then, rebuilding (which looks up each queue's
    # sequence for send_dedup) must go on for the other queues
    conn.execute("SELECT pgmq.create('gone')")
    conn.execute("DROP TABLE pgmq.q_gone")
    conn.execute("SELECT pgmq.create('after')")
    assert routed(conn, "send_dedup") == ["after", "gone"]
    roundtrip(conn, "after")
    dedup_roundtrip(conn, "after")
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT pgmq.send('gone', '{}', '{\"x-pgmq-dedup-id\": \"k\"}'::jsonb)")
    assert scalar(conn, "SELECT pgmq.drop_queue('gone')") is False
    assert routed(conn, "send_dedup") == ["after"]


def test_a_path_that_misses_a_queue_heals_itself(conn):
    conn.execute("SELECT pgmq.create('early')")
    conn.execute("ALTER TABLE pgmq.meta DISABLE TRIGGER queues_added")
    conn.execute("SELECT pgmq.create('late')")
    conn.execute("ALTER TABLE pgmq.meta ENABLE TRIGGER queues_added")
    assert routed(conn) == ["early"]
    assert scalar(conn, "SELECT pgmq.send('late', '{}')") == 1
    assert all(routed(conn, p) == ["early", "late"] for p in PATHS)
    assert scalar(conn, "SELECT pgmq.delete('late', 1::bigint)") is True
    roundtrip(conn, "late")


def test_paths_of_a_retry_policy_queue_count_and_dead_letter(conn):
    conn.execute("SELECT pgmq.create('work')")
    conn.execute("SELECT pgmq.create('work_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('work', 1, dead_letter_queue => 'work_dlq')")
    conn.execute("SELECT pgmq.send('work', '{}')")
    for _ in range(2):  # two deliveries (1 + max_retries), each taken and rolled back
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():
                assert column(conn, "SELECT msg_id FROM pgmq.pop('work')") == [1]
                conn.execute("DO $$BEGIN RAISE EXCEPTION 'crash'; END$$")
        # the next take counts the lost delivery (and does not hand the message out)
        assert column(conn, "SELECT msg_id FROM pgmq.read('work', 30, 1)") == []
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work_dlq") == 1


def test_concurrent_creates_never_fail_and_every_queue_ends_static(connect):
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def make(i: int) -> None:
        try:
            with connect(autocommit=True) as c:
                barrier.wait()
                for j in range(5):
                    c.execute("SELECT pgmq.create(%s)", (f"c{i}_{j}",))
                    c.execute("SELECT pgmq.send(%s, '{}')", (f"c{i}_{j}",))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with connect(autocommit=True) as c:
        for i in range(4):  # a create that found the paths busy: its queue heals on use
            for j in range(5):
                assert scalar(c, "SELECT count(*) FROM pgmq.read(%s, 30, 5)", (f"c{i}_{j}",)) == 1
        assert routed(c) == sorted(f"c{i}_{j}" for i in range(4) for j in range(5))


@pytest.mark.parametrize("ack", [
    "SELECT * FROM pgmq.delete('jobs', %s::bigint[])",
    "SELECT pgmq.delete('jobs', (%s::bigint[])[1])",
    "SELECT * FROM pgmq.archive('jobs', %s::bigint[])",
    "SELECT * FROM pgmq.set_vt('jobs', %s::bigint[], 0)",
])
def test_acknowledgements_planned_on_a_nearly_empty_queue_never_scan_it(conn, ack):
    # A session keeps its plans: made while the queue table held one page (a new or drained
    # queue), 2.7.0's `msg_id = ANY(...)` statements scanned the whole table on every later
    # call of the session once a burst had filled it, until an autoanalyze replanned them.
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.send_batch('jobs', array_fill('{}'::jsonb, ARRAY[3]))")
    conn.execute("VACUUM ANALYZE pgmq.q_jobs")
    for _ in range(8):  # past the plan cache's five custom plans: the session's generic plan
        conn.execute(ack, ([0],))
    conn.execute("SELECT pgmq.send_batch('jobs', array_fill('{}'::jsonb, ARRAY[5000]))")
    scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'pgmq.q_jobs'::regclass"
    with conn.transaction():
        before = scalar(conn, scans) or 0
        for i in range(5):
            assert column(conn, ack, ([100 + i],)) not in ([], [None], [False])  # it found the row
        assert scalar(conn, scans) == before


def test_the_claim_path_keeps_order_skips_locked_rows_and_expires(conn, connect):
    """claim_next (dispatch's claim, _claim_message without filters): priority then msg_id, rows
    another transaction holds skipped (never taken twice), a message past its x-pgmq-ttl
    dead-lettered rather than delivered, a huge ttl header saturating instead of failing."""
    conn.execute("SELECT pgmq.create('work'), pgmq.enable_priorities('work')")
    assert routed(conn, "claim_next_ranked") == ["work"]
    low = scalar(conn, "SELECT pgmq.send('work', '{\"n\": 1}')")
    high = scalar(conn, "SELECT pgmq.send('work', '{\"n\": 2}', '{\"x-pgmq-priority\": -5}'::jsonb)")
    old = scalar(conn, "SELECT pgmq.send('work', '{\"n\": 3}', '{\"x-pgmq-ttl\": 1}'::jsonb)")
    huge = scalar(conn, "SELECT pgmq.send('work', '{\"n\": 4}')")
    conn.execute("UPDATE pgmq.q_work SET enqueued_at = now() - interval '1 hour' WHERE msg_id = %s", (old,))
    # a header send refuses, as a row written before the checks (or around them) may hold it
    conn.execute("UPDATE pgmq.q_work SET headers = '{\"x-pgmq-ttl\": 1e30}' WHERE msg_id = %s", (huge,))
    claim = "SELECT (pgmq._claim_message('work', NULL, NULL, NULL)).msg_id"
    holder = connect()
    holder.autocommit = False
    assert scalar(holder, claim) == high  # lower priority first; held until holder ends
    other = connect()
    other.autocommit = False
    assert scalar(other, claim) == low  # the held row is skipped, not waited for
    assert scalar(other, claim) == low  # (the same transaction's own lock: still the first)
    other.rollback()
    third = connect()
    third.autocommit = False
    taken = [scalar(third, "SELECT (pgmq._claim_message('work', NULL, NULL, NULL, NULL)).msg_id")]
    third.execute("SELECT pgmq.delete('work', %s::bigint)", (taken[0],))
    taken.append(scalar(third, claim))
    third.commit()
    # `old` was dead-lettered on the way (expired: into the archive, no dead-letter queue set),
    # `huge` is deliverable
    assert taken == [low, huge]
    assert column(conn, "SELECT msg_id FROM pgmq.a_work") == [old]
    holder.rollback()
    assert scalar(conn, claim) == high


def test_generic_plans_are_never_jit_compiled(conn):
    """A generic plan's LIMIT $1 counts as a share of the table: on a queue of tens of millions
    of rows its cost passes jit_above_cost, and every read or pop compiled its statement
    (docs/performance/big-queues.md). Every path planned generically turns JIT off, also as a
    rebuild (a queue made) rewrites it."""
    conn.execute("SELECT pgmq.create('jobs')")
    assert routed(conn, "read") == ["jobs"]
    configs = dict(conn.execute(
        "SELECT proname, proconfig FROM pg_proc WHERE pronamespace = 'pgmq'::regnamespace "
        "AND proname LIKE '\\_static\\_%' AND 'plan_cache_mode=force_generic_plan' = ANY (proconfig)").fetchall())
    assert {"_static_read", "_static_pop", "_static_read_unordered", "_static_peek"} <= set(configs)
    assert [name for name, config in configs.items() if "jit=off" not in config] == []
