"""The routine part of upgrade scripts (pgmq_build.upgrade), on small scripts: extraction,
classification, ACL and comment handling, statement order. No server."""

from __future__ import annotations

import pytest
from pglast import parse_sql

from pgmq_build import upgrade
from pgmq_build.upgrade import UpgradeError, classify, parse_script, plan_routines

PINNED = "SET search_path = pg_catalog, pg_temp"


def fn(name: str = "f", args: str = "a integer", returns: str = "integer", body: str = "SELECT a",
       kind: str = "FUNCTION") -> str:
    head = f"CREATE {kind} pgmq.{name}({args})"
    if kind == "FUNCTION":
        head += f"\nRETURNS {returns}\nLANGUAGE sql\nIMMUTABLE"
    else:
        head += "\nLANGUAGE sql"
    return f"{head}\n{PINNED}\nAS $fn$ {body} $fn$;\n"


def one(sql: str) -> upgrade.Routine:
    (routine,) = parse_script(sql).routines.values()
    return routine


# ------------------------------------------------------------------------------- extraction

def test_extraction_keeps_the_statement_text_and_signature():
    sql = ('\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit\n-- a comment\n'
           + fn(args="a int, b text DEFAULT 'x', OUT c bigint", returns="bigint"))
    r = one(sql)
    assert r.key == ("pgmq", "f", ("integer", "text"))
    assert r.signature == "pgmq.f(integer, text)"
    assert r.params == (("IN", "a"), ("IN", "b"), ("OUT", "c"))
    assert (r.kind, r.result, r.defaults) == ("function", "bigint", 1)
    assert r.text == fn(args="a int, b text DEFAULT 'x', OUT c bigint", returns="bigint").strip()
    assert r.text.startswith("CREATE FUNCTION") and r.text.endswith("$fn$;")


def test_extraction_of_procedures_table_results_and_quoted_names():
    s = parse_script(fn("p", "n integer DEFAULT 1", kind="PROCEDURE", body="SELECT n")
                     + fn('"Odd"', "q text", "TABLE(x integer, y text)", "SELECT 1, q"))
    p, odd = s.routines.values()
    assert (p.kind, p.result, p.keyword, p.signature) == ("procedure", None, "PROCEDURE", "pgmq.p(integer)")
    assert odd.result == "TABLE(x integer, y text)"
    assert odd.signature == 'pgmq."Odd"(text)'
    assert odd.params == (("IN", "q"), ("TABLE", "x"), ("TABLE", "y"))


def test_comments_and_acls_are_collected():
    s = parse_script(fn() + fn("g", "") .replace("SELECT a", "SELECT 1")
                     + "COMMENT ON FUNCTION pgmq.f(integer) IS 'one';\n"
                     + "COMMENT ON FUNCTION pgmq.f(int4) IS 'two';\n"
                     + "REVOKE ALL ON FUNCTION pgmq.f(integer), pgmq.g() FROM PUBLIC;\n"
                     + "GRANT EXECUTE ON FUNCTION pgmq.g TO app WITH GRANT OPTION;\n")
    f, g = (("pgmq", "f", ("integer",)), ("pgmq", "g", ()))
    assert s.comments == {f: "two"}
    assert s.acls == {f: {}, g: {"app": 2}}
    assert [st.kind for st in s.statements] == ["routine", "routine", "comment", "comment", "acl", "acl"]
    assert s.statements[4].keys == (f, g)


@pytest.mark.parametrize(("sql", "message"), [
    (fn() + fn(), "created twice"),
    ("COMMENT ON FUNCTION pgmq.f(integer) IS 'x';\n", "is not created before"),
    (fn() + "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmq TO app;\n", "ALL FUNCTIONS"),
    (fn() + "ALTER FUNCTION pgmq.f(integer) SET work_mem = '1MB';\n", "ALTER FUNCTION"),
    (fn() + "ALTER FUNCTION pgmq.f(integer) OWNER TO app;\n", "OWNER"),
    (fn().replace("pgmq.f", "f"), "not schema-qualified"),
    (fn() + "GRANT EXECUTE ON PROCEDURE pgmq.f(integer) TO app;\n", "is a function"),
    (fn() + fn(args="b text") + "COMMENT ON FUNCTION pgmq.f IS 'x';\n", "matches 2 routines"),
    ("SELEC 1;", "does not parse"),
])
def test_what_cannot_be_carried_over_is_an_error(sql, message):
    with pytest.raises(UpgradeError, match=message):
        parse_script(sql)


# ------------------------------------------------------------------------------- classification

