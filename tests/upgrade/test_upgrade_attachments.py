"""Upgrades and migrations sweep queue tables (docs/concepts/security-model.md, "Anything attached to a queue
table"): whatever is attached to a queue table and was not made by pgmq goes, found through
pg_depend rather than a list of kinds, each with a WARNING naming it. In 2.0.0 and in upstream
PGMQ the roles that made queues owned their tables; what they attached (extended statistics
whose expressions ANALYZE runs as the table's owner, inheritance children whose triggers
UPDATE and DELETE on the queue table reach, foreign keys, publications, ...) would otherwise
run with the rights of the extension's owner or of a superuser working with the queue. The
step from 2.8.0, which every chain from 2.0.0 passes, sweeps every queue, whoever attached
what; so do the steps from upstream 1.13 (extension and standalone forms, and `pgmq-build
migrate`). Children are detached, not dropped; views over queue tables are kept.

Payload types (issue 29, vector 3) move to their OID in the step from 2.8.0: typed queues get
the new constraint, one whose type is gone or untrusted loses it with a WARNING, and the result
equals a fresh install."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build import migrate
from pgmq_build.catalog import differences, snapshot
from pgmq_build.manifest import MANIFEST
from tests.helpers import PARTMAN_SQL, column, raises_sql, scalar
from tests.hostile import evil_body, make_log
from tests.upgrade.scenario import connected
from tests.upgrade.test_migrate_upstream import install_upstream, upstream_extension  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

NEW = MANIFEST.version
COLUMNS = "msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers"
# what ANALYZE's expression reports (an IMMUTABLE function may not write its log)
RAN_AS = "pgmq-test: the statistics expression ran as "


def plant_code(c: psycopg.Connection, who: str, schema: str) -> None:
    """<schema>.log and the code a hostile role plants: a row trigger function and a statement
    one (log current_user, try to become superuser) and an IMMUTABLE function for statistics
    expressions, which can only report who runs it."""
    make_log(c, schema)
    c.execute(f"CREATE FUNCTION {schema}.t() RETURNS trigger LANGUAGE plpgsql AS $${evil_body(who, schema, 'NULL')}$$")
    c.execute(f"""CREATE FUNCTION {schema}.f(bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
                  BEGIN RAISE WARNING '{RAN_AS}%', current_user; RETURN $1; END $$""")
    c.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO PUBLIC")


def attach(c: psycopg.Connection, schema: str, table: str) -> None:
    """Attach to pgmq.<table>, as a role that may (its owner in 2.0.0 and upstream, a superuser
    later): extended statistics with an expression, an inheritance child with triggers and a
    visible row, a table with a foreign key to it, a publication of its archive (on the queue
    table itself it would make UPDATE and DELETE fail for the child, which has no replica
    identity) and a view (kept)."""
    c.execute(f"CREATE STATISTICS {schema}.s ON ({schema}.f(msg_id)), vt FROM pgmq.{table}")
    c.execute(f"CREATE TABLE {schema}.c () INHERITS (pgmq.{table})")
    c.execute(f"CREATE TRIGGER ct BEFORE UPDATE OR DELETE ON {schema}.c FOR EACH ROW EXECUTE FUNCTION {schema}.t()")
    c.execute(f"CREATE TRIGGER ctt BEFORE TRUNCATE ON {schema}.c FOR EACH STATEMENT EXECUTE FUNCTION {schema}.t()")
    c.execute(f"INSERT INTO {schema}.c (msg_id, read_ct, vt, message) VALUES (1001, 0, now() - interval '1 day', '{{}}')")
    c.execute(f"CREATE TABLE {schema}.ref (id bigint REFERENCES pgmq.{table} (msg_id) ON DELETE CASCADE)")
    c.execute(f"CREATE PUBLICATION {schema}_pub FOR TABLE pgmq.a_{table.removeprefix('q_')}")
    c.execute(f"CREATE VIEW {schema}.v AS SELECT msg_id FROM pgmq.{table}")


def check_swept(su: psycopg.Connection, schema: str, table: str, warnings: list[str]) -> None:
    """What attach() made is gone from pgmq.<table> (named by a WARNING each); the child and the
    view stay as tables of their own."""
    text = "\n".join(warnings)
    for what in [f"statistics object {schema}.s", f"table {schema}.c", f"constraint ref_id_fkey on table {schema}.ref",
                 f"publication of table pgmq.a_{table.removeprefix('q_')} in publication {schema}_pub"]:
        assert what in text, (what, warnings)
    rel = f"'pgmq.{table}'::regclass"
    assert column(su, f"SELECT stxname FROM pg_statistic_ext WHERE stxrelid = {rel}") == []
    assert column(su, f"SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = {rel}") == []
    assert column(su, f"SELECT conname FROM pg_constraint WHERE confrelid = {rel}") == []
    assert column(su, f"SELECT prpubid FROM pg_publication_rel WHERE prrelid = 'pgmq.a_{table.removeprefix('q_')}'::regclass") == []
    assert scalar(su, f"SELECT count(*) FROM {schema}.c") == 1  # detached, kept
    assert scalar(su, f"SELECT to_regclass('{schema}.v') IS NOT NULL") is True


def superuser_works(su: psycopg.Connection, queue: str, table: str) -> tuple[list[str], list[str]]:
    """ANALYZE (as autovacuum would) and a superuser's read, delete and purge: the statistics
    expression's reports and the errors met (each call goes on after an error; the caller
    checks <schema>.log first)."""
    seen: list[str] = []
    errors: list[str] = []
    su.add_notice_handler(lambda d: seen.append(d.message_primary))
    for sql, params in [(f"ANALYZE pgmq.{table}", None),
                        ("SELECT * FROM pgmq.read(%s, 0, 10)", (queue,)),
                        ("SELECT pgmq.delete(%s, 1001::bigint)", (queue,)),
                        ("SELECT pgmq.purge_queue(%s)", (queue,)),
                        (f"ANALYZE pgmq.{table}", None)]:
        try:
            su.execute(sql, params)
        except psycopg.Error as exc:
            errors.append(f"{sql}: {exc}")
    return [m for m in seen if m.startswith(RAN_AS)], errors


def assert_nothing_ran_as(su: psycopg.Connection, schema: str, worked: tuple[list[str], list[str]], role: str) -> None:
    reports, errors = worked
    log = column(su, f"SELECT who FROM {schema}.log ORDER BY id")
    assert "postgres" not in log, log
    assert reports == [], reports
    assert scalar(su, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)) is False
    assert errors == [], errors


def test_the_upgrade_from_2_0_0_sweeps_what_queue_owners_attached(dbs, make_role):
    """In 2.0.0 alice owned its queue's tables: the step to 2.1.0 removed triggers, rules and
    the like by a list of kinds, not statistics, children, foreign keys or publications."""
    alice = make_role("alice", login=True)
    db = dbs.create("owned")
    with connected(db) as su:
        su.execute("CREATE EXTENSION pgmq VERSION '2.0.0'")
        su.execute(f"CREATE SCHEMA alice AUTHORIZATION {alice}")
        su.execute(f"GRANT CREATE ON DATABASE {su.info.dbname} TO {alice}")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            plant_code(a, alice, "alice")
            a.execute("SELECT pgmq.create('aq')")
            a.execute("SELECT pgmq.send_batch('aq', ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])")
            attach(a, "alice", "q_aq")
        before = su.execute(f"SELECT {COLUMNS} FROM ONLY pgmq.q_aq ORDER BY msg_id").fetchall()
        warnings: list[str] = []
        su.add_notice_handler(lambda d: warnings.append(d.message_primary))

        su.execute("ALTER EXTENSION pgmq UPDATE")

        assert scalar(su, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") == NEW
        after = su.execute(f"SELECT {COLUMNS} FROM pgmq.q_aq ORDER BY msg_id").fetchall()
        reports = superuser_works(su, "aq", "q_aq")
        assert_nothing_ran_as(su, "alice", reports, alice)
        assert after == before  # every message kept, the child's rows no longer in the queue
        check_swept(su, "alice", "q_aq", warnings)


def test_the_upgrade_from_2_8_0_sweeps_every_queue_whoever_attached_what(dbs, make_role):
    """Leftovers on a 2.8.0 install, planted by a superuser for bob (whose code it runs): every
    kind in pg_depend goes, our objects stay, and the tables end as a fresh install's."""
    bob = make_role("bob", login=True)
    db, fresh = dbs.create("leftovers"), dbs.create("fresh")
    with connected(db) as su:
        su.execute("CREATE EXTENSION pgmq VERSION '2.8.0'")
        su.execute(f"CREATE SCHEMA bob AUTHORIZATION {bob}")
        with psycopg.connect(db + f" user={bob}", autocommit=True) as b:
            plant_code(b, bob, "bob")
            b.execute("CREATE DOMAIN bob.checked AS jsonb CHECK (bob.f(1) = 1)")
            b.execute("SELECT pgmq.create('lq')")
            b.execute("SELECT pgmq.send_batch('lq', ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])")
            b.execute("SELECT pgmq.enable_notify_insert('lq')")
        attach(su, "bob", "q_lq")
        su.execute(f"ALTER TABLE bob.c OWNER TO {bob}")
        for ddl in [
            "CREATE TRIGGER t1 AFTER UPDATE ON pgmq.q_lq FOR EACH ROW EXECUTE FUNCTION bob.t()",
            "CREATE TRIGGER t2 AFTER DELETE ON pgmq.a_lq FOR EACH STATEMENT EXECUTE FUNCTION bob.t()",
            "CREATE RULE r1 AS ON DELETE TO pgmq.q_lq DO ALSO NOTIFY bob",
            "CREATE POLICY p1 ON pgmq.q_lq USING (true)",
            "ALTER TABLE pgmq.q_lq ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE pgmq.q_lq ALTER COLUMN read_ct SET DEFAULT 1",
            "ALTER TABLE pgmq.q_lq ADD CONSTRAINT c1 CHECK (read_ct >= 0)",
            "CREATE INDEX q_lq_extra ON pgmq.q_lq (bob.f(msg_id))",
            "CREATE INDEX q_lq_vt_idx2 ON pgmq.q_lq (vt)",
            "ALTER TABLE pgmq.q_lq ALTER COLUMN headers TYPE bob.checked",
            "ALTER TABLE pgmq.q_lq ADD COLUMN extra bob.checked",
        ]:
            su.execute(ddl)
        before = su.execute(f"SELECT {COLUMNS} FROM ONLY pgmq.q_lq ORDER BY msg_id").fetchall()
        warnings: list[str] = []
        su.add_notice_handler(lambda d: warnings.append(d.message_primary))

        su.execute("ALTER EXTENSION pgmq UPDATE")

        check_swept(su, "bob", "q_lq", warnings)
        text = "\n".join(warnings)
        for what in ["trigger t1 on table pgmq.q_lq", "trigger t2 on table pgmq.a_lq", "rule r1 on table pgmq.q_lq",
                     "policy p1 on table pgmq.q_lq", "row security on pgmq.q_lq",
                     "default value for column read_ct of table pgmq.q_lq", "constraint c1 on table pgmq.q_lq",
                     "index pgmq.q_lq_extra", "index pgmq.q_lq_vt_idx2",
                     "column headers of pgmq.q_lq (type bob.checked) goes back to jsonb",
                     "column extra of pgmq.q_lq (type bob.checked)"]:
            assert what in text, (what, warnings)
        # ours stay: the notification trigger, the indexes, the defaults
        assert column(su, "SELECT tgname FROM pg_trigger WHERE tgrelid = 'pgmq.q_lq'::regclass "
                          "AND NOT tgisinternal") == ["trigger_notify_queue_insert_listeners"]
        assert su.execute(f"SELECT {COLUMNS} FROM pgmq.q_lq ORDER BY msg_id").fetchall() == before
        upgraded = snapshot(su)
        reports = superuser_works(su, "lq", "q_lq")
        su.execute("SELECT pgmq.send('lq', '{}'::jsonb)")
        assert_nothing_ran_as(su, "bob", reports, bob)
    with connected(fresh) as su:
        su.execute("CREATE EXTENSION pgmq")
        su.execute(f"SET ROLE {bob}")
        su.execute("SELECT pgmq.create('lq')")
        su.execute("SELECT pgmq.enable_notify_insert('lq')")
        su.execute("RESET ROLE")
        diff = differences(upgraded, snapshot(su), ("upgraded", "fresh"))
        assert not diff, "\n".join(diff)


