"""The routine part of the generator against a real server, whatever today's step contains: a
synthetic pair of versions (the released standalone script plus routines to drop, replace,
drop and re-create, and create, with comments and grants; the current standalone script with
one real routine edited and the new forms of those routines) is upgraded with the generated
standalone upgrade script and compared with a fresh install of the new version."""

from __future__ import annotations

import dataclasses
import uuid

import psycopg
import pytest

from pgmq_build import history, install, render, upgrade
from pgmq_build.catalog import differences, snapshot
from pgmq_build.lint import lint_script
from pgmq_build.manifest import MANIFEST, policies
from tests.helpers import scalar
from tests.upgrade.scenario import connected, populate, queue_rows, without_counts

pytestmark = pytest.mark.slow

PIN = "SET search_path = pg_catalog, pg_temp"
OLD = MANIFEST.released_versions[-1]


def routine(head: str, body: str, returns: str | None = "integer", volatility: str = "IMMUTABLE") -> str:
    if returns is None:
        return f"CREATE PROCEDURE pgmq.{head}\nLANGUAGE sql\n{PIN}\nAS $fn$ {body} $fn$;\n"
    return f"CREATE FUNCTION pgmq.{head}\nRETURNS {returns}\nLANGUAGE sql\n{volatility}\n{PIN}\nAS $fn$ {body} $fn$;\n"


def old_extra(role: str) -> str:
    return "\n".join([
        routine("syn_gone()", "SELECT 1"),
        routine("syn_body(n integer)", "SELECT n"),
        "COMMENT ON FUNCTION pgmq.syn_body(integer) IS 'old comment';",
        routine("syn_acl(n integer)", "SELECT n"),
        "REVOKE ALL ON FUNCTION pgmq.syn_acl(integer) FROM PUBLIC;",
        f"GRANT EXECUTE ON FUNCTION pgmq.syn_acl(integer) TO {role} WITH GRANT OPTION;",
        routine("syn_retype(n integer)", "SELECT n"),
        "COMMENT ON FUNCTION pgmq.syn_retype(integer) IS 'retype';",
        routine("syn_rename(a integer)", "SELECT a"),
        routine("syn_default(a integer, b integer DEFAULT 1)", "SELECT a + b"),
        routine("syn_proc(n integer)", "SELECT n", returns=None),
        "REVOKE ALL ON PROCEDURE pgmq.syn_proc(integer) FROM PUBLIC;",
        routine("syn_same(n integer)", "SELECT n"),
        "COMMENT ON FUNCTION pgmq.syn_same(integer) IS 'was';",
        "REVOKE ALL ON FUNCTION pgmq.syn_same(integer) FROM PUBLIC;",
    ]) + "\n"


def new_extra(role: str) -> str:
    return "\n".join([
        routine("syn_new(n integer)", "SELECT n * 3"),
        "COMMENT ON FUNCTION pgmq.syn_new(integer) IS 'new';",
        f"GRANT EXECUTE ON FUNCTION pgmq.syn_new(integer) TO {role};",
        routine("syn_body(n integer)", "SELECT n + 1", volatility="STABLE"),  # comment removed
        routine("syn_acl(n integer)", "SELECT n + 1"),  # PUBLIC back, the grant option gone
        f"GRANT EXECUTE ON FUNCTION pgmq.syn_acl(integer) TO {role};",
        routine("syn_retype(n integer)", "SELECT n::bigint", returns="bigint"),
        "COMMENT ON FUNCTION pgmq.syn_retype(integer) IS 'retyped';",
        routine("syn_rename(b integer)", "SELECT b"),
        routine("syn_default(a integer, b integer)", "SELECT a + b"),
        routine("syn_proc(n integer)", "SELECT n + 1", returns=None),
        "COMMENT ON PROCEDURE pgmq.syn_proc(integer) IS 'proc';",
        routine("syn_same(n integer)", "SELECT n"),  # only its comment and ACL change
        "COMMENT ON FUNCTION pgmq.syn_same(integer) IS 'is';",
    ]) + "\n"


# The manifest with policy entries for the synthetic routines (the lint checks the upgrade script
# with it).
MANIFEST_SYN = dataclasses.replace(MANIFEST, routines=MANIFEST.routines + policies(
    "syn_new", "syn_body", "syn_acl", "syn_retype", "syn_rename", "syn_default", "syn_proc", "syn_same"))

# A real routine whose body changes (CREATE OR REPLACE of a routine that queues use).
REAL_HEAD = "CREATE FUNCTION pgmq.validate_queue_name(queue_name text)\n"