@pytest.mark.parametrize(("old", "new", "change"), [
    (fn(), fn(), "same"),
    (fn(), fn(body="SELECT a + 1"), "replace"),
    (fn(), fn().replace("IMMUTABLE", "STABLE"), "replace"),
    (fn(args="a integer"), fn(args="a integer, b integer DEFAULT 0"), "new"),  # another identity
    (fn(args="a integer, b integer"), fn(args="a integer, b integer DEFAULT 0"), "replace"),  # default added
    (fn(args="a integer, b integer DEFAULT 0"), fn(args="a integer, b integer DEFAULT 1"), "replace"),
    (fn(args="a integer, b integer DEFAULT 0"), fn(args="a integer, b integer"), "drop-create"),
    (fn(), fn(args="x integer", body="SELECT x"), "drop-create"),  # argument renamed
    (fn(), fn(returns="bigint"), "drop-create"),
    (fn(), fn(returns="SETOF integer"), "drop-create"),
    (fn(returns="TABLE(x integer)"), fn(returns="TABLE(y integer)"), "drop-create"),
    (fn(args="a integer, OUT b integer"), fn(args="a integer, OUT c integer"), "drop-create"),
    (fn(args="a integer"), fn(args="INOUT a integer"), "drop-create"),
    (fn(), fn(kind="PROCEDURE"), "drop-create"),
])
def test_classify(old, new, change):
    o, n = parse_script(old).routines, parse_script(new).routines
    if change == "new":
        assert set(o) != set(n)
        return
    assert classify(one(old), one(new)) == change
    assert (upgrade.not_replaceable(one(old), one(new)) is None) == (change in ("same", "replace"))


def test_classify_new_and_gone():
    assert classify(None, one(fn())) == "new"
    assert classify(one(fn()), None) == "gone"
    with pytest.raises(ValueError):
        classify(None, None)


def test_or_replace_changes_only_the_keyword():
    text = one(fn(body="SELECT 'CREATE FUNCTION'")).text
    assert upgrade.or_replace(text) == text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    assert upgrade.or_replace(text).count("CREATE") == 2
    with pytest.raises(UpgradeError):
        upgrade.or_replace("CREATE TABLE pgmq.t ()")


# ------------------------------------------------------------------------------- plans

G = "pgmq.g(integer)"


def test_nothing_changed_is_an_empty_plan():
    sql = fn() + "COMMENT ON FUNCTION pgmq.f(integer) IS 'x';\nREVOKE ALL ON FUNCTION pgmq.f(integer) FROM PUBLIC;\n"
    p = plan_routines(sql, sql)
    assert p.statements == () and p.sql == ""
    assert p.changes == {("pgmq", "f", ("integer",)): "same"}


def test_every_kind_of_change_in_order():
    old = (fn("gone") + fn("keep") + fn("edit") + fn("retype")
           + "COMMENT ON FUNCTION pgmq.retype(integer) IS 'old';\n")
    new = (fn("added") + fn("keep") + fn("retype", returns="bigint")
           + "COMMENT ON FUNCTION pgmq.retype(integer) IS 'new';\n"
           + fn("edit", body="SELECT a * 2") + "COMMENT ON FUNCTION pgmq.edit(integer) IS 'e';\n")
    p = plan_routines(old, new)
    assert {k[1]: c for k, c in p.changes.items()} == {
        "gone": "gone", "keep": "same", "edit": "replace", "retype": "drop-create", "added": "new"}
    assert p.reasons == {("pgmq", "retype", ("integer",)): "result changed from integer to bigint"}
    heads = [s.split("\n")[0] for s in p.statements]
    assert heads == [
        "DROP FUNCTION pgmq.retype(integer);",  # drops first, reverse order of the old script
        "DROP FUNCTION pgmq.gone(integer);",
        "CREATE FUNCTION pgmq.added(a integer)",  # then the new script's order
        "CREATE FUNCTION pgmq.retype(a integer)",
        "COMMENT ON FUNCTION pgmq.retype(integer) IS 'new';",
        "CREATE OR REPLACE FUNCTION pgmq.edit(a integer)",
        "COMMENT ON FUNCTION pgmq.edit(integer) IS 'e';",
    ]
    # the emitted text is the install script's, not a deparse
    assert p.statements[5] == "CREATE OR REPLACE " + one(fn("edit", body="SELECT a * 2")).text[len("CREATE "):]
    assert list(upgrade.describe(p)) == [
        "gone: pgmq.gone(integer)", "replace: pgmq.edit(integer)",
        "drop-create: pgmq.retype(integer) (result changed from integer to bigint)", "new: pgmq.added(integer)"]


def test_a_comment_that_changed_on_an_unchanged_routine_is_emitted():
    old = fn() + "COMMENT ON FUNCTION pgmq.f(integer) IS 'old';\n"
    new = fn() + "COMMENT ON FUNCTION pgmq.f(integer) IS 'new';\n"
    assert plan_routines(old, new).statements == ("COMMENT ON FUNCTION pgmq.f(integer) IS 'new';",)
    assert plan_routines(old, fn()).statements == ("COMMENT ON FUNCTION pgmq.f(integer) IS NULL;",)
    assert plan_routines(old, fn(body="SELECT 2")).statements[-1] == "COMMENT ON FUNCTION pgmq.f(integer) IS NULL;"


