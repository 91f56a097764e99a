"""pgpro_queue's API and transactional consumption with retry on rollback."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import column, notices, raises_sql, scalar, send_n


@pytest.fixture
def pq(conn):
    """A pgpro-style queue with 2 retries, no delay, dead letters to 'dead'."""
    conn.execute("CALL pgmq.create_queue('dead')")
    conn.execute("CALL pgmq.create_queue('work', 'N', 'dead', 2, 0)")
    return conn


def test_create_queue_sets_a_retry_policy(pq):
    rows = pq.execute("SELECT queue_name, retry_policy, max_retries, retry_delay, dead_letter_queue "
                      "FROM pgmq.list_queue_settings()").fetchall()
    assert rows == [("dead", True, 10, 30, None), ("work", True, 2, 0, "dead")]
    assert scalar(pq, "SELECT pgmq.get_queue_table('work')::regclass::text") == "pgmq.q_work"


@pytest.mark.parametrize("sql,state", [
    ("CALL pgmq.create_queue('bad-name')", "42602"),
    ("CALL pgmq.create_queue('x', 'Z')", "22023"),
    ("CALL pgmq.create_queue('x', 'N', 'no_such_dlq')", "42P01"),
    ("SELECT pgmq.get_queue_table('ghost')", "42P01"),
    ("CALL pgmq.drop_queue('ghost'::name)", "42P01"),
])
def test_pgpro_errors_change_nothing(conn, sql, state):
    with raises_sql(state):
        conn.execute(sql)
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0


def test_alter_queue_changes_only_what_is_given(pq):
    pq.execute("CALL pgmq.alter_queue('work', new_retries => 5)")
    assert pq.execute("SELECT max_retries, retry_delay, dead_letter_queue FROM pgmq.list_queue_settings() "
                      "WHERE queue_name = 'work'").fetchone() == (5, 0, "dead")
    pq.execute("CALL pgmq.alter_queue('work', new_retrydelay => 7, new_dlq => NULL)")
    assert pq.execute("SELECT max_retries, retry_delay, dead_letter_queue FROM pgmq.list_queue_settings() "
                      "WHERE queue_name = 'work'").fetchone() == (5, 7, "dead")


def test_drop_queue_procedure(pq):
    # pgmq.drop_queue(text) is upstream's function; an untyped literal resolves to it, so the
    # pgpro_queue procedure is reached with a name-typed argument.
    pq.execute("CALL pgmq.drop_queue('work'::name)")
    assert column(pq, "SELECT queue_name FROM pgmq.meta") == ["dead"]


def test_insert_and_read_message_in_priority_order(pq):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}', 5)")
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 2}')")
    pq.execute("CALL pgmq.insert_message(q_name => 'work', q_msg_body => '{\"n\": 3}', q_msg_priority => 1, "
               "q_msg_properties => '{\"kind\": \"x\"}')")
    got = [scalar(pq, "SELECT pgmq.read_message('work')") for _ in range(3)]
    assert got == [{"n": 2}, {"n": 3}, {"n": 1}]
    assert pq.execute("SELECT pgmq.read_message('work')").fetchone() == (None,)
    assert scalar(pq, "SELECT count(*) FROM pgmq.q_work") == 0


def test_enable_time_delays_delivery(pq):
    pq.execute("CALL pgmq.insert_message('work', '{}', q_msg_enable_time => now() + interval '1 hour')")
    assert scalar(pq, "SELECT pgmq.read_message('work')") is None


def test_filters(pq):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}', q_msg_properties => '{\"kind\": \"a\"}')")
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 2}', 3, '{\"kind\": \"b\"}')")
    assert scalar(pq, "SELECT pgmq.read_message('work', q_msg_pfilter => '{\"kind\": \"b\"}')") == {"n": 2}
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 3}', 7)")
    assert scalar(pq, "SELECT pgmq.read_message('work', '{\"priority\": 7}')") == {"n": 3}
    assert scalar(pq, "SELECT pgmq.read_message('work', '{\"priority\": 9}')") is None


def test_read_by_id_and_any_forms(pq):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}')")
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 2}')")
    assert scalar(pq, "SELECT pgmq.read_message_by_id('work', 2)") == {"n": 2}
    assert scalar(pq, "SELECT pgmq.read_message_by_id('work', 2)") is None
    assert pq.execute("SELECT * FROM pgmq.read_message_any('work')").fetchone() == ({"n": 1}, None)
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 3}')")
    row = pq.execute("SELECT body, body_xml FROM pgmq.read_message_by_id_any('work', 3)").fetchone()
    assert row == ({"n": 3}, None)


def test_initialize_and_deinitialize(pq):
    seen = notices(pq)
    pq.execute("SELECT pgmq.queue_initialize()")
    pq.execute("SELECT pgmq.queue_initialize()")
    assert len(seen) == 2
    pq.execute("SELECT pgmq.queue_deinitialize()")
    pq.execute("SELECT pgmq.queue_deinitialize()")
    assert scalar(pq, "SELECT count(*) FROM pgmq.meta") == 0


def test_deinitialize_needs_superuser(pq):
    pq.execute("CREATE ROLE plain")
    pq.execute("GRANT USAGE ON SCHEMA pgmq TO plain")
    pq.execute("SET ROLE plain")
    with raises_sql("42501"):
        pq.execute("SELECT pgmq.queue_deinitialize()")
    pq.execute("RESET ROLE")


# ----------------------------------------------------------------------------- retry on rollback

def state(conn, msg_id=1):
    return conn.execute("SELECT read_ct, vt > clock_timestamp() FROM pgmq.q_work WHERE msg_id = %s",
                        (msg_id,)).fetchone()


def take_and(connect, how: str):
    c = connect(autocommit=False)
    if how == "savepoint":
        c.execute("SAVEPOINT s")
    got = scalar(c, "SELECT pgmq.read_message('work')")
    if how == "rollback":
        c.rollback()
    elif how == "savepoint":
        c.execute("ROLLBACK TO SAVEPOINT s")
        c.commit()
    else:
        c.commit()
    return got


def test_commit_removes_rollback_returns_and_counts(pq, connect):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}')")
    assert take_and(connect, "rollback") == {"n": 1}
    assert state(pq) == (0, False)  # nothing recorded yet: the next reader does it
    # the next reader records the attempt, hands out nothing in that transaction
    assert take_and(connect, "commit") is None
    assert state(pq) == (1, False)
    assert take_and(connect, "commit") == {"n": 1}
    assert scalar(pq, "SELECT count(*) FROM pgmq.q_work") == 0


def test_savepoint_rollback_counts(pq, connect):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}')")
    assert take_and(connect, "savepoint") == {"n": 1}
    take_and(connect, "commit")
    assert state(pq) == (1, False)


def test_retry_delay_applies_after_rollback(conn, connect):
    conn.execute("CALL pgmq.create_queue('work', queue_retries => 3, queue_retry_delay => 60)")
    conn.execute("CALL pgmq.insert_message('work', '{}')")
    take_and(connect, "rollback")
    assert take_and(connect, "commit") is None
    assert state(conn) == (1, True)  # invisible for the retry delay


def test_per_message_retry_overrides(conn, connect):
    conn.execute("CALL pgmq.create_queue('work', queue_retries => 5, queue_retry_delay => 0)")
    conn.execute("CALL pgmq.insert_message('work', '{}', q_msg_retries => 0, q_msg_retrydelay => 0)")
    take_and(connect, "rollback")
    assert take_and(connect, "commit") is None
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0
    assert scalar(conn, "SELECT headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_work") == "rollback"


def test_exhausted_rollbacks_go_to_the_dead_letter_queue(pq, connect):
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 1}', q_msg_properties => '{\"p\": 1}')")
    for _ in range(3):  # 1 + 2 retries, each rolled back
        assert take_and(connect, "rollback") == {"n": 1}
        take_and(connect, "commit")
    assert scalar(pq, "SELECT count(*) FROM pgmq.q_work") == 0
    message, headers = pq.execute("SELECT message, headers FROM pgmq.q_dead").fetchone()
    assert message == {"n": 1} and headers["p"] == 1
    assert headers["x-pgmq-dead-letter"]["reason"] == "rollback"
    assert headers["x-pgmq-dead-letter"]["attempts"] == 3


def test_count_survives_the_recording_transaction_rolling_back(pq, connect):
    pq.execute("CALL pgmq.insert_message('work', '{}')")
    take_and(connect, "rollback")
    assert take_and(connect, "rollback") is None  # the recorder itself rolls back
    take_and(connect, "commit")
    assert state(pq) == (1, False)


def test_terminated_backend_counts_as_rollback(pq, connect):
    pq.execute("CALL pgmq.insert_message('work', '{}')")
    victim = connect(autocommit=False)
    assert scalar(victim, "SELECT pgmq.read_message('work')") == {}
    pid = victim.info.backend_pid
    pq.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT 1")
    take_and(connect, "commit")
    assert state(pq) == (1, False)


def test_no_policy_queue_behaves_like_upstream(conn, connect):
    conn.execute("SELECT pgmq.create('work')")
    conn.execute("SELECT pgmq.send('work', '{\"n\": 1}')")
    assert take_and(connect, "rollback") == {"n": 1}
    assert take_and(connect, "commit") == {"n": 1}  # back at once, nothing counted
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_work") == 0


def test_concurrent_transactional_readers_never_share(pq, connect):
    send_n(pq, "work", 300)
    readers = [connect(autocommit=False) for _ in range(4)]
    seen: list[int] = []
    while True:
        batch = [scalar(r, "SELECT pgmq.read_message('work')") for r in readers]
        for r in readers:
            r.commit()
        got = [m["n"] for m in batch if m is not None]
        if not got:
            break
        seen.extend(got)
    assert sorted(seen) == list(range(1, 301))
