"""A payload type approved once is held by OID (docs/concepts/security-model.md, "Payload types cannot carry
code"): a queue's type is a regtype in queue_settings and a regtype constant in its CHECK
constraint, and every conversion finds the type's input function by OID (never by a name parsed
again, never through a cast). So a hostile queue owner, `mallory`, cannot swap the type its
queue was approved with: renaming its enum and making a domain of the old name whose CHECK calls
its code, dropping the enum and doing the same, adding a cast from text to the enum, swapping
an enum under a trusted composite or an array of it. A type that stops being trusted after it
was approved (a trusted domain given to mallory) is refused where it is used.

Meanwhile a superuser works with the queue: upstream's send with the old name as marker, read,
set_vt, archive, delete, pop, send_payload, read_payload and pop_payload. Any of these may fail
with a clear error, but the planted code (it logs current_user into mallory.log and tries
`ALTER ROLE mallory SUPERUSER`, tests/hostile.py) must never run as the superuser."""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg
import pytest

from tests.helpers import column, raises_sql, restored_copy, scalar
from tests.hostile import evil_body, make_log

# Errors the superuser's calls may meet on a queue whose type was tampered with: a wrong type
# (42804), a gone type (42704), a payload or marker the constraint refuses (23514), a type no
# longer trusted (42501).
CLEAR_ERRORS = {"42804", "42704", "23514", "42501"}


@dataclass
class Mallory:
    conn: psycopg.Connection
    name: str
    su: psycopg.Connection

    def ran_as(self) -> list[str]:
        return column(self.su, "SELECT who FROM mallory.log ORDER BY id")

    def assert_nothing_ran_as_the_superuser(self) -> None:
        assert "postgres" not in self.ran_as(), self.ran_as()
        assert scalar(self.su, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (self.name,)) is False


@pytest.fixture
def mallory(conn, connect, make_role) -> Mallory:
    name = make_role("mallory", login=True)
    conn.execute(f"CREATE SCHEMA mallory AUTHORIZATION {name}")
    m = connect(user=name)
    make_log(m, "mallory")
    # evil(text): any domain CHECK; STRICT, so a typed NULL of the domain (in a caller's own
    # SQL) does not call it: only a conversion of a real value does
    m.execute(f"CREATE FUNCTION mallory.evil(text) RETURNS boolean LANGUAGE plpgsql STRICT "
              f"AS $${evil_body(name, 'mallory', 'true')}$$")
    m.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mallory TO PUBLIC")
    m.execute("CREATE TYPE mallory.mood AS ENUM ('happy', 'sad')")
    return Mallory(conn=m, name=name, su=conn)


def attempt(su: psycopg.Connection, sql: str, params: object = None) -> str | None:
    """Run sql; None when it succeeds, its SQLSTATE when it fails with one of CLEAR_ERRORS."""
    try:
        su.execute(sql, params)
    except psycopg.Error as exc:
        assert exc.sqlstate in CLEAR_ERRORS, f"{sql}: {exc.sqlstate} {exc}"
        return exc.sqlstate
    return None


def superuser_works_on(su: psycopg.Connection, queue: str, old_name: str, value: str, held: str) -> dict[str, str | None]:
    """What a superuser does with a typed queue: every write path and every consuming path.
    `old_name`: the type's name when the queue was typed (what a hand-made message carries);
    `value`: a payload's text; `held`: an SQL type name of the queue's type now."""
    forged = json.dumps({"x-pgmq-payload": old_name})
    out = {
        "send": attempt(su, "SELECT pgmq.send(%s, %s::jsonb, %s::jsonb)", (queue, json.dumps(value), forged)),
        "send_batch": attempt(su, "SELECT pgmq.send_batch(%s::text, ARRAY[%s::jsonb], ARRAY[%s::jsonb])",
                              (queue, json.dumps(value), forged)),
        "read": attempt(su, "SELECT * FROM pgmq.read(%s, 0, 10)", (queue,)),
        "set_vt": attempt(su, "SELECT * FROM pgmq.set_vt(%s, 1, 0)", (queue,)),
        "send_payload": attempt(su, f"SELECT pgmq.send_payload(%s, %s::{held})", (queue, value)),
        "read_payload": attempt(su, f"SELECT * FROM pgmq.read_payload(%s, 0, 10, NULL::{held})", (queue,)),
        "archive": attempt(su, "SELECT pgmq.archive(%s, 1::bigint)", (queue,)),
        "pop_payload": attempt(su, f"SELECT * FROM pgmq.pop_payload(%s, 1, NULL::{held})", (queue,)),
        "pop": attempt(su, "SELECT * FROM pgmq.pop(%s)", (queue,)),
        "delete": attempt(su, "SELECT pgmq.delete(%s, 2::bigint)", (queue,)),
        "metrics": attempt(su, "SELECT * FROM pgmq.metrics(%s)", (queue,)),
        "purge": attempt(su, "SELECT pgmq.purge_queue(%s)", (queue,)),
    }
    return out