def test_the_upgrade_refuses_an_attachment_it_cannot_remove_and_changes_nothing(dbs):
    """A queue column of another type than a domain over its own: converting it could run that
    type's code, so the upgrade fails naming it, and the database is as it was."""
    db = dbs.create("refused")
    with connected(db) as su:
        su.execute("CREATE EXTENSION pgmq VERSION '2.8.0'")
        su.execute("SELECT pgmq.create('q')")
        su.execute("CREATE TYPE public.counter AS (n integer)")
        su.execute("ALTER TABLE pgmq.q_q ALTER COLUMN read_ct DROP DEFAULT, "
                   "ALTER COLUMN read_ct TYPE public.counter USING row(read_ct)")
        before = snapshot(su, rows=True)
        with raises_sql("55000"):
            su.execute("ALTER EXTENSION pgmq UPDATE")
        assert snapshot(su, rows=True) == before


@pytest.mark.parametrize(("how", "target"), [("extension", "extension"), ("sql", "extension"), ("sql", "standalone")])
def test_the_migration_from_upstream_sweeps_what_application_roles_attached(dbs, make_role, upstream_extension,  # noqa: F811
                                                                            how, target):
    """Upstream's queue tables belong to the roles that made them: what those attached goes as
    the tables are handed over, through ALTER EXTENSION pgmq UPDATE and pgmq-build migrate."""
    app = make_role("mig_app", login=True)
    db = dbs.create("upstream")
    if how == "extension":
        upstream_extension(migrate.upstream_sql()[0])
    install_upstream(db, how, migrate.upstream_sql()[0])
    with connected(db) as su:
        su.execute(f"GRANT USAGE, CREATE ON SCHEMA pgmq TO {app}")
        su.execute(f"GRANT INSERT ON pgmq.meta TO {app}")
        su.execute(f"GRANT CREATE ON DATABASE {su.info.dbname} TO {app}")
        su.execute(f"CREATE SCHEMA app AUTHORIZATION {app}")
        with psycopg.connect(db + f" user={app}", autocommit=True) as a:
            plant_code(a, app, "app")
            a.execute("SELECT pgmq.create('apps')")
            a.execute("SELECT pgmq.send('apps', '{\"a\": 1}'::jsonb)")
            attach(a, "app", "q_apps")
            # before the migration ANALYZE runs the expression as the table's owner, app
            seen: list[str] = []
            a.add_notice_handler(lambda d: seen.append(d.message_primary))
            a.execute("ANALYZE pgmq.q_apps")
            assert f"{RAN_AS}{app}" in seen
        before = su.execute(f"SELECT {COLUMNS} FROM ONLY pgmq.q_apps ORDER BY msg_id").fetchall()
    warnings: list[str] = []
    if how == "extension":
        with connected(db) as su:
            su.add_notice_handler(lambda d: warnings.append(d.message_primary))
            su.execute("ALTER EXTENSION pgmq UPDATE")
    else:
        out: list[str] = []
        migrate.migrate(db, target=target, echo=out.append)
        warnings = [line.removeprefix("  warning: ") for line in out if line.startswith("  warning: ")]
    with connected(db) as su:
        assert scalar(su, "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'pgmq.q_apps'::regclass") == "postgres"
        after = su.execute(f"SELECT {COLUMNS} FROM pgmq.q_apps ORDER BY msg_id").fetchall()
        reports = superuser_works(su, "apps", "q_apps")
        assert_nothing_ran_as(su, "app", reports, app)
        assert after == before  # every message kept, the child's rows no longer in the queue
        check_swept(su, "app", "q_apps", warnings)


