"""Who may read and write a stream besides its owner (grant_stream_access, revoke_stream_access):
the parent's privileges are the record, every segment follows them, rotation keeps them; and the
segment names wrap at SEGMENT_NAMES without losing the stream."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from tests.helpers import column, raises_sql, scalar
from tests.integration.test_streams import drain, send


@contextlib.contextmanager
def acting_as(conn, role):
    conn.execute(f"SET ROLE {role}")
    try:
        yield
    finally:
        conn.execute("RESET ROLE")


def as_role(conn, role, sql, params=None):
    with acting_as(conn, role):
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else None


def rotate(conn, stream="ev") -> int:
    """Wait out the 1-second rotation period and tick: the stream's new current segment."""
    before = scalar(conn, "SELECT current_segment FROM pgmq.streams WHERE stream_name = %s", (stream,))
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick(%s)", (stream,))
    after = scalar(conn, "SELECT current_segment FROM pgmq.streams WHERE stream_name = %s", (stream,))
    assert after == before + 1
    return after


@pytest.fixture
def owned(conn, make_role):
    """(owner, writer, reader): owner made stream 'ev' (1-second rotation, kept an hour)."""
    owner, writer, reader = make_role("owner"), make_role("writer"), make_role("reader")
    as_role(conn, owner, "SELECT pgmq.create_stream('ev', retention => '1 hour', rotation_period => '1 second')")
    return owner, writer, reader


def test_granted_writers_and_readers_keep_their_access_across_rotations(conn, owned):
    owner, writer, reader = owned
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 0}')")
    with raises_sql("42501"):
        as_role(conn, reader, "SELECT pgmq.subscribe('ev', 'r')")
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s, 'write')", (writer,))
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s, 'read')", (reader,))
    as_role(conn, reader, "SELECT pgmq.subscribe('ev', 'r', 'earliest')")
    for n in range(1, 4):  # one event per segment: the grants reach segments made later
        as_role(conn, writer, "SELECT pgmq.stream_send('ev', jsonb_build_object('n', %s::int))", (n,))
        rotate(conn)
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_segments WHERE stream_name = 'ev'") == 4
    as_role(conn, writer, "SELECT pgmq.stream_send_batch('ev', ARRAY['{\"n\": 4}'::jsonb])")
    with acting_as(conn, reader):
        assert drain(conn, "r") == [1, 2, 3, 4]
    # each right alone: the writer reads nothing, the reader writes nothing
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT pgmq.subscribe('ev', 'w')")
    with raises_sql("42501"):
        as_role(conn, reader, "SELECT pgmq.stream_send('ev', '{\"n\": 5}')")


def test_revoking_takes_the_right_from_every_segment(conn, owned):
    owner, writer, reader = owned
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s)", (writer,))  # 'all'
    send(conn, 1)
    rotate(conn)
    as_role(conn, writer, "SELECT pgmq.subscribe('ev', 'w', 'earliest')")
    as_role(conn, owner, "SELECT pgmq.revoke_stream_access('ev', %s, 'write')", (writer,))
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 2}')")
    for segment in column(conn, "SELECT segment FROM pgmq.stream_segments WHERE stream_name = 'ev'"):
        assert not scalar(conn, "SELECT has_table_privilege(%s, format('pgmq.s_ev$%%s', %s::int), 'INSERT')",
                          (writer, segment))
    with acting_as(conn, writer):
        assert drain(conn, "w") == [1]  # still a reader
    as_role(conn, owner, "SELECT pgmq.revoke_stream_access('ev', %s, 'all')", (writer,))
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT * FROM pgmq.stream_read('ev', 'w')")
    rotate(conn)  # a new segment copies the parent: nothing for the writer
    assert not scalar(conn, "SELECT has_table_privilege(%s, 'pgmq.s_ev', 'SELECT') "
                            "OR has_table_privilege(%s, format('pgmq.s_ev$%%s', "
                            "(SELECT current_segment FROM pgmq.streams)), 'INSERT')", (writer, writer))


def test_revoking_read_keeps_write(conn, owned):
    """PostgreSQL's REVOKE SELECT on a table takes the column SELECT (ev_id) a writer needs for
    RETURNING: the writer keeps writing."""
    owner, writer, _ = owned
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s, 'all')", (writer,))
    as_role(conn, owner, "SELECT pgmq.revoke_stream_access('ev', %s, 'read')", (writer,))
    as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 1}')")
    as_role(conn, writer, "SELECT pgmq.stream_send_batch('ev', ARRAY['{\"n\": 2}'::jsonb])")
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT pgmq.subscribe('ev', 'w')")
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT message FROM pgmq.s_ev$0")


def test_public_access(conn, owned):
    owner, writer, _ = owned
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', 'public', 'write')")
    rotate(conn)
    as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 1}')")
    as_role(conn, owner, "SELECT pgmq.revoke_stream_access('ev', 'public', 'write')")
    with raises_sql("42501"):
        as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 2}')")


def acl(conn) -> list:
    return conn.execute("SELECT c.relname, c.relacl::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'pgmq' AND c.relname LIKE 's\\_ev%%' ORDER BY 1").fetchall()