def test_a_renamed_enum_and_a_domain_of_its_old_name_run_nothing(mallory):
    """Issue 29, vector 3: the constraint and the conversions hold the enum by OID, so the domain
    that took its name is never used; the queue goes on holding the enum."""
    m, su = mallory.conn, mallory.su
    m.execute("SELECT pgmq.create('mq', 'mallory.mood'::regtype)")
    m.execute("SELECT pgmq.send_payload('mq', 'happy'::mallory.mood)")
    m.execute("ALTER TYPE mallory.mood RENAME TO mood_was")
    m.execute("CREATE DOMAIN mallory.mood AS text CHECK (mallory.evil(VALUE))")

    results = superuser_works_on(su, "mq", "mallory.mood", "sad", "mallory.mood_was")
    mallory.assert_nothing_ran_as_the_superuser()
    # the queue still holds the enum, under its new name; what does not depend on the marker works
    assert scalar(su, "SELECT pgmq.payload_type('mq')::text") == "mallory.mood_was"
    assert {k for k, v in results.items() if v is None} >= {"send", "send_batch", "read", "set_vt", "archive",
                                                             "pop", "delete", "metrics", "purge"}
    # a message that does not read back as the enum is refused, the domain's values included
    with raises_sql("23514"):
        su.execute("SELECT pgmq.send('mq', '\"grumpy\"'::jsonb, '{\"x-pgmq-payload\": \"mallory.mood\"}'::jsonb)")
    # the domain, given where the enum is expected, is another type (its typed NULL runs
    # nothing: mallory.evil is STRICT)
    with raises_sql("42804"):
        su.execute("SELECT * FROM pgmq.read_payload('mq', 0, 1, NULL::mallory.mood)")
    with raises_sql("42804"):
        su.execute("SELECT pgmq.send_payload('mq', 'x'::text)")
    mallory.assert_nothing_ran_as_the_superuser()
    # the owner's own work goes on as before; renamed back, the typed functions take it again
    m.execute("SELECT * FROM pgmq.read('mq', 0, 10)")
    m.execute("DROP DOMAIN mallory.mood")
    m.execute("ALTER TYPE mallory.mood_was RENAME TO mood")
    su.execute("SELECT pgmq.send_payload('mq', 'sad'::mallory.mood)")
    assert column(su, "SELECT payload::text FROM pgmq.read_payload('mq', 0, 10, NULL::mallory.mood)") == ["sad"]
    mallory.assert_nothing_ran_as_the_superuser()


def test_a_dropped_enum_and_a_domain_of_its_name_run_nothing(mallory):
    """DROP TYPE ... CASCADE takes the queue's constraint with it (it depends on the type): the
    queue then checks nothing and names a type that is gone (42704), and the new domain of the
    same name is another type."""
    m, su = mallory.conn, mallory.su
    m.execute("SELECT pgmq.create('mq', 'mallory.mood'::regtype)")
    m.execute("SELECT pgmq.send_payload('mq', 'happy'::mallory.mood)")
    m.execute("DROP TYPE mallory.mood CASCADE")
    m.execute("CREATE DOMAIN mallory.mood AS text CHECK (mallory.evil(VALUE))")
    assert column(su, "SELECT conname FROM pg_constraint WHERE conrelid = 'pgmq.q_mq'::regclass "
                      "AND contype = 'c'") == []

    superuser_works_on(su, "mq", "mallory.mood", "sad", "mallory.mood")
    mallory.assert_nothing_ran_as_the_superuser()
    with raises_sql("42704", None):
        su.execute("SELECT pgmq.payload_type('mq')")
    with raises_sql("42704"):
        su.execute("SELECT pgmq.send_payload('mq', 'x'::text)")
    with raises_sql("42704"):
        su.execute("SELECT * FROM pgmq.read_payload('mq', 0, 1, NULL::text)")
    # the owner starts again: an empty queue takes a type again
    m.execute("SELECT pgmq.purge_queue('mq')")
    m.execute("CREATE TYPE mallory.fresh AS ENUM ('a')")
    m.execute("SELECT pgmq.set_payload_type('mq', 'mallory.fresh')")
    su.execute("SELECT pgmq.send_payload('mq', 'a'::mallory.fresh)")
    assert column(su, "SELECT payload::text FROM pgmq.pop_payload('mq', 1, NULL::mallory.fresh)") == ["a"]
    mallory.assert_nothing_ran_as_the_superuser()