# ----------------------------------------------------------------------------- payload types

TYPED = """
CREATE TYPE public.mood AS ENUM ('happy', 'sad');
CREATE TYPE public.pair AS (n integer, mood public.mood);
SELECT pgmq.create('t_text', 'text'::regtype);
SELECT pgmq.create('t_bytes', 'bytea'::regtype);
SELECT pgmq.create('t_int', 'integer'::regtype);
SELECT pgmq.create('t_enum', 'public.mood'::regtype);
SELECT pgmq.create('t_enums', 'public.mood[]'::regtype);
SELECT pgmq.create('t_pair', 'public.pair'::regtype);
SELECT pgmq.create('t_when', 'timestamp with time zone'::regtype);
"""
TYPED_MESSAGES = """
SELECT pgmq.send_payload('t_text', 'hello'::text);
SELECT pgmq.send_payload('t_bytes', '\\x00ff'::bytea);
SELECT pgmq.send_payload('t_int', 7);
SELECT pgmq.send_payload('t_enum', 'sad'::public.mood);
SELECT pgmq.send_payload('t_enums', ARRAY['happy', 'sad']::public.mood[]);
SELECT pgmq.send_payload('t_pair', (1, 'happy')::public.pair);
SELECT pgmq.send_payload('t_when', '2024-05-01 12:00:00+00'::timestamptz);
"""


