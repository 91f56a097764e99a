"""Upstream PGMQ 1.13 becomes ours in place (docs/guides/migrating-from-pgmq.md): its extension by
ALTER EXTENSION pgmq UPDATE, its SQL-only install by `pgmq-build migrate`. Upstream is
installed from the SQL inside the PyPI `pgmq` package (never copied here) and filled with
upstream's own functions; after the migration every message, archived row, msg_id position,
topic binding, notify throttle and grant is there, upstream's Python client still works, our
features work on the migrated queues, and the catalog equals a fresh install of ours that made
the same queues with our functions. A failed migration and a dry run change nothing."""

from __future__ import annotations

import contextlib
import os
import re

import pgmq as pgmq_client  # PyPI `pgmq`: upstream's client, and upstream's SQL
import psycopg
import pytest
from psycopg import sql

from pgmq_build import install, migrate
from pgmq_build.catalog import differences, snapshot
from pgmq_build.manifest import MANIFEST
from pgmq_build.paths import extension_dir
from tests.helpers import PARTMAN_SQL, column, run_cli, scalar
from tests.upgrade.scenario import connected

pytestmark = pytest.mark.slow

NEW = MANIFEST.version
UPSTREAM_VERSION, UPSTREAM_SQL = migrate.upstream_sql()
Q = "msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers"  # upstream's columns
A = "msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, headers"


def test_the_package_ships_upstream_1_13_0():
    # No published client package ships 1.13.1's SQL (pgmq 1.1.4, the newest, has 1.13.0): the
    # 1.13.1 step is tested with 1.13.0's objects under that label (see test_1_13_1 below).
    assert UPSTREAM_VERSION == "1.13.0" and UPSTREAM_VERSION in MANIFEST.upstream


# Queues of every kind, made with upstream's functions, or ours for the fresh install (the same
# statements: our API is upstream's). {role}: a role that gets table grants; {app}: a role that
# makes a queue of its own (upstream needs it to have CREATE on the schema and INSERT on meta).
SETUP = """
SELECT pgmq.create('plain');
SELECT pgmq.create_unlogged('unlogged');
SELECT pgmq.create('fifo');
SELECT pgmq.create_fifo_index('fifo');
SELECT pgmq.create('dlq');
SELECT pgmq.create('work');
SELECT pgmq.create('MixedCase');
SELECT pgmq.bind_topic('logs.*', 'work');
SELECT pgmq.bind_topic('logs.#', 'plain');
SELECT pgmq.enable_notify_insert('plain', 250);
SELECT pgmq.enable_notify_insert('MixedCase', 0);
GRANT SELECT, INSERT, UPDATE, DELETE ON pgmq.q_plain, pgmq.a_plain TO {role};
GRANT SELECT, USAGE ON SEQUENCE pgmq.q_plain_msg_id_seq TO {role};
GRANT USAGE, CREATE ON SCHEMA pgmq TO {app};
GRANT INSERT ON pgmq.meta TO {app};
SET ROLE {app};
SELECT pgmq.create('apps');
RESET ROLE;
"""
PARTITIONED = ";\n".join(PARTMAN_SQL) + """;
SELECT pgmq.create_partitioned('parted', '10', '20');
SELECT pgmq.create_partitioned('timed', '1 day', '7 days');
"""
# visible, delayed, leased (vt 300), archived; FIFO groups; routed by topic
MESSAGES = """
SELECT pgmq.send_batch('plain', ARRAY['{"n":1}','{"n":2}','{"n":3}','{"n":4}']::jsonb[]);
SELECT pgmq.send('plain', '{"n":5}'::jsonb, 60);
SELECT * FROM pgmq.read('plain', 300, 2);
SELECT pgmq.archive('plain', 3::bigint);
SELECT pgmq.send('unlogged', '{"u":1}'::jsonb);
SELECT pgmq.send('fifo', '{"f":1}'::jsonb, '{"x-pgmq-group": "g1"}'::jsonb);
SELECT pgmq.send('fifo', '{"f":2}'::jsonb, '{"x-pgmq-group": "g2"}'::jsonb);
SELECT pgmq.send_topic('logs.error', '{"l":1}'::jsonb);
SELECT pgmq.send('work', '{"w":1}'::jsonb);
SELECT pgmq.send('MixedCase', '{"m":1}'::jsonb);
SELECT pgmq.send('apps', '{"a":1}'::jsonb);
"""
PARTITIONED_MESSAGES = """
SELECT pgmq.send_batch('parted', (SELECT array_agg(jsonb_build_object('i', g)) FROM generate_series(1, 12) g));
SELECT * FROM pgmq.read('parted', 300, 3);
SELECT pgmq.archive('parted', ARRAY[4, 5]::bigint[]);
SELECT pgmq.send('timed', '{"t":1}'::jsonb);
SELECT pgmq.send('timed', '{"t":2}'::jsonb);
SELECT pgmq.archive('timed', 1::bigint);
"""


