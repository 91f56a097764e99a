"""Upgrading from 2.0.0 moves queue tables from the roles that made them to the extension's owner
(docs/concepts/security-model.md): the queue's owner keeps its queue (pgmq.queue_owners) and its access, its
grantees keep theirs, no message changes, and what a hostile owner had attached to its tables
while it owned them (triggers, rules, policies, constraints, defaults, index expressions,
domain-typed columns, an untrusted payload type) is removed with a WARNING, so that nothing of
its making runs when a superuser works with the queue afterwards."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import column, raises_sql, scalar
from tests.hostile import evil_body, make_log
from tests.upgrade.scenario import connected

pytestmark = pytest.mark.slow

FROM = "2.0.0"
COLUMNS = "msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers"


@pytest.fixture
def roles(make_role):
    return make_role("alice", login=True), make_role("bob", login=True)


def plant(a: psycopg.Connection, alice: str) -> None:
    """What alice, owning its tables in 2.0.0, could attach to them (an index needs CREATE on
    the schema, which it never had)."""
    make_log(a, "alice")
    for fn, args, returns, value, extra in [
            ("t", "", "trigger", "NULL", ""), ("b", "", "boolean", "true", ""),
            ("ts", "", "timestamptz", "now()", ""), ("i", "bigint", "integer", "1", "IMMUTABLE"),
            ("v", "text", "boolean", "true", "")]:
        a.execute(f"CREATE FUNCTION alice.{fn}({args}) RETURNS {returns} LANGUAGE plpgsql {extra} "
                  f"AS $${evil_body(alice, 'alice', value)}$$")
    a.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA alice TO PUBLIC")
    a.execute("CREATE PROCEDURE alice.cb(msg jsonb) LANGUAGE plpgsql AS "
              "$$ BEGIN INSERT INTO alice.log (who) VALUES ('callback as ' || current_user); END $$")
    a.execute("CREATE DOMAIN alice.d AS text CHECK (alice.v(VALUE))")
    a.execute("SELECT pgmq.create('aq')")
    a.execute("SELECT pgmq.send_batch('aq', ARRAY['{\"n\": 1}', '{\"n\": 2}', '{\"n\": 3}']::jsonb[])")
    a.execute("SELECT * FROM pgmq.read('aq', 300, 1)")
    a.execute("SELECT pgmq.archive('aq', 2::bigint)")
    a.execute("SELECT pgmq.create('tq', 'alice.d'::regtype)")
    a.execute("SELECT pgmq.send_payload('tq', 'x'::alice.d)")
    a.execute("CALL pgmq.register_callback('aq', 'alice.cb(jsonb)')")
    for ddl in [
        "CREATE TRIGGER t1 AFTER INSERT OR UPDATE OR DELETE ON pgmq.q_aq FOR EACH ROW EXECUTE FUNCTION alice.t()",
        "CREATE TRIGGER t2 AFTER UPDATE ON pgmq.q_aq FOR EACH STATEMENT EXECUTE FUNCTION alice.t()",
        "CREATE TRIGGER t3 AFTER INSERT ON pgmq.a_aq FOR EACH ROW EXECUTE FUNCTION alice.t()",
        "CREATE RULE r1 AS ON UPDATE TO pgmq.q_aq DO ALSO SELECT alice.b()",
        "ALTER TABLE pgmq.q_aq ADD CONSTRAINT c1 CHECK (alice.b())",
        "ALTER TABLE pgmq.q_aq ALTER COLUMN enqueued_at SET DEFAULT alice.ts()",
        "CREATE POLICY p1 ON pgmq.q_aq USING (alice.b())",
        "ALTER TABLE pgmq.q_aq ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE pgmq.q_aq ADD COLUMN extra alice.d",
    ]:
        a.execute(ddl)


def test_upgrade_hands_queue_tables_to_the_extension_owner_and_removes_what_owners_planted(dbs, roles, dsn):
    alice, bob = roles
    db = dbs.create("owned")
    with connected(db) as su:
        su.execute(f"CREATE EXTENSION pgmq VERSION '{FROM}'")
        su.execute(f"CREATE SCHEMA alice AUTHORIZATION {alice}")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            plant(a, alice)
            a.execute(f"CALL pgmq.grant_queue_access('aq', '{bob}')")
        assert scalar(su, "SELECT relowner::regrole::text FROM pg_class WHERE relname = 'q_aq'") == alice
        before = {t: su.execute(f"SELECT {COLUMNS} FROM pgmq.{t} ORDER BY msg_id").fetchall()
                  for t in ("q_aq", "a_aq", "q_tq")}
        log_before = column(su, "SELECT who FROM alice.log ORDER BY id")
        warnings: list[str] = []
        su.add_notice_handler(lambda d: warnings.append(d.message_primary))

        su.execute("ALTER EXTENSION pgmq UPDATE")

        assert scalar(su, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") != FROM
        assert column(su, "SELECT who FROM alice.log ORDER BY id") == log_before  # the upgrade ran none of it
        text = "\n".join(warnings)
        for what in ["trigger t1", "trigger t2", "trigger t3", "rule r1", "policy p1", "constraint c1",
                     "default of pgmq.q_aq.enqueued_at", "column pgmq.q_aq.extra",
                     'queue "tq" no longer checks its payload type']:
            assert what in text, (what, warnings)
        # ownership: tables to the extension's owner, the queue stays alice's
        owners = "SELECT relname, relowner::regrole::text FROM pg_class WHERE relname ~ '^(q|a)_(aq|tq)' ORDER BY 1"
        assert {r[1] for r in su.execute(owners).fetchall()} == {"postgres"}
        assert dict(su.execute("SELECT queue_name, owner::text FROM pgmq.queue_owners").fetchall()) == \
            {"aq": alice, "tq": alice}
        assert scalar(su, "SELECT registrant::text FROM pgmq.callbacks WHERE queue_name = 'aq'") == alice
        # nothing planted is left
        assert column(su, "SELECT tgname FROM pg_trigger WHERE tgrelid IN ('pgmq.q_aq'::regclass, "
                          "'pgmq.a_aq'::regclass) AND NOT tgisinternal") == []
        assert column(su, "SELECT rulename FROM pg_rewrite WHERE ev_class = 'pgmq.q_aq'::regclass") == []
        assert column(su, "SELECT polname FROM pg_policy WHERE polrelid = 'pgmq.q_aq'::regclass") == []
        assert scalar(su, "SELECT relrowsecurity FROM pg_class WHERE oid = 'pgmq.q_aq'::regclass") is False
        assert column(su, "SELECT conname FROM pg_constraint WHERE conrelid = 'pgmq.q_aq'::regclass "
                          "AND contype = 'c'") == []
        assert column(su, "SELECT conname FROM pg_constraint WHERE conrelid = 'pgmq.q_tq'::regclass "
                          "AND contype = 'c'") == []
        # the planted index is gone; so is the priority index (2.4.0: none of aq's messages has a priority)
        assert sorted(column(su, "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                                 "WHERE i.indrelid = 'pgmq.q_aq'::regclass")) == ["q_aq_pkey", "q_aq_vt_idx"]
        assert scalar(su, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef d JOIN pg_attribute a "
                          "ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                          "WHERE d.adrelid = 'pgmq.q_aq'::regclass AND a.attname = 'enqueued_at'") == "now()"
        # every message as it was
        assert {t: su.execute(f"SELECT {COLUMNS} FROM pgmq.{t} ORDER BY msg_id").fetchall()
                for t in before} == before

        # a superuser works with the queues: nothing of alice's runs as the superuser
        su.execute("SELECT pgmq.send('aq', '{\"n\": 4}')")
        su.execute("SELECT * FROM pgmq.read('aq', 0, 5)")
        su.execute("SELECT pgmq.archive('aq', 1::bigint)")
        su.execute("SELECT * FROM pgmq.pop('aq')")
        su.execute("SELECT pgmq.expire_messages()")
        su.execute("SELECT * FROM pgmq.metrics_all()")
        with raises_sql("42501"):  # alice's callback runs only in alice's own session
            su.execute("CALL pgmq.dispatch('aq')")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            a.execute("CALL pgmq.dispatch('aq')")  # there it runs, as alice
        # (a typed NULL of alice.d, as read_payload takes, would run alice's CHECK in the
        # caller's own statement: the upgrade's WARNING says so; refused for any other type)
        with raises_sql("42804"):
            su.execute("SELECT * FROM pgmq.read_payload('tq', 30, 1, NULL::text)")
        log = column(su, "SELECT who FROM alice.log ORDER BY id")
        assert "postgres" not in log and log[len(log_before):] == [f"callback as {alice}"]
        assert scalar(su, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (alice,)) is False

        # alice and bob keep their access; alice can no longer attach anything
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            a.execute("SELECT pgmq.send('aq', '{}')")
            assert len(a.execute("SELECT * FROM pgmq.read('aq', 30, 10)").fetchall()) >= 1
            with raises_sql("42501"):
                a.execute("CREATE TRIGGER t4 AFTER INSERT ON pgmq.q_aq FOR EACH ROW EXECUTE FUNCTION alice.t()")
            a.execute(f"CALL pgmq.revoke_queue_access('aq', '{bob}')")
            a.execute(f"CALL pgmq.grant_queue_access('aq', '{bob}')")
        with psycopg.connect(db + f" user={bob}", autocommit=True) as b:
            b.execute("SELECT pgmq.send('aq', '{}')")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            assert scalar(a, "SELECT pgmq.purge_queue('aq')") >= 1
            assert scalar(a, "SELECT pgmq.drop_queue('aq')") is True