# ------------------------------------------------------------------------------- ACLs

REVOKE = "REVOKE ALL ON FUNCTION pgmq.f(integer) FROM PUBLIC;\n"
GRANT_APP = "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO app;\n"


@pytest.mark.parametrize(("acl", "stmt", "after"), [
    ({"PUBLIC": 1}, "REVOKE ALL ON FUNCTION pgmq.f(integer) FROM PUBLIC", {}),
    ({}, "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC", {"PUBLIC": 1}),
    ({}, "GRANT ALL ON FUNCTION pgmq.f(integer) TO \"App\", b WITH GRANT OPTION", {"App": 2, "b": 2}),
    ({"b": 2}, "REVOKE GRANT OPTION FOR EXECUTE ON FUNCTION pgmq.f(integer) FROM b", {"b": 1}),
    ({"b": 1}, "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO b", {"b": 1}),
    ({"b": 2}, "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO b", {"b": 2}),
    ({}, "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO CURRENT_ROLE", {"CURRENT_ROLE": 1}),
])
def test_apply_grant(acl, stmt, after):
    assert upgrade.apply_grant(acl, parse_sql(stmt)[0].stmt) == after


def test_acl_fix_statements():
    r = one(fn())
    assert upgrade.acl_fix(r, {}, {"PUBLIC": 1}) == ["GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC;"]
    assert upgrade.acl_fix(r, {"PUBLIC": 1, "x": 1}, {"x": 1}) == ["REVOKE ALL ON FUNCTION pgmq.f(integer) FROM PUBLIC;"]
    assert upgrade.acl_fix(r, {"Odd Role": 2}, {"Odd Role": 1}) == [
        'REVOKE GRANT OPTION FOR EXECUTE ON FUNCTION pgmq.f(integer) FROM "Odd Role";']
    assert upgrade.acl_fix(r, {}, {"a": 2}) == ["GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO a WITH GRANT OPTION;"]
    p = one(fn("p", kind="PROCEDURE"))
    assert upgrade.acl_fix(p, {"PUBLIC": 1}, {}) == ["REVOKE ALL ON PROCEDURE pgmq.p(integer) FROM PUBLIC;"]


def test_a_replaced_routine_gets_public_execute_back():
    # CREATE OR REPLACE keeps the old ACL: the revoke of the old version must be undone
    p = plan_routines(fn() + REVOKE, fn(body="SELECT 2"))
    assert p.statements[1:] == ("GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC;",)


def test_an_unchanged_routine_gets_its_new_acl():
    assert plan_routines(fn() + REVOKE, fn()).statements == (
        "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC;",)
    assert plan_routines(fn(), fn() + REVOKE + GRANT_APP).statements == (
        "REVOKE ALL ON FUNCTION pgmq.f(integer) FROM PUBLIC;", "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO app;")


def test_a_replaced_routine_replays_the_new_grants_then_fixes_the_rest():
    p = plan_routines(fn() + REVOKE + GRANT_APP, fn(body="SELECT 2") + GRANT_APP)
    assert p.statements[1:] == (GRANT_APP.strip(), "GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC;")
    # the same ACL in both versions: the replayed statements are all there is
    p = plan_routines(fn() + REVOKE, fn(body="SELECT 2") + REVOKE)
    assert p.statements[1:] == (REVOKE.strip(),)


def test_a_created_routine_gets_the_new_scripts_statements_only():
    p = plan_routines(fn() + REVOKE, fn(returns="bigint") + GRANT_APP)
    assert [s.split("\n")[0] for s in p.statements] == [
        "DROP FUNCTION pgmq.f(integer);", "CREATE FUNCTION pgmq.f(a integer)", GRANT_APP.strip()]


def test_a_grant_naming_a_changed_and_an_unchanged_routine():
    g_old, g_new = fn("g").replace("SELECT a", "SELECT 1"), fn("g").replace("SELECT a", "SELECT 1")
    both = "REVOKE ALL ON FUNCTION pgmq.f(integer), pgmq.g(integer) FROM PUBLIC;\n"
    p = plan_routines(fn() + g_old, fn(body="SELECT 2") + g_new + both)
    # replayed for f (emitted) which also revokes g: nothing more is needed for either
    assert p.statements[1:] == (both.strip(),)
    p = plan_routines(fn() + g_old + both, fn(body="SELECT 2") + g_new)
    assert p.statements[1:] == ("GRANT EXECUTE ON FUNCTION pgmq.f(integer) TO PUBLIC;",
                                "GRANT EXECUTE ON FUNCTION pgmq.g(integer) TO PUBLIC;")