@pytest.fixture
def roles(make_role):
    """Dropped after the databases that hold their grants (make_role, tests/upgrade/conftest.py)."""
    return make_role("mig_reader"), make_role("mig_app")


@pytest.fixture
def upstream_extension():
    """Upstream's SQL as extension install scripts pgmq--<v>.sql in the server's extension
    directory: CREATE EXTENSION pgmq VERSION '<v>'. Left there afterwards: a test on another
    xdist worker may be creating upstream's extension from the same file (removing it made that
    test fail: "no installation script ... for version 1.13.0"), and an extension directory
    shared with upstream holds these scripts anyway, which our update paths are tested with
    (test_the_update_from_upstream_takes_the_bridge_whatever_else_the_directory_holds)."""
    dest = install.sharedir() / "extension"

    def write(version: str) -> None:
        path = dest / f"pgmq--{version}.sql"
        if not path.exists() or path.read_text() != UPSTREAM_SQL:
            # whole or not at all, for a server reading it on another worker meanwhile
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(UPSTREAM_SQL)
            os.replace(tmp, path)

    return write


def fill(c: psycopg.Connection, roles: tuple[str, str], partman: bool) -> None:
    reader, app = roles
    c.execute(SETUP.format(role=reader, app=app))
    if partman:
        c.execute(PARTITIONED)
    c.execute(MESSAGES)
    if partman:
        c.execute(PARTITIONED_MESSAGES)


def upstream_rows(c: psycopg.Connection) -> dict[str, list[tuple]]:
    """Every row of every queue and archive, upstream's columns, in msg_id order."""
    out = {}
    for name, in c.execute("SELECT queue_name FROM pgmq.meta ORDER BY 1").fetchall():
        for prefix, cols in (("q", Q), ("a", A)):
            table = sql.Identifier(f"{prefix}_{name.lower()}")
            out[f"{prefix}_{name}"] = c.execute(
                sql.SQL("SELECT {} FROM pgmq.{} ORDER BY msg_id").format(sql.SQL(cols), table)).fetchall()
    return out


def state(c: psycopg.Connection) -> dict:
    """What must survive besides the messages: sequence positions, topic bindings, throttles,
    notify triggers, grants, pg_partman's configuration."""
    out = {
        "sequences": c.execute("""SELECT c.relname, pg_sequence_last_value(c.oid) FROM pg_class c
                                  WHERE c.relnamespace = 'pgmq'::regnamespace AND c.relkind = 'S'
                                    AND c.relname ~ '^[qa]_'  -- the queues' (ours add others)
                                  ORDER BY 1""").fetchall(),
        "topics": c.execute("SELECT pattern, queue_name, bound_at, compiled_regex FROM pgmq.topic_bindings "
                            "ORDER BY 1, 2").fetchall(),
        "throttles": c.execute("SELECT queue_name, throttle_interval_ms, last_notified_at "
                               "FROM pgmq.notify_insert_throttle ORDER BY 1").fetchall(),
        "meta": c.execute("SELECT * FROM pgmq.meta ORDER BY 1").fetchall(),
        "notify_triggers": column(c, """SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                                        WHERE t.tgname = 'trigger_notify_queue_insert_listeners' ORDER BY 1"""),
        "grants": c.execute("""SELECT c.relname, a.grantee::regrole::text, a.privilege_type
                               FROM pg_class c, aclexplode(c.relacl) a
                               WHERE c.relnamespace = 'pgmq'::regnamespace AND c.relname ~ '^[qa]_'
                                 AND a.grantee NOT IN (c.relowner, 'pg_monitor'::regrole)
                               ORDER BY 1, 2, 3""").fetchall(),
    }
    if c.execute("SELECT to_regclass('partman.part_config')").fetchone()[0]:
        out["partman"] = c.execute("""SELECT parent_table, control, partition_interval, premake, retention,
                                      retention_keep_table, retention_keep_index, automatic_maintenance
                                      FROM partman.part_config ORDER BY 1""").fetchall()
    return out