def test_typed_queues_upgraded_from_2_8_0_hold_their_type_by_oid_as_a_fresh_install(dbs, make_role, partman_available):
    tenant = make_role("tenant", login=True)
    a, b = dbs.create("typed"), dbs.create("fresh")
    for db in (a, b):
        with connected(db) as c:
            c.execute("CREATE EXTENSION pgmq" + (" VERSION '2.8.0'" if db == a else ""))
            c.execute(TYPED)
            if partman_available:
                c.execute(";\n".join(PARTMAN_SQL))
                c.execute("SELECT pgmq.create_partitioned('t_parted', '10', '100')")
                c.execute("SELECT pgmq.set_payload_type('t_parted', 'integer')")
            c.execute(TYPED_MESSAGES)
            c.execute(f"CREATE SCHEMA tenant AUTHORIZATION {tenant}")
    with connected(a) as c:
        rows = {t: c.execute(f"SELECT {COLUMNS} FROM pgmq.{t} ORDER BY msg_id").fetchall()
                for t in column(c, "SELECT 'q_' || queue_name FROM pgmq.meta ORDER BY 1")}
        c.execute("ALTER EXTENSION pgmq UPDATE")
        assert {t: c.execute(f"SELECT {COLUMNS} FROM pgmq.{t} ORDER BY msg_id").fetchall() for t in rows} == rows
        upgraded = snapshot(c, rows=True)
        assert column(c, "SELECT payload::text FROM pgmq.read_payload('t_pair', 0, 5, NULL::public.pair)") == ["(1,happy)"]
        assert column(c, "SELECT payload FROM pgmq.pop_payload('t_int', 5, NULL::integer)") == [7]
        # the constraint holds the type (a regtype constant: a dependency on it)
        assert scalar(c, """SELECT count(*) FROM pg_depend d JOIN pg_constraint k ON k.oid = d.objid
                            WHERE d.classid = 'pg_constraint'::regclass AND k.conrelid = 'pgmq.q_t_enum'::regclass
                              AND d.refclassid = 'pg_type'::regclass AND d.refobjid = 'public.mood'::regtype""") == 1
    with connected(b) as c:
        diff = differences(upgraded, snapshot(c, rows=True), ("upgraded", "fresh"))
        assert not diff, "\n".join(diff)


