"""No privilege escalation through queues (docs/concepts/security-model.md). Any role may create queues, so a
queue's owner may be hostile: here `mallory`, an ordinary LOGIN role with a schema of its own,
tries every way of planting code that a superuser working with its queue would run (triggers of
each kind, rules, defaults, CHECK constraints, index expressions, callbacks, payload types,
ownership and renames, forged proofs, a confused deputy), while the superuser does ordinary work
on the queue. Every attempt must be refused, or the planted code must run as mallory only.

The planted functions log current_user into mallory.log and try `ALTER ROLE mallory SUPERUSER`;
after everything, mallory must not be a superuser and no entry may name the superuser."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

from pgmq_build.worker import dispatch_as
from tests.helpers import column, notices, raises_sql, scalar
from tests.hostile import evil_body, make_log


@dataclass
class Mallory:
    conn: psycopg.Connection
    name: str
    su: psycopg.Connection

    def is_superuser(self) -> bool:
        return bool(scalar(self.su, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (self.name,)))

    def ran_as(self) -> list[str]:
        return column(self.su, "SELECT who FROM mallory.log ORDER BY id")


def _evil(body_kind: str, name: str) -> str:
    value = {"trigger": "NULL", "bool": "true", "ts": "now()", "int": "1"}[body_kind]
    return evil_body(name, "mallory", value)


@pytest.fixture
def mallory(conn, connect, make_role) -> Mallory:
    name = make_role("mallory", login=True)
    conn.execute(f"CREATE SCHEMA mallory AUTHORIZATION {name}")
    m = connect(user=name)
    make_log(m, "mallory")
    for kind, ret in [("trigger", "trigger"), ("bool", "boolean"), ("ts", "timestamptz")]:
        m.execute(f"CREATE FUNCTION mallory.evil_{kind}() RETURNS {ret} LANGUAGE plpgsql AS $${_evil(kind, name)}$$")
    m.execute(f"CREATE FUNCTION mallory.evil_int(bigint) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $${_evil('int', name)}$$")
    m.execute(f"CREATE FUNCTION mallory.evil_text(text) RETURNS boolean LANGUAGE plpgsql AS $${_evil('bool', name)}$$")
    m.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mallory TO PUBLIC")
    m.execute("SELECT pgmq.create('mq')")
    m.execute("SELECT pgmq.send('mq', '{\"n\": 1}')")
    return Mallory(conn=m, name=name, su=conn)


def _superuser_works_on(su: psycopg.Connection, queue: str) -> None:
    """What a superuser (an admin, the worker, cron, monitoring, Spark) does with a queue."""
    su.execute("SELECT pgmq.send(%s, '{\"n\": 2}')", (queue,))
    su.execute("SELECT pgmq.send_batch(%s, ARRAY['{\"n\": 3}'::jsonb, '{\"n\": 4}'])", (queue,))
    ids = column(su, "SELECT msg_id FROM pgmq.read(%s, 30, 2)", (queue,))
    su.execute("SELECT * FROM pgmq.set_vt(%s, %s, 0)", (queue, ids[0]))
    su.execute("SELECT pgmq.archive(%s, %s)", (queue, ids[0]))
    su.execute("SELECT pgmq.delete(%s, %s)", (queue, ids[1]))
    su.execute("SELECT * FROM pgmq.pop(%s)", (queue,))
    su.execute("SELECT * FROM pgmq.read_grouped(%s, 30, 1)", (queue,))
    su.execute("SELECT pgmq.read_message(%s)", (queue,))
    su.execute("SELECT pgmq.metrics(%s)", (queue,))
    su.execute("SELECT * FROM pgmq.metrics_all()")
    su.execute("SELECT pgmq.expire_messages()")
    su.execute("SELECT pgmq.create_fifo_index(%s)", (queue,))
    su.execute("SELECT pgmq.enable_notify_insert(%s)", (queue,))
    su.execute("SELECT pgmq.send(%s, '{\"n\": 5}')", (queue,))
    su.execute("SELECT pgmq.purge_queue(%s)", (queue,))


def _assert_nothing_escalated(m: Mallory) -> None:
    assert not m.is_superuser()
    assert "postgres" not in m.ran_as(), m.ran_as()


# ----------------------------------------------------------------------------- the tables

PLANTS = [
    ("row trigger", "CREATE TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON pgmq.q_mq "
                    "FOR EACH ROW EXECUTE FUNCTION mallory.evil_trigger()"),
    ("statement trigger", "CREATE TRIGGER t AFTER UPDATE ON pgmq.q_mq "
                          "FOR EACH STATEMENT EXECUTE FUNCTION mallory.evil_trigger()"),
    ("archive trigger", "CREATE TRIGGER t AFTER INSERT ON pgmq.a_mq "
                        "FOR EACH ROW EXECUTE FUNCTION mallory.evil_trigger()"),
    ("constraint trigger", "CREATE CONSTRAINT TRIGGER t AFTER INSERT ON pgmq.q_mq "
                           "FOR EACH ROW EXECUTE FUNCTION mallory.evil_trigger()"),
    ("rule", "CREATE RULE r AS ON UPDATE TO pgmq.q_mq DO ALSO SELECT mallory.evil_bool()"),
    ("default", "ALTER TABLE pgmq.q_mq ALTER COLUMN enqueued_at SET DEFAULT mallory.evil_ts()"),
    ("archive default", "ALTER TABLE pgmq.a_mq ALTER COLUMN archived_at SET DEFAULT mallory.evil_ts()"),
    ("check", "ALTER TABLE pgmq.q_mq ADD CONSTRAINT c CHECK (mallory.evil_bool())"),
    ("index expression", "CREATE INDEX i ON pgmq.q_mq (mallory.evil_int(msg_id))"),
    ("generated column", "ALTER TABLE pgmq.q_mq ADD COLUMN g int GENERATED ALWAYS AS (mallory.evil_int(msg_id)) STORED"),
    ("owner", "ALTER TABLE pgmq.q_mq OWNER TO CURRENT_USER"),
    ("sequence owner", "ALTER SEQUENCE pgmq.q_mq_msg_id_seq OWNER TO CURRENT_USER"),
    ("rename", "ALTER TABLE pgmq.q_mq RENAME TO q_other"),
    ("rename column", "ALTER TABLE pgmq.q_mq RENAME COLUMN vt TO visible"),
    ("rename index", "ALTER INDEX pgmq.q_mq_vt_idx RENAME TO x"),
    ("row security", "ALTER TABLE pgmq.q_mq ENABLE ROW LEVEL SECURITY"),
    ("policy", "CREATE POLICY p ON pgmq.q_mq USING (mallory.evil_bool())"),
    ("drop table", "DROP TABLE pgmq.q_mq"),
    ("function in our schema", "CREATE FUNCTION pgmq.read(text, integer) RETURNS int LANGUAGE sql AS 'SELECT 1'"),
]


@pytest.mark.parametrize("what,ddl", PLANTS, ids=[p[0] for p in PLANTS])
def test_queue_owner_cannot_attach_code_to_its_tables(mallory, what, ddl):
    with raises_sql("42501"):
        mallory.conn.execute(ddl)
    _superuser_works_on(mallory.su, "mq")
    _assert_nothing_escalated(mallory)
    assert mallory.ran_as() == []


def test_queue_owner_holds_only_the_privileges_the_api_needs(mallory):
    m, su = mallory, mallory.su
    warnings: list[str] = []
    m.conn.add_notice_handler(lambda d: warnings.append(d.message_primary))
    m.conn.execute(f"GRANT TRIGGER, REFERENCES ON pgmq.q_mq TO {m.name}")  # no grant option: a warning
    assert warnings and "no privileges were granted" in warnings[0]
    for privilege in ("TRIGGER", "REFERENCES"):
        assert scalar(su, "SELECT has_table_privilege(%s, 'pgmq.q_mq', %s)", (m.name, privilege)) is False
    assert scalar(su, "SELECT relowner::regrole::text FROM pg_class WHERE relname = 'q_mq'") == "postgres"
    # ... and the queue is still fully its own through the API
    m.conn.execute("SELECT pgmq.send('mq', '{}')")
    assert len(m.conn.execute("SELECT * FROM pgmq.read('mq', 30, 5)").fetchall()) == 2
    assert scalar(m.conn, "SELECT pgmq.purge_queue('mq')") == 2
    m.conn.execute("SELECT pgmq.enable_notify_insert('mq')")
    m.conn.execute("SELECT pgmq.create_fifo_index('mq')")
    m.conn.execute("SELECT pgmq.set_payload_type('mq', 'text')")
    m.conn.execute("SELECT pgmq.send_payload('mq', 'hi'::text)")
    assert scalar(m.conn, "SELECT payload FROM pgmq.read_payload('mq', 30, 1, NULL::text)") == "hi"
    assert scalar(m.conn, "SELECT pgmq.drop_queue('mq')") is True
    assert scalar(su, "SELECT count(*) FROM pg_class WHERE relname IN ('q_mq', 'a_mq')") == 0


# ----------------------------------------------------------------------------- callbacks

CALLBACK = """
CREATE PROCEDURE mallory.cb(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mallory.log (who) VALUES (current_user);
    BEGIN
        RESET ROLE;  -- would be the dispatcher's session user
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO mallory.log (who) VALUES ('reset refused: ' || SQLSTATE);
    END;
    BEGIN
        SET ROLE postgres;
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO mallory.log (who) VALUES ('set refused: ' || SQLSTATE);
    END;
    BEGIN
        EXECUTE 'ALTER ROLE ' || quote_ident(current_user) || ' SUPERUSER';
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO mallory.log (who) VALUES ('alter refused: ' || SQLSTATE);
    END;
END $$"""


def _dispatch_acting_as(conn, role: str, queue: str = "mq") -> None:
    """What `pgmq-build worker` does for a queue whose callback is another role's: the session
    acts as the registrant for one dispatch statement and is scrubbed right after."""
    dispatch_as(conn, scalar(conn, "SELECT session_user"), role, queue, 1)


def test_callbacks_run_with_their_registrants_rights(mallory):
    m, su = mallory, mallory.su
    m.conn.execute(CALLBACK)
    m.conn.execute("CALL pgmq.register_callback('mq', 'mallory.cb(jsonb)')")
    assert scalar(su, "SELECT registrant::text FROM pgmq.callbacks WHERE queue_name = 'mq'") == m.name
    seen = notices(su)
    su.execute("CALL pgmq.dispatch()")  # a superuser's session is not mallory's: skipped, said so
    assert m.ran_as() == []
    assert any(f'"mq" (role "{m.name}")' in text for _, text in seen), seen
    _dispatch_acting_as(su, m.name)  # as `pgmq-build worker` does, as a superuser
    _assert_nothing_escalated(m)
    assert m.ran_as() == [m.name, "reset refused: 42501", "set refused: 42501", "alter refused: 42501"]
    assert scalar(su, "SELECT count(*) FROM pgmq.q_mq") == 0  # delivered: the callback succeeded
    m.conn.execute("SELECT pgmq.send('mq', '{}')")
    m.conn.execute("CALL pgmq.dispatch()")  # and in mallory's own session
    assert m.ran_as()[-4] == m.name
    assert scalar(su, "SELECT count(*) FROM pgmq.q_mq") == 0


def test_dispatch_refuses_a_dispatcher_that_may_not_act_as_the_registrant(mallory, connect, make_role):
    m, su = mallory, mallory.su
    m.conn.execute(CALLBACK)
    m.conn.execute("CALL pgmq.register_callback('mq', 'mallory.cb(jsonb)')")
    other = make_role("dispatcher", login=True)
    su.execute(f"GRANT SELECT, UPDATE, DELETE ON pgmq.q_mq TO {other}")
    d = connect(user=other)
    with raises_sql("42501"):
        d.execute("CALL pgmq.dispatch('mq')")
    with raises_sql("42501"):
        d.execute("SELECT pgmq._dispatch_one('mq')")
    assert m.ran_as() == []
    assert scalar(su, "SELECT read_ct FROM pgmq.q_mq") == 0  # a refusal counts no attempt
    su.execute(f"GRANT {m.name} TO {other}")
    with raises_sql("42501"):  # a member of the registrant: dispatch() still is not its session
        d.execute("CALL pgmq.dispatch('mq')")
    _dispatch_acting_as(d, m.name)  # acting as the registrant, scrubbed after
    assert m.ran_as()[0] == m.name
    assert scalar(d, "SELECT current_user") == other


def test_an_altered_or_missing_callback_runner_is_made_again(mallory):
    m, su = mallory, mallory.su
    m.conn.execute(CALLBACK)
    m.conn.execute("CALL pgmq.register_callback('mq', 'mallory.cb(jsonb)')")
    runners = "SELECT count(*) FROM pg_proc WHERE proowner = %s::regrole AND proname LIKE '\\_callback\\_as\\_%%'"
    assert scalar(su, runners, (m.name,)) == 1  # registering made the registrant's runner
    _dispatch_acting_as(su, m.name)
    assert m.ran_as()[0] == m.name
    runner = scalar(su, "SELECT p.oid::regprocedure::text FROM pg_proc p "
                        "WHERE p.proowner = %s::regrole AND p.proname LIKE '\\_callback\\_as\\_%%'", (m.name,))
    # its owner may alter it; run by a session acting as mallory through SET ROLE, an invoker's
    # runner could RESET ROLE: that would be escalation, so dispatch remakes it
    for alteration in ["SECURITY INVOKER", "SET search_path = mallory, pg_catalog", "RESET ALL"]:
        m.conn.execute(f"ALTER FUNCTION {runner} {alteration}")
        m.conn.execute("SELECT pgmq.send('mq', '{}')")
        _dispatch_acting_as(su, m.name)
        _assert_nothing_escalated(m)
        assert m.ran_as()[-4] == m.name, m.ran_as()
        assert scalar(su, "SELECT prosecdef FROM pg_proc WHERE oid = %s::regprocedure", (runner,)) is True
    m.conn.execute(f"DROP FUNCTION {runner}")
    m.conn.execute("SELECT pgmq.send('mq', '{}')")
    _dispatch_acting_as(su, m.name)
    assert m.ran_as()[-4] == m.name
    assert scalar(su, "SELECT count(*) FROM pgmq.q_mq") == 0
    _assert_nothing_escalated(m)


def test_callbacks_must_be_executable_by_their_registrant(mallory):
    m, su = mallory, mallory.su
    su.execute("CREATE PROCEDURE public.admin_only(msg jsonb) LANGUAGE sql AS 'SELECT 1'")
    su.execute("REVOKE ALL ON PROCEDURE public.admin_only(jsonb) FROM PUBLIC")
    with raises_sql("42501", "permission denied for procedure public.admin_only(jsonb)"):
        m.conn.execute("CALL pgmq.register_callback('mq', 'public.admin_only(jsonb)')")
    su.execute("SELECT pgmq.create('theirs')")
    m.conn.execute(CALLBACK)
    with raises_sql("42501"):  # nor on another role's queue (row security on pgmq.callbacks)
        m.conn.execute("CALL pgmq.register_callback('theirs', 'mallory.cb(jsonb)')")
    assert scalar(su, "SELECT count(*) FROM pgmq.callbacks") == 0


# ----------------------------------------------------------------------------- payload types

def test_payload_types_of_untrusted_roles_are_refused(mallory):
    m, su = mallory, mallory.su
    m.conn.execute("CREATE DOMAIN mallory.d AS text CHECK (mallory.evil_text(VALUE))")
    m.conn.execute("CREATE TYPE mallory.c AS (a int, b mallory.d)")
    m.conn.execute("CREATE DOMAIN mallory.plain AS text")  # no code, but its owner could add some
    su.execute("CREATE DOMAIN public.trusted_d AS text CHECK (mallory.evil_text(VALUE))")
    su.execute("CREATE DOMAIN public.trusted_ok AS text CHECK (length(VALUE) < 10)")
    for type_name, culprit in [("mallory.d", "type mallory.d"), ("mallory.c", "type mallory.c"),
                               ("mallory.d[]", "type mallory.d"), ("mallory.plain", "type mallory.plain"),
                               ("public.trusted_d", "function mallory.evil_text(text)")]:
        with raises_sql("42501"):
            m.conn.execute("SELECT pgmq.create('typed', %s::regtype)", (type_name,))
        assert scalar(su, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'typed'") == 0
        with pytest.raises(psycopg.Error) as info:
            m.conn.execute("SELECT pgmq.set_payload_type('mq', %s::regtype)", (type_name,))
        assert info.value.sqlstate == "42501" and culprit in info.value.diag.message_primary, info.value
    # enums run no code; a trusted role's domain whose checks are trusted is fine
    m.conn.execute("CREATE TYPE mallory.color AS ENUM ('red', 'green')")
    m.conn.execute("SELECT pgmq.create('colors', 'mallory.color'::regtype)")
    m.conn.execute("SELECT pgmq.create('short', 'public.trusted_ok'::regtype)")
    su.execute("SELECT pgmq.send_payload('short', 'hi'::public.trusted_ok)")
    assert len(su.execute("SELECT * FROM pgmq.read_payload('short', 30, 1, NULL::public.trusted_ok)").fetchall()) == 1
    _assert_nothing_escalated(m)
    assert m.ran_as() == []


def test_the_payload_definer_checks_trust_itself(mallory):
    m = mallory
    m.conn.execute("CREATE DOMAIN mallory.d AS text CHECK (mallory.evil_text(VALUE))")
    with raises_sql("42501"):
        with m.conn.transaction():
            m.conn.execute("SELECT pgmq._prove_caller()")
            m.conn.execute("SELECT pgmq._set_payload_check('mq', 'mallory.d')")
    assert column(m.su, "SELECT conname FROM pg_constraint WHERE conrelid = 'pgmq.q_mq'::regclass "
                        "AND contype = 'c'") == []


# ----------------------------------------------------------------------------- proofs and deputies

def test_definer_routines_act_only_for_the_proven_caller(mallory):
    m, su = mallory, mallory.su
    su.execute("SELECT pgmq.create('victim')")
    with raises_sql("42501", "this routine acts only for callers of pgmq's API"):
        m.conn.execute("SELECT pgmq._drop_queue_tables('victim')")
    with raises_sql("42501"):  # row security: a proof names its writer only
        m.conn.execute("INSERT INTO pgmq.admin_requests VALUES (pg_current_xact_id(), 'postgres')")
    with raises_sql("42501", 'must be owner of queue "victim"'):
        with m.conn.transaction():
            m.conn.execute("SELECT pgmq._prove_caller()")
            m.conn.execute("SELECT pgmq._drop_queue_tables('victim')")
    for sql in ["SELECT pgmq.drop_queue('victim')", "SELECT pgmq.create_fifo_index('victim')",
                "SELECT pgmq.enable_notify_insert('victim')", "SELECT pgmq.enable_notify_msg_id('victim')",
                "SELECT pgmq.set_payload_type('victim', 'text')",
                "CALL pgmq.grant_queue_access('victim', CURRENT_USER)",
                "CALL pgmq.reset_queue_access('victim')",
                "SELECT pgmq.set_retry_policy('victim', 1)",
                "SELECT pgmq.set_retry_policy('mq', 1, dead_letter_queue => 'victim')"]:
        with raises_sql("42501"):
            m.conn.execute(sql)
    assert scalar(su, "SELECT count(*) FROM pg_class WHERE relname = 'q_victim'") == 1


def test_a_confused_deputy_acts_with_its_owners_rights(mallory):
    """mallory's SECURITY DEFINER function, called by a superuser, runs as mallory: our routines
    take the caller from current_user (proven), never from session_user."""
    m, su = mallory, mallory.su
    su.execute("SELECT pgmq.create('victim')")
    m.conn.execute("""CREATE FUNCTION mallory.helpful() RETURNS boolean LANGUAGE sql SECURITY DEFINER
                      AS $$ SELECT pgmq.drop_queue('victim') $$""")
    m.conn.execute("GRANT EXECUTE ON FUNCTION mallory.helpful() TO PUBLIC")
    with raises_sql("42501"):
        su.execute("SELECT mallory.helpful()")
    assert scalar(su, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'victim'") == 1


def test_superuser_work_on_a_hostile_queue_runs_nothing_of_its_owner(mallory):
    m, su = mallory, mallory.su
    for _, ddl in PLANTS:
        try:
            m.conn.execute(ddl)
        except psycopg.Error:
            pass
    _superuser_works_on(su, "mq")
    su.execute("SELECT pgmq.create('dlq')")
    su.execute("SELECT pgmq.set_retry_policy('mq', 0, dead_letter_queue => 'dlq')")
    su.execute("SELECT pgmq.send('mq', '{}')")
    su.execute("SELECT * FROM pgmq.read('mq', 0, 1)")
    su.execute("SELECT * FROM pgmq.read('mq', 0, 1)")  # the second delivery dead-letters it
    assert scalar(su, "SELECT pgmq.redrive('dlq', 'mq')") == 1
    m.conn.execute("SELECT pgmq.create_exchange('mx', 'fanout')")  # mallory's exchange, routing to mq
    m.conn.execute("SELECT pgmq.bind_queue('mq', 'mx', NULL)")
    su.execute("SELECT * FROM pgmq.publish('mx', '', '{}')")
    su.execute("SELECT pgmq.drop_exchange('mx', true)")  # the cascade drops mq
    assert scalar(su, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'mq'") == 0
    _assert_nothing_escalated(m)
    assert m.ran_as() == []


# ----------------------------------------------------------------------------- Spark staging

def test_spark_refuses_staging_tables_of_less_privileged_roles(mallory, dsn):
    pytest.importorskip("pyarrow")
    from pgmq_build.spark.errors import PgmqSparkError
    from pgmq_build.spark.staging import ensure_tables

    m, su = mallory, mallory.su
    m.conn.execute("CREATE TABLE mallory.staging (job_id text, part_id text, ord bigint, vt timestamptz, "
                   "message jsonb, headers jsonb, routing_key text, delay_s integer, staged_at timestamptz)")
    m.conn.execute("CREATE TRIGGER t AFTER INSERT ON mallory.staging FOR EACH ROW "
                   "EXECUTE FUNCTION mallory.evil_trigger()")
    with pytest.raises(PgmqSparkError, match="belongs to role"):
        ensure_tables(su, "mallory.staging", None)
    with pytest.raises(PgmqSparkError, match="schema"):  # its schema too: it could swap tables
        ensure_tables(su, "mallory.fresh_staging", None)
    ensure_tables(m.conn, "mallory.staging", None)  # its own tables are fine for mallory
    ensure_tables(su, "pgmq_spark.staging", "pgmq_spark.sink_batches")
    _assert_nothing_escalated(m)


# ----------------------------------------------------------------------------- partitioned queues

def test_partitioned_queues_need_a_trusted_role(mallory):
    m, su = mallory, mallory.su
    su.execute("CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman")
    # pg_partman builds the tables as the caller, who would own them
    with raises_sql("42501"):
        m.conn.execute("SELECT pgmq.create_partitioned('parted', '10', '20')")
    with raises_sql("42501"):
        m.conn.execute("SELECT pgmq.convert_archive_partitioned('mq', '10', '20')")
    assert scalar(su, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'parted'") == 0
    # a superuser converts mallory's archive: mallory keeps its access, and owns nothing
    m.conn.execute("CALL pgmq.grant_queue_access('mq', 'public')")
    su.execute("SELECT pgmq.convert_archive_partitioned('mq', '10', '20')")
    assert scalar(su, "SELECT relowner::regrole::text FROM pg_class WHERE relname = 'a_mq'") == "postgres"
    assert scalar(m.conn, "SELECT pgmq.archive('mq', 1::bigint)") is True
    assert scalar(m.conn, "SELECT count(*) FROM pgmq.a_mq") == 1
    assert scalar(su, "SELECT has_table_privilege('public', 'pgmq.a_mq', 'INSERT')") is True
    _assert_nothing_escalated(m)