def partman_config(c: psycopg.Connection) -> list[tuple]:
    """pg_partman's settings of the queues and its template tables' columns (outside schema pgmq,
    so not in the catalog snapshot)."""
    if not c.execute("SELECT to_regclass('partman.part_config')").fetchone()[0]:
        return []
    return c.execute("""SELECT p.parent_table, p.control, p.partition_interval, p.premake, p.retention,
                               p.retention_keep_table, p.retention_keep_index, p.automatic_maintenance,
                               p.infinite_time_partitions, p.template_table,
                               (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                                WHERE a.attrelid = p.template_table::regclass AND a.attnum > 0
                                  AND NOT a.attisdropped)
                        FROM partman.part_config p ORDER BY 1""").fetchall()


def assert_same(a, b, names=("migrated", "fresh")):
    diff = differences(a, b, names)
    assert not diff, "catalogs differ:\n" + "\n".join(diff)


def check_migrated(c: psycopg.Connection, dsn: str, rows: dict, before: dict, app: str) -> None:
    """Messages, ids, settings and grants are kept; upstream's client and our features work."""
    assert upstream_rows(c) == rows
    after = state(c)
    # the grants to the queue's owner (app) are new: it held the tables before
    after["grants"] = [g for g in after["grants"] if g[1] != app]
    assert after == before
    assert column(c, "SELECT queue_name FROM pgmq.queue_owners WHERE owner = %s", (app,)) == ["apps"]
    assert scalar(c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmq'::regnamespace "
                     "AND relname ~ '^[qa]_' AND relkind = 'r' AND relowner <> 'postgres'::regrole") == 0
    # msg_ids continue where they were
    last = max(r[0] for r in rows["q_plain"] + rows["a_plain"])
    assert scalar(c, "SELECT pgmq.send('plain', '{\"after\": 1}'::jsonb)") == last + 1
    # leased messages stay invisible; visible ones and the new one are read
    leased = {r[0] for r in rows["q_plain"] if r[1] > 0}
    got = column(c, "SELECT msg_id FROM pgmq.read('plain', 30, 10)")
    assert last + 1 in got and not leased & set(got) and len(got) == 3  # 4, the routed one, the new one
    # priority: lower first, ahead of older messages
    c.execute("SELECT pgmq.send('unlogged', '{\"late\": 1}'::jsonb, '{\"x-pgmq-priority\": -1}'::jsonb)")
    assert column(c, "SELECT message FROM pgmq.read('unlogged', 30, 5)") == [{"late": 1}, {"u": 1}]
    # a retry policy with a dead-letter queue
    c.execute("SELECT pgmq.set_retry_policy('work', 0, 0, 1, NULL, 'dlq')")
    (wid,) = column(c, "SELECT msg_id FROM pgmq.read('work', 300, 1)")
    assert scalar(c, "SELECT pgmq.nack('work', %s, 'boom')", (wid,)) is True
    assert column(c, "SELECT message FROM pgmq.read('dlq', 30, 5)") == [{"l": 1}]  # from the topic
    # FIFO reads on the replaced index
    assert [m["f"] for m in column(c, "SELECT message FROM pgmq.read_grouped('fifo', 30, 5)")] == [1, 2]
    # an exchange publish, and topics through the same engine
    c.execute("SELECT pgmq.create_exchange('orders', 'direct')")
    c.execute("SELECT pgmq.bind_queue('fifo', 'orders', 'eu')")
    assert column(c, "SELECT queue_name FROM pgmq.publish('orders', 'eu', '{\"o\": 1}')") == ["fifo"]
    assert scalar(c, "SELECT pgmq.send_topic('logs.x', '{}'::jsonb)") == 2
    # pgpro_queue's transactional read
    assert scalar(c, "SELECT pgmq.read_message('MixedCase')") == {"m": 1}
    if "q_parted" in rows:
        last = max(r[0] for r in rows["q_parted"] + rows["a_parted"])
        assert scalar(c, "SELECT pgmq.send('parted', '{}'::jsonb)") == last + 1
        # pg_partman goes on making partitions (from the template that has our column)
        partitions = scalar(c, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgmq.q_parted'::regclass")
        c.execute("SELECT pgmq.send_batch('parted', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 40)))")
        c.execute("SELECT pgmq.run_partition_maintenance('parted')")
        assert scalar(c, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgmq.q_parted'::regclass") > partitions
        assert scalar(c, "SELECT count(*) FROM pgmq.q_parted_default") == 0
    # insert notifications, with the queue name as given (upstream 1.13.0 never sent these)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pgmq.q_MixedCase.INSERT"')
        c.execute("SELECT pgmq.send('MixedCase', '{\"n\": 2}'::jsonb)")
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == ["pgmq.q_MixedCase.INSERT"]
    # upstream's own Python client
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    client = pgmq_client.PGMQueue(host=info["host"], port=str(info["port"]), database=info["dbname"],
                                  username=info["user"], password="unused", init_extension=False, pool_size=1)
    try:
        assert {q.queue_name for q in client.list_queues()} >= {"plain", "fifo", "MixedCase", "apps"}
        one = client.send("apps", {"c": 1})
        assert one == max(r[0] for r in rows["q_apps"] + rows["a_apps"]) + 1
        msg = client.read("apps", vt=30)
        assert msg.message == {"a": 1} and msg.read_ct == 1
        assert client.archive("apps", msg.msg_id) is True
        assert client.metrics("apps").queue_length == 1
        assert client.send_topic("logs.y", {"t": 1}) == 2
        client.enable_notify("apps", throttle_interval_ms=10)
        assert client.drop_queue("unlogged") is True
    finally:
        client.close()


def install_upstream(c_dsn: str, how: str, version: str) -> None:
    with psycopg.connect(c_dsn, autocommit=True) as c:
        if how == "extension":
            c.execute(f"CREATE EXTENSION pgmq VERSION '{version}'")
        else:
            c.execute(UPSTREAM_SQL)  # as pgmq-py's installer and managed databases do


def as_1_13_1(c: psycopg.Connection) -> None:
    """1.13.1 differs from 1.13.0 in two routine bodies (notify_queue_listeners, enable_notify_insert)
    and in the notify triggers, which pass the queue name as an argument: made so here, with a
    trigger function of ours that reads the argument as 1.13.1's does (migrate tells the two
    versions apart by that)."""
    c.execute("""CREATE OR REPLACE FUNCTION pgmq.notify_queue_listeners() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     PERFORM pg_notify('pgmq.q_' || coalesce(TG_ARGV[0], substring(TG_TABLE_NAME FROM 3)) || '.INSERT', NULL);
                     RETURN NEW;
                 END $$""")
    for name, table in c.execute("SELECT queue_name, pgmq.format_table_name(queue_name, 'q') "
                                 "FROM pgmq.notify_insert_throttle").fetchall():
        c.execute(sql.SQL("DROP TRIGGER trigger_notify_queue_insert_listeners ON pgmq.{}").format(
            sql.Identifier(table)))
        c.execute(sql.SQL("CREATE CONSTRAINT TRIGGER trigger_notify_queue_insert_listeners AFTER INSERT ON "
                          "pgmq.{} DEFERRABLE FOR EACH ROW EXECUTE PROCEDURE pgmq.notify_queue_listeners({})")
                  .format(sql.Identifier(table), sql.Literal(name)))


ROUTES = [  # (upstream's install, its version, our target)
    ("extension", "1.13.0", "extension"),
    ("extension", "1.13.1", "extension"),
    ("sql", "1.13.0", "extension"),
    ("sql", "1.13.0", "standalone"),
    ("sql", "1.13.1", "standalone"),
]


@pytest.mark.parametrize(("how", "version", "target"), ROUTES)
def test_migrated_upstream_equals_a_fresh_install(dbs, roles, partman_available, upstream_extension,
                                                  how, version, target):
    a, b = dbs.create("upstream"), dbs.create("fresh")
    if how == "extension":
        upstream_extension(version)
    install_upstream(a, how, version)
    with connected(a) as c:
        fill(c, roles, partman_available)
        if version == "1.13.1":
            as_1_13_1(c)
        rows, before = upstream_rows(c), state(c)
        assert sum(map(len, rows.values())) > 15 and before["topics"] and before["throttles"]
        assert len(before["notify_triggers"]) == 2
    if how == "extension":
        with connected(a) as c:
            # through the bridge to 1.13.x, then the one step from upstream
            assert scalar(c, "SELECT path FROM pg_catalog.pg_extension_update_paths('pgmq') "
                             "WHERE source = %s AND target = %s", (version, NEW)) == f"{version}--1.13.x--{NEW}"
            c.execute("ALTER EXTENSION pgmq UPDATE")
            assert scalar(c, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") == NEW
    else:
        out = []
        result = migrate.migrate(a, target=target, echo=out.append)
        assert (result.found.version, result.target, result.dry_run) == (version, target, False)
        assert "Committing ..." in out and any('adopting queue "parted"' in line for line in out) == \
            partman_available
    with connected(a) as c:
        migrated, migrated_partman = snapshot(c, rows=True), partman_config(c)
    with connected(b) as c:
        if target == "extension":
            c.execute("CREATE EXTENSION pgmq")
        else:
            c.close()
            install.apply_standalone(b)
    with connected(b) as c:
        fill(c, roles, partman_available)
        fresh, fresh_partman = snapshot(c, rows=True), partman_config(c)
    assert migrated_partman == fresh_partman
    assert migrated["relations"]["q_plain"] and migrated["routines"]
    assert bool(migrated["extension"]) == (target == "extension")
    assert migrated["relations"]["topic_bindings"]["kind"] == "v"
    # Nothing differs: queue tables, indexes (FIFO, priority, partitions'), triggers, grants,
    # catalog rows (timestamps aside) are those our functions make.
    assert_same(migrated, fresh)
    with connected(a) as c:
        check_migrated(c, a, rows, before, roles[1])


def test_migrate_cli_dry_run_changes_nothing_and_prints_the_plan(dbs, roles, partman_available):
    a = dbs.create("dry")
    install_upstream(a, "sql", UPSTREAM_VERSION)
    with connected(a) as c:
        fill(c, roles, partman_available)
        before, rows = snapshot(c, rows=True), upstream_rows(c)
    for target in ("extension", "standalone"):
        result = run_cli("migrate", "--dsn", a, "--dry-run", "--to", target)
        assert result.exit_code == 0, result.output
        out = result.output
        assert f"Found upstream PGMQ {UPSTREAM_VERSION} (SQL-only install, no extension)" in out
        assert re.search(r"\n  plain +plain +5 message\(s\), 1 archived, tables owned by postgres\n", out)
        assert "move 2 topic binding(s) into exchange 'pgmq.topic'" in out
        assert "re-create the insert-notification trigger of mixedcase, plain" in out
        assert "replace the FIFO index (upstream's GIN) of fifo by ours" in out
        assert ("CREATE EXTENSION pgmq" in out) == (target == "extension")
        assert out.rstrip().endswith("Dry run: nothing was changed.")
        with connected(a) as c:
            assert_same(snapshot(c, rows=True), before, ("after the dry run", "before"))
            assert upstream_rows(c) == rows


def test_a_failed_migration_changes_nothing(dbs, roles, partman_available, upstream_extension):
    """A table our script creates (midway, after upstream's routines are gone) already exists:
    everything is rolled back, upstream's install is intact and still works."""
    plant = "CREATE TABLE pgmq.queue_settings (x int)"
    upstream_extension(UPSTREAM_VERSION)
    for how in ("extension", "sql"):
        a = dbs.create(f"failed_{how}")
        install_upstream(a, how, UPSTREAM_VERSION)
        with connected(a) as c:
            fill(c, roles, partman_available)
            c.execute(plant)
            before, rows = snapshot(c, rows=True), upstream_rows(c)
            assert before["routines"]["read(queue_name text, vt integer, qty integer, conditional jsonb)"]
        if how == "extension":
            with connected(a) as c, pytest.raises(psycopg.errors.DuplicateTable):
                c.execute("ALTER EXTENSION pgmq UPDATE")
        else:
            for target in ("extension", "standalone"):
                result = run_cli("migrate", "--dsn", a, "--to", target)
                assert result.exit_code == 1
                assert "failed and was rolled back, nothing was changed" in result.output
                assert 'relation "queue_settings" already exists' in result.output
        with connected(a) as c:
            assert_same(snapshot(c, rows=True), before, ("after the failed migration", "before"))
            assert upstream_rows(c) == rows
            assert column(c, "SELECT msg_id FROM pgmq.read('work', 30, 1)") == [1]  # upstream's read


@pytest.mark.parametrize(("setup", "message"), [
    ("", "schema pgmq does not exist"),
    ("CREATE EXTENSION pgmq", f"pgmq {NEW} is already this project's extension"),
    ("STANDALONE", f"already holds this project's pgmq {NEW} (standalone)"),
    ("UPSTREAM; DROP FUNCTION pgmq.read_grouped_head_with_poll(text, integer, integer, integer, integer)",
     "unknown or older PGMQ (missing 1 routines of 1.13"),
    ("CREATE SCHEMA pgmq; CREATE FUNCTION pgmq.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
     "holds no PGMQ routines"),
])
def test_migrate_refuses_what_is_not_upstream_1_13(dbs, setup, message):
    a = dbs.create("refuse")
    if setup == "STANDALONE":
        install.apply_standalone(a)
    elif setup:
        with connected(a) as c:
            c.execute(setup.replace("UPSTREAM", UPSTREAM_SQL))
    with connected(a) as c:
        before = snapshot(c, rows=True)
    result = run_cli("migrate", "--dsn", a)
    assert result.exit_code == 1 and message in result.output, result.output
    with connected(a) as c:
        assert snapshot(c, rows=True) == before


@pytest.mark.parametrize("at_bridge", [False, True])
def test_upstream_extension_through_migrate_and_refused_standalone(dbs, roles, upstream_extension, at_bridge):
    """Upstream's extension, or one updated to the bridge's version 1.13.x only (ALTER EXTENSION
    pgmq UPDATE TO '1.13.x': still upstream's objects, under our name for its version)."""
    upstream_extension(UPSTREAM_VERSION)
    a = dbs.create("ext_cli")
    install_upstream(a, "extension", UPSTREAM_VERSION)
    with connected(a) as c:
        c.execute("SELECT pgmq.create('keep'); SELECT pgmq.send('keep', '{\"k\": 1}'::jsonb)")
        if at_bridge:
            c.execute("ALTER EXTENSION pgmq UPDATE TO '1.13.x'")
    result = run_cli("migrate", "--dsn", a, "--to", "standalone")
    assert result.exit_code == 1 and "--to standalone needs an SQL-only install" in result.output
    result = run_cli("migrate", "--dsn", a)
    assert result.exit_code == 0, result.output
    how = "extension at version 1.13.x" if at_bridge else "extension"
    assert f"Found upstream PGMQ {UPSTREAM_VERSION} ({how})" in result.output
    scripts = f"pgmq--1.13.x--{NEW}.sql" if at_bridge else f"pgmq--{UPSTREAM_VERSION}--1.13.x.sql, pgmq--1.13.x--{NEW}.sql"
    assert f"ALTER EXTENSION pgmq UPDATE TO '{NEW}' (scripts {scripts})" in result.output
    with connected(a) as c:
        assert scalar(c, "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'") == NEW
        assert column(c, "SELECT message FROM pgmq.read('keep', 30, 1)") == [{"k": 1}]


@pytest.fixture
def path_extension():
    """Extension pgmq_paths in the server's extension directory (removed afterwards): a control
    file and empty scripts with the names given (pgmq--A--B.sql becomes pgmq_paths--A--B.sql).
    PostgreSQL chooses an update path by the names of the scripts alone."""
    dest, written = install.sharedir() / "extension", []

    def write(names: list[str]) -> None:
        for name in ["pgmq_paths.control", *(n.replace("pgmq--", "pgmq_paths--", 1) for n in names)]:
            path = dest / name
            path.write_text(f"default_version = '{NEW}'\n" if name.endswith(".control") else "")
            written.append(path)

    yield write
    for path in written:
        path.unlink(missing_ok=True)


def test_the_update_from_upstream_takes_the_bridge_whatever_else_the_directory_holds(conn, path_extension):
    """A shared extension directory may hold upstream's own scripts (its install scripts, its
    steps 1.12.0 -> 1.13.0 -> 1.13.1) and the steps from upstream an earlier install of ours
    left there (pgmq--1.13.0--2.11.0.sql, make install removes nothing): the update from
    upstream still runs the bridge and the one step from upstream. PostgreSQL takes the shortest
    chain of scripts; 1.13.0 -> 2.11.0 -> 2.12.0 is as short, and of two such chains it takes the
    one whose last step starts at the name that sorts first (1.13.x before 2.11.0). That rule is
    not documented, but either chain is a tested upgrade."""
    ours = [p.name for p in install.extension_files() if p.suffix == ".sql"]
    upstreams = ["pgmq--1.12.0.sql", "pgmq--1.12.0--1.13.0.sql", "pgmq--1.13.0--1.13.1.sql",
                 "pgmq--1.13.0.sql", "pgmq--1.13.1.sql"]
    leftovers = sorted(n for r in MANIFEST.released for n in r.scripts if n.startswith("pgmq--1.13."))
    assert {"pgmq--1.13.1--2.11.0.sql", "pgmq--1.13.x--2.12.0.sql"} <= set(leftovers)
    path_extension(ours + upstreams + leftovers)
    paths = dict(conn.execute("SELECT source, path FROM pg_catalog.pg_extension_update_paths('pgmq_paths') "
                              "WHERE target = %s AND path IS NOT NULL", (NEW,)).fetchall())
    assert paths["1.13.0"] == f"1.13.0--1.13.x--{NEW}" and paths["1.13.1"] == f"1.13.1--1.13.x--{NEW}"
    assert paths["1.12.0"] == f"1.12.0--1.13.0--1.13.x--{NEW}"
    assert paths["1.13.x"] == f"1.13.x--{NEW}"
    # our own versions keep the chain, from the oldest release of the window; the releases
    # before it have no path in what make install ships (make install-retired adds theirs)
    previous, oldest = MANIFEST.released[-1].version, MANIFEST.released_versions[-MANIFEST.window]
    assert paths[previous] == f"{previous}--{NEW}" and paths[oldest].count("--") == MANIFEST.window
    assert MANIFEST.retired_versions and not set(MANIFEST.retired_versions) & set(paths)


def test_the_standalone_script_refuses_the_wrong_database(dbs):
    """Run by hand (psql -1 -f), the standalone step checks where it is."""
    script = (extension_dir() / f"pgmq-standalone--1.13.x--{NEW}.sql").read_text()
    a = dbs.create("wrong")
    install.apply_standalone(a)
    with contextlib.closing(psycopg.connect(a)) as c, \
            pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="already holds pgmq"):
        c.execute(script)
    b = dbs.create("older")
    with connected(b) as c:
        c.execute(UPSTREAM_SQL)
        c.execute("DROP FUNCTION pgmq.create_partitioned(text, text, text, integer)")
    with contextlib.closing(psycopg.connect(b)) as c, \
            pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                          match="does not hold upstream PGMQ 1.13.0 or 1.13.1: pgmq.create_partitioned"):
        c.execute(script)


def test_a_failure_in_the_second_part_undoes_the_first(dbs, roles):
    """--to extension fails after the standalone step has run (a function of the user's returns
    pgmq.message_record, which CREATE EXTENSION needs to re-create): the one transaction is rolled
    back whole, so upstream is intact; --to standalone keeps upstream's types and succeeds."""
    a = dbs.create("second")
    install_upstream(a, "sql", UPSTREAM_VERSION)
    with connected(a) as c:
        fill(c, roles, partman=False)
        c.execute("CREATE FUNCTION public.peek(q text) RETURNS SETOF pgmq.message_record LANGUAGE sql "
                  "AS 'SELECT * FROM pgmq.read(q, 0, 1)'")
        before, rows = snapshot(c, rows=True), upstream_rows(c)
    out: list[str] = []
    with pytest.raises(migrate.MigrateError, match=r"(?s)rolled back, nothing was changed: cannot drop"
                                                   r".*public.peek\(text\) depends on type pgmq.message_record"):
        migrate.migrate(a, target="extension", echo=out.append)
    assert "Making the extension own our objects ..." in out  # the first part had run
    with connected(a) as c:
        assert_same(snapshot(c, rows=True), before, ("after the failed migration", "before"))
        assert upstream_rows(c) == rows
    migrate.migrate(a, target="standalone", echo=out.append)
    with connected(a) as c:
        assert upstream_rows(c) == rows
        assert column(c, "SELECT msg_id FROM public.peek('fifo')") == [1]