def test_a_cast_from_text_to_a_payload_enum_never_runs(mallory):
    """The owner of a type may CREATE CAST (text AS it). Payloads are read by the type's input
    function, never through a cast (the constraint's check and read_payload's decoding both)."""
    m, su = mallory.conn, mallory.su
    m.execute("SELECT pgmq.create('mq', 'mallory.mood'::regtype)")
    # (its result is converted from a cstring: no cast, so it does not call itself)
    m.execute(f"CREATE FUNCTION mallory.to_mood(text) RETURNS mallory.mood LANGUAGE plpgsql "
              f"AS $${evil_body(mallory.name, 'mallory', '$1::cstring')}$$")
    m.execute("GRANT EXECUTE ON FUNCTION mallory.to_mood(text) TO PUBLIC")
    m.execute("CREATE CAST (text AS mallory.mood) WITH FUNCTION mallory.to_mood(text) AS ASSIGNMENT")
    # the cast works for mallory (and would run as whoever converted text to the enum)
    m.execute("SELECT 'sad'::text::mallory.mood")
    assert mallory.ran_as() == [mallory.name]

    su.execute("SELECT pgmq.send_payload('mq', 'happy'::mallory.mood)")
    results = superuser_works_on(su, "mq", "mallory.mood", "sad", "mallory.mood")
    assert results["read"] is None and results["read_payload"] is None and results["send_payload"] is None
    mallory.assert_nothing_ran_as_the_superuser()


def test_an_enum_swapped_under_a_trusted_composite_or_array_runs_nothing(mallory, conn):
    """Arrays and composite columns hold their element and column types by OID too."""
    m = mallory.conn
    conn.execute("CREATE TYPE public.pair_of_moods AS (n integer, mood mallory.mood)")
    m.execute("SELECT pgmq.create('comp', 'public.pair_of_moods'::regtype)")
    m.execute("SELECT pgmq.create('arr', 'mallory.mood[]'::regtype)")
    m.execute("SELECT pgmq.send_payload('comp', (1, 'happy')::public.pair_of_moods)")
    m.execute("SELECT pgmq.send_payload('arr', ARRAY['happy', 'sad']::mallory.mood[])")
    m.execute("ALTER TYPE mallory.mood RENAME TO mood_was")
    m.execute("CREATE DOMAIN mallory.mood AS text CHECK (mallory.evil(VALUE))")

    superuser_works_on(conn, "comp", "public.pair_of_moods", "(2,sad)", "public.pair_of_moods")
    superuser_works_on(conn, "arr", "mallory.mood[]", "{sad}", "mallory.mood_was[]")
    mallory.assert_nothing_ran_as_the_superuser()
    conn.execute("SELECT pgmq.send_payload('comp', (3, 'sad')::public.pair_of_moods)")
    assert column(conn, "SELECT (payload).mood::text FROM pgmq.read_payload('comp', 0, 5, NULL::public.pair_of_moods)") \
        == ["sad"]
    mallory.assert_nothing_ran_as_the_superuser()