def test_a_payload_type_swapped_before_the_upgrade_loses_its_constraint_with_a_warning(dbs, make_role):
    """On 2.8.0 a tenant renamed its enum and made a domain of its name: the upgrade resolves the
    stored name to the domain, which is not trusted (the step from 2.0.0's treatment); a queue
    whose type is gone becomes untyped. Nothing of the tenant's runs, then or after."""
    tenant = make_role("tenant", login=True)
    db = dbs.create("swapped")
    with connected(db) as su:
        su.execute("CREATE EXTENSION pgmq VERSION '2.8.0'")
        su.execute(f"CREATE SCHEMA tenant AUTHORIZATION {tenant}")
        with psycopg.connect(db + f" user={tenant}", autocommit=True) as t:
            plant_code(t, tenant, "tenant")
            t.execute(f"CREATE FUNCTION tenant.v(text) RETURNS boolean LANGUAGE plpgsql STRICT "
                      f"AS $${evil_body(tenant, 'tenant', 'true')}$$")
            t.execute("GRANT EXECUTE ON FUNCTION tenant.v(text) TO PUBLIC")
            t.execute("CREATE TYPE tenant.mood AS ENUM ('happy', 'sad')")
            t.execute("CREATE TYPE tenant.gone AS ENUM ('x')")
            t.execute("SELECT pgmq.create('swapped', 'tenant.mood'::regtype)")
            t.execute("SELECT pgmq.create('orphan', 'tenant.gone'::regtype)")
            t.execute("SELECT pgmq.send_payload('swapped', 'happy'::tenant.mood)")
            t.execute("SELECT pgmq.send_payload('orphan', 'x'::tenant.gone)")
            t.execute("ALTER TYPE tenant.mood RENAME TO mood_was")
            t.execute("CREATE DOMAIN tenant.mood AS text CHECK (tenant.v(VALUE))")
            t.execute("DROP TYPE tenant.gone")
        warnings: list[str] = []
        su.add_notice_handler(lambda d: warnings.append(d.message_primary))

        su.execute("ALTER EXTENSION pgmq UPDATE")

        text = "\n".join(warnings)
        assert 'queue "swapped" no longer checks its payload type tenant.mood: type tenant.mood belongs to role' in text
        assert 'queue "orphan" no longer checks its payload type tenant.gone: it is gone' in text
        assert column(su, "SELECT conname FROM pg_constraint WHERE conname = 'pgmq_payload_type'") == []
        assert scalar(su, "SELECT pgmq.payload_type('orphan')::text") == "jsonb"
        su.execute("SELECT * FROM pgmq.read('swapped', 0, 5)")
        su.execute("SELECT pgmq.send('swapped', '\"sad\"'::jsonb, '{\"x-pgmq-payload\": \"tenant.mood\"}'::jsonb)")
        with raises_sql("42501"):
            su.execute("SELECT * FROM pgmq.read_payload('swapped', 0, 5, NULL::tenant.mood)")
        assert "postgres" not in column(su, "SELECT who FROM tenant.log")