@pytest.mark.parametrize("sql, state", [
    ("SELECT pgmq.grant_stream_access('nope', %(w)s)", "42P01"),
    ("SELECT pgmq.grant_stream_access('ev', 'no_such_role')", "42704"),
    ("SELECT pgmq.grant_stream_access('ev', NULL)", "42704"),
    ("SELECT pgmq.grant_stream_access('ev', %(w)s, 'delete')", "22023"),
    ("SELECT pgmq.grant_stream_access('ev', %(w)s, NULL)", "22023"),
    ("SELECT pgmq.revoke_stream_access('ev', %(o)s)", "0LP01"),
    ("SELECT pgmq.revoke_stream_access('ev', current_user)", "0LP01"),  # the tables' owner
    ("SELECT pgmq.grant_stream_access('bad name;', %(w)s)", "42602"),
])
def test_bad_calls_say_why_and_change_nothing(conn, owned, sql, state):
    owner, writer, _ = owned
    before = acl(conn)
    with raises_sql(state):
        as_role(conn, owner, sql.replace("current_user", f"'{conn.info.user}'"), {"w": writer, "o": owner})
    assert acl(conn) == before


def test_only_the_owner_grants(conn, owned):
    owner, writer, reader = owned
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s, 'all')", (writer,))
    before = acl(conn)
    with raises_sql("42501"):  # a role with access is not an owner
        as_role(conn, writer, "SELECT pgmq.grant_stream_access('ev', %s)", (reader,))
    with raises_sql("42501"):
        as_role(conn, reader, "SELECT pgmq._set_stream_access('ev', %s, 'all', true)", (reader,))  # no proof
    assert acl(conn) == before
    as_role(conn, owner, "SELECT pgmq.grant_stream_access('ev', %s)", (owner,))  # the owner: nothing to do
    assert acl(conn) == before


def test_a_grant_and_a_rotation_at_once_leave_every_segment_granted(conn, owned, connect):
    """The grant locks the stream's row: a rotation due meanwhile waits for the next tick, then
    copies the new ACL."""
    owner, writer, _ = owned
    granting = connect(autocommit=False)
    granting.execute(f"SET ROLE {owner}")
    granting.execute("SELECT pgmq.grant_stream_access('ev', %s, 'write')", (writer,))
    time.sleep(1.1)
    ticker = connect()
    done = threading.Event()

    def tick() -> None:
        ticker.execute("SELECT pgmq.stream_tick('ev')")
        done.set()

    t = threading.Thread(target=tick)
    t.start()
    t.join(timeout=10)
    assert done.is_set()  # the tick did not wait for the grant's transaction
    assert scalar(conn, "SELECT current_segment FROM pgmq.streams") == 0  # and did not rotate
    granting.commit()
    rotate(conn)
    as_role(conn, writer, "SELECT pgmq.stream_send('ev', '{\"n\": 1}')")
    for segment in column(conn, "SELECT segment FROM pgmq.stream_segments WHERE stream_name = 'ev'"):
        assert scalar(conn, "SELECT has_table_privilege(%s, format('pgmq.s_ev$%%s', %s::int), 'INSERT')",
                      (writer, segment))


def test_segment_names_wrap_around(conn):
    """Segment n is table s_<name>$<n % 100000>: the segment after 99999 is s_ev$0 again, and the
    stream goes on (sends, reads, retention)."""
    conn.execute("SELECT pgmq.create_stream('ev', retention => '0', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.subscribe('ev', 'a', 'earliest')")
    # as if it had rotated 99,999 times: segment 99999 in table s_ev$99999
    conn.execute("ALTER TABLE pgmq.s_ev$0 RENAME TO s_ev$99999")
    conn.execute("UPDATE pgmq.stream_segments SET segment = 99999 WHERE stream_name = 'ev'")
    conn.execute("UPDATE pgmq.streams SET current_segment = 99999 WHERE stream_name = 'ev'")
    send(conn, 1)
    assert scalar(conn, "SELECT count(*) FROM pgmq.s_ev$99999") == 1
    assert rotate(conn) == 100000
    send(conn, 2)
    assert scalar(conn, "SELECT count(*) FROM pgmq.s_ev$0") == 1
    assert drain(conn, "a") == [1, 2]
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # read and past retention: the old one goes
    assert scalar(conn, "SELECT to_regclass('pgmq.s_ev$99999')") is None
    assert column(conn, "SELECT segment FROM pgmq.stream_segments ORDER BY 1")[0] >= 100000


def test_no_other_streams_name_is_one_of_its_segments(conn):
    """Stream ev's segments and sequence are named with '$', which no stream name holds: streams
    named like them (ev_1, ev_seq) do not stop ev from rotating (with '_', creating ev_1 made
    ev's next rotation fail for good: 'relation "s_ev_1" already exists')."""
    conn.execute("SELECT pgmq.create_stream('ev', retention => '1 hour', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.create_stream('ev_1'), pgmq.create_stream('ev_2'), pgmq.create_stream('ev_seq')")
    conn.execute("SELECT pgmq.subscribe('ev', 'a', 'earliest'), pgmq.subscribe('ev_1', 'a', 'earliest')")
    send(conn, 1)
    assert rotate(conn) == 1 and rotate(conn) == 2
    send(conn, 2)
    send(conn, 3, stream="ev_1")
    conn.execute("SELECT pgmq.stream_tick()")  # every stream
    assert drain(conn, "a") == [1, 2]
    assert drain(conn, "a", stream="ev_1") == [3]
    assert column(conn, "SELECT relname FROM pg_class WHERE relname LIKE 's\\_ev%%' AND relkind IN ('r', 'S') "
                        "ORDER BY 1") == ["s_ev", "s_ev$0", "s_ev$1", "s_ev$2", "s_ev$seq", "s_ev$tick", "s_ev_1",
                                          "s_ev_1$0", "s_ev_1$seq", "s_ev_1$tick", "s_ev_2", "s_ev_2$0", "s_ev_2$seq",
                                          "s_ev_2$tick", "s_ev_seq", "s_ev_seq$0", "s_ev_seq$seq", "s_ev_seq$tick"]