def test_a_partitioned_queue_holds_its_type_by_oid_in_every_partition(mallory, conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('pq', '10', '100', 2)")
    conn.execute("SELECT pgmq.set_payload_type('pq', 'mallory.mood')")
    conn.execute("SELECT pgmq.send_payload('pq', 'happy'::mallory.mood)")
    mallory.conn.execute("ALTER TYPE mallory.mood RENAME TO mood_was")
    mallory.conn.execute("CREATE DOMAIN mallory.mood AS text CHECK (mallory.evil(VALUE))")
    for _ in range(25):  # across partitions
        conn.execute("SELECT pgmq.send('pq', '\"sad\"'::jsonb, '{\"x-pgmq-payload\": \"mallory.mood\"}'::jsonb)")
    conn.execute("SELECT pgmq.run_partition_maintenance('pq')")
    conn.execute("SELECT * FROM pgmq.read('pq', 0, 30)")
    conn.execute("SELECT pgmq.archive('pq', ARRAY[1, 2, 3]::bigint[])")
    # every partition's constraint names the enum (by OID: printed by its name now)
    defs = column(conn, """SELECT DISTINCT pg_get_constraintdef(k.oid) FROM pg_inherits i
                           JOIN pg_constraint k ON k.conrelid = i.inhrelid AND k.conname = 'pgmq_payload_type'
                           WHERE i.inhparent = 'pgmq.q_pq'::regclass""")
    assert len(defs) == 1 and "'mallory.mood_was'::regtype" in defs[0], defs
    mallory.assert_nothing_ran_as_the_superuser()


def test_a_type_no_longer_trusted_is_refused_where_it_is_used(mallory, conn):
    """A trusted domain is approved, then given to mallory (a superuser's mistake), who adds a
    CHECK calling its code: writes and typed reads refuse the type (42501) instead of running
    the new check as the superuser."""
    conn.execute("CREATE DOMAIN public.label AS text CHECK (length(VALUE) < 20)")
    mallory.conn.execute("SELECT pgmq.create('lq', 'public.label'::regtype)")
    conn.execute("SELECT pgmq.send_payload('lq', 'first'::public.label)")
    conn.execute(f"ALTER DOMAIN public.label OWNER TO {mallory.name}")
    mallory.conn.execute("ALTER DOMAIN public.label ADD CONSTRAINT evil CHECK (mallory.evil(VALUE))")

    with raises_sql("42501"):
        conn.execute("SELECT * FROM pgmq.read('lq', 0, 1)")
    with raises_sql("42501"):
        conn.execute("SELECT pgmq.send('lq', '\"second\"'::jsonb, '{\"x-pgmq-payload\": \"public.label\"}'::jsonb)")
    with raises_sql("42501"):
        conn.execute("SELECT * FROM pgmq.read_payload('lq', 0, 1, NULL::public.label)")
    # what does not convert a payload still works: the queue can be drained
    assert len(conn.execute("SELECT * FROM pgmq.pop('lq')").fetchall()) == 1
    mallory.assert_nothing_ran_as_the_superuser()


def test_payload_types_survive_dump_and_restore_by_name(conn, dsn, tmp_path):
    """pg_dump writes the regtype column and the constraint's constant as names; the restore
    resolves them before any row is written, and the queues work as before."""
    conn.execute("CREATE TYPE public.colour AS ENUM ('red', 'green')")
    conn.execute("SELECT pgmq.create('ints', 'integer'::regtype)")
    conn.execute("SELECT pgmq.create('colours', 'public.colour'::regtype)")
    conn.execute("SELECT pgmq.send_payload('ints', 42)")
    conn.execute("SELECT pgmq.send_payload('colours', 'green'::public.colour)")
    with restored_copy(conn, dsn, tmp_path) as r:
        assert r.execute("SELECT pgmq.payload_type('ints')::text, pgmq.payload_type('colours')::text").fetchone() == (
            "integer", "colour")
        assert column(r, "SELECT payload FROM pgmq.pop_payload('ints', 5, NULL::integer)") == [42]
        assert column(r, "SELECT payload::text FROM pgmq.read_payload('colours', 0, 5, NULL::public.colour)") == ["green"]
        r.execute("SELECT pgmq.send_payload('colours', 'red'::public.colour)")
        with raises_sql("23514"):
            r.execute("SELECT pgmq.send('colours', '\"blue\"'::jsonb, '{\"x-pgmq-payload\": \"public.colour\"}'::jsonb)")
        assert scalar(r, """SELECT count(*) FROM pg_depend d JOIN pg_constraint k ON k.oid = d.objid
                            WHERE d.classid = 'pg_constraint'::regclass AND k.conname = 'pgmq_payload_type'
                              AND d.refclassid = 'pg_type'::regclass
                              AND d.refobjid = 'public.colour'::regtype""") == 1