def edit_real_routine(sql: str) -> str:
    """A new first line in validate_queue_name's body."""
    assert sql.count(REAL_HEAD) == 1
    at = sql.index("BEGIN\n", sql.index(REAL_HEAD)) + len("BEGIN\n")
    return sql[:at] + "    -- a new line in the body\n" + sql[at:]






@pytest.fixture
def synthetic_versions():
    """Two made-up extension versions installed into the server's extension directory for one
    test (removed afterwards): (old version, new version, write(name, text))."""
    tag = uuid.uuid4().hex[:6]
    dest, written = install.sharedir() / "extension", []

    def write(name: str, text: str) -> None:
        (dest / name).write_text(text)
        written.append(dest / name)

    yield f"0.0.1syn{tag}", f"0.0.2syn{tag}", write
    for path in written:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("target", render.TARGETS)
def test_generated_routine_changes_make_an_upgraded_database_equal_a_fresh_one(dbs, role, target,
                                                                                synthetic_versions):
    old_sql = history.find(render.install_name(OLD, target)).read_text() + old_extra(role)
    new_sql = render.render_install(MANIFEST, target)
    new_sql = edit_real_routine(new_sql) + new_extra(role)
    script = render.render_upgrade(MANIFEST, OLD, MANIFEST.version, target, old_sql, new_sql)

    plan = upgrade.plan_routines(old_sql, new_sql)
    # the synthetic routines and the edited real one (the real step changes others as well)
    changes = {k[1]: c for k, c in plan.changes.items() if k[1].startswith("syn_") or k[1] == "validate_queue_name"}
    assert changes == {
        "syn_gone": "gone", "syn_new": "new", "syn_body": "replace", "syn_acl": "replace",
        "syn_retype": "drop-create", "syn_rename": "drop-create", "syn_default": "drop-create",
        "syn_proc": "replace", "syn_same": "same", "validate_queue_name": "replace"}
    assert "\nCREATE OR REPLACE FUNCTION pgmq.validate_queue_name(queue_name text)\n" in script
    assert "GRANT EXECUTE ON FUNCTION pgmq.syn_acl(integer) TO PUBLIC;" in script
    assert lint_script(script, MANIFEST_SYN, target, previous=old_sql) == []

    a, b = dbs.create("syn_up"), dbs.create("syn_fresh")
    if target == "extension":  # CREATE EXTENSION / ALTER EXTENSION ... UPDATE TO the made-up versions
        v1, v2, write = synthetic_versions
        write(f"pgmq--{v1}.sql", old_sql)
        write(f"pgmq--{v2}.sql", new_sql)
        write(f"pgmq--{v1}--{v2}.sql", script)
        install_old, install_new = f"CREATE EXTENSION pgmq VERSION '{v1}'", f"CREATE EXTENSION pgmq VERSION '{v2}'"
        run_upgrade = f"ALTER EXTENSION pgmq UPDATE TO '{v2}'"
    else:
        install_old, install_new, run_upgrade = old_sql, new_sql, script
    with psycopg.connect(a) as c:
        c.execute(install_old)
    with connected(a) as c:
        populate(c, role, partman=False)
        before = queue_rows(c)
    with psycopg.connect(a) as c:
        c.execute(run_upgrade)
    with psycopg.connect(b) as c:
        c.execute(install_new)
    with connected(b) as c:
        populate(c, role, partman=False)
        fresh = snapshot(c, rows=True)
    with connected(a) as c:
        upgraded = snapshot(c, rows=True)
        assert queue_rows(c) == before
        assert scalar(c, "SELECT pgmq.syn_retype(2)") == 2
        assert scalar(c, "SELECT pgmq.syn_new(2)") == 6
        assert scalar(c, "SELECT pgmq.syn_rename(b => 4)") == 4
    diff = differences(without_counts(upgraded), without_counts(fresh), ("upgraded", "fresh"))
    assert not diff, "catalogs differ:\n" + "\n".join(diff)
    # the pieces the generator had to get right are really there
    r = fresh["routines"]
    assert r["syn_acl(n integer)"]["acl"] == sorted(
        ["<installer>=EXECUTE/<installer>", "PUBLIC=EXECUTE/<installer>", f"{role}=EXECUTE/<installer>"])
    assert r["syn_body(n integer)"]["comment"] is None and r["syn_same(n integer)"]["comment"] == "is"
    assert r["syn_proc(IN n integer)"]["acl"] == ["<installer>=EXECUTE/<installer>", "PUBLIC=EXECUTE/<installer>"]
    assert "syn_gone()" not in r and r["syn_retype(n integer)"]["result"] == "bigint"
    if target == "extension":
        members = upgraded["extension_members"]
        assert "function pgmq.syn_new(integer)" in members and "function pgmq.syn_retype(integer)" in members
        assert "function pgmq.syn_gone()" not in members
