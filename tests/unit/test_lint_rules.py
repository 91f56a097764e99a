"""Unit tests of the PGMQ0xx lint rules: one passing and one or more failing SQL cases per rule.

Scripts are built from a small base script that lints clean against a small manifest; each case
changes one piece of it.
"""

from __future__ import annotations

import dataclasses

import pytest
from pglast import parse_sql

from pgmq_build.lint import Problem, lint_script
from pgmq_build.lint.codes import CODES
from pgmq_build.lint.rules import RULES
from pgmq_build.lint.script import upgrade_guard
from pgmq_build.lint.sqlast import (
    arguments,
    identity_args,
    parse_signature,
    result_type,
    signature,
    type_name,
)
from pgmq_build.manifest import MANIFEST, Feature, Manifest, Policy, policies
from pgmq_build.render import render_all, standalone_name

GUARD = '\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit'
PINNED = "SET search_path = pg_catalog, pg_temp"

# f is upstream's (the contract lists it), d and p are ours.
M = Manifest(
    version="9.9.9",
    schema="pgmq",
    released=(),
    features=(Feature(name="t", templates=(), config_tables=("meta",)),),
    routines=policies("f", Policy("d", definer_reason="reads the catalog"), "p"),
    contract=("function  pgmq.f(queue_name text, ids bigint[]) RETURNS SETOF pgmq.message_record",),
)

F_BODY = """BEGIN
    RETURN QUERY EXECUTE format($q$SELECT * FROM pgmq.%I WHERE msg_id = ANY($1)$q$,
                                pgmq.format_table_name(queue_name, 'q'))
    USING ids;
END;"""


def create_f(body: str = F_BODY, args: str = "queue_name text, ids bigint[]",
             head: str = "CREATE FUNCTION pgmq.f", options: str = f"VOLATILE\n{PINNED}",
             returns: str = "SETOF pgmq.message_record", language: str = "plpgsql") -> str:
    return f"{head}({args})\nRETURNS {returns}\nLANGUAGE {language}\n{options}\nAS $fn$\n{body}\n$fn$;\n"


TABLE = "CREATE TABLE pgmq.meta (queue_name text NOT NULL);\n"
DUMP = "SELECT pg_catalog.pg_extension_config_dump('pgmq.meta', '');\n"
D = f"""CREATE FUNCTION pgmq.d() RETURNS void LANGUAGE sql STABLE SECURITY DEFINER {PINNED}
AS $fn$ SELECT FROM pg_catalog.pg_class $fn$;
REVOKE ALL ON FUNCTION pgmq.d() FROM PUBLIC;
"""
P = f"""CREATE PROCEDURE pgmq.p(n integer DEFAULT 1) LANGUAGE plpgsql {PINNED}
AS $fn$ BEGIN PERFORM pg_catalog.pg_sleep(n); END $fn$;
"""


def script(f: str | None = None, d: str = D, p: str = P, table: str = TABLE + DUMP,
           head: str = GUARD + "\n", extra: str = "") -> str:
    return "-- test script\n" + head + table + (create_f() if f is None else f) + d + p + extra


def standalone(table: str = TABLE, **kw: str) -> str:
    return script(head="CREATE SCHEMA pgmq;\n", table=table, **kw)


def pl(stmt: str, declare: str = "", returns: str = "SETOF pgmq.message_record") -> str:
    """The base script with f's body replaced by one statement (and declarations)."""
    body = (f"DECLARE\n    {declare}\n" if declare else "") + f"BEGIN\n    {stmt}\nEND;"
    return script(create_f(body=body, returns=returns))


def sql_f(body: str) -> str:
    """The base script with f as a LANGUAGE sql function."""
    return script(create_f(language="sql", body=body))


def codes(sql: str, target: str = "extension", manifest: Manifest = M) -> list[str]:
    return [p.code for p in lint_script(sql, manifest, target)]


# ------------------------------------------------------------------------------- the cases

def ok(code: str, sql: str, target: str = "extension", name: str = "") -> object:
    return pytest.param(code, sql, target, False, id=f"{code}-ok{'-' + name if name else ''}")


def bad(code: str, sql: str, target: str = "extension", name: str = "") -> object:
    return pytest.param(code, sql, target, True, id=f"{code}-bad-{name}")


def opts(options: str) -> str:
    return script(create_f(options=options))


AS_FUNCTION = P.replace("PROCEDURE", "FUNCTION").replace("LANGUAGE", "RETURNS void VOLATILE LANGUAGE")
BEGIN_ATOMIC = (
    "CREATE FUNCTION pgmq.f(queue_name text, ids bigint[]) RETURNS SETOF pgmq.message_record\n"
    f"LANGUAGE sql VOLATILE {PINNED}\nBEGIN ATOMIC\n    SELECT * FROM q;\nEND;\n"
)
REVOKE_D = "REVOKE ALL ON FUNCTION pgmq.d() FROM PUBLIC;\n"
CONCAT = "'SELECT 1 FROM pgmq.' || queue_name"

CASES = [
    # PGMQ001 the script parses
    ok("PGMQ001", script()),
    ok("PGMQ001", standalone(), "standalone", name="standalone"),
    bad("PGMQ001", script(extra="SELEC 1;\n"), name="syntax"),
    bad("PGMQ001", script(extra="\\set ON_ERROR_STOP 1\n"), name="meta-command"),
    bad("PGMQ001", script(head=GUARD.replace("pgmq", "other") + "\n"), name="other-guard"),
    bad("PGMQ001", script(head=GUARD + "\n"), "standalone", name="guard-in-standalone"),
    # PGMQ002 qualified, created once, with a policy entry; every policy entry has a routine
    ok("PGMQ002", script(create_f(args="queue_name pg_catalog.text, ids int8[]")), name="spelling"),
    ok("PGMQ002", script(p=P.replace("n integer", "IN n int4")), name="in"),
    ok("PGMQ002", script(p=AS_FUNCTION), name="ours-change-kind"),
    ok("PGMQ002", script(p=P.replace("n integer DEFAULT 1", "m bigint")), name="ours-change-signature"),
    bad("PGMQ002", script(create_f(head="CREATE FUNCTION f")), name="unqualified"),
    bad("PGMQ002", script(create_f(head="CREATE FUNCTION public.f")), name="other-schema"),
    bad("PGMQ002", script(p=""), name="missing"),
    bad("PGMQ002", script(extra=P.replace("pgmq.p(", "pgmq.q(")), name="undeclared"),
    bad("PGMQ002", script(extra=create_f()), name="twice"),
    bad("PGMQ002", script(p=P.replace("DEFAULT 1", "DEFAULT -1")), name="unlistable-default"),
    bad("PGMQ002", script(p=P.replace("DEFAULT 1", "DEFAULT pg_catalog.now()")), name="call-default"),
    # PGMQ003 search_path pinned; SECURITY DEFINER only where declared
    ok("PGMQ003", script()),
    bad("PGMQ003", opts("VOLATILE"), name="no-search-path"),
    bad("PGMQ003", opts("VOLATILE SET search_path = public"), name="public"),
    bad("PGMQ003", opts("VOLATILE SET search_path = pg_temp, pg_catalog"), name="order"),
    bad("PGMQ003", opts("VOLATILE SET search_path FROM CURRENT"), name="from-current"),
    bad("PGMQ003", opts(f"VOLATILE SECURITY DEFINER {PINNED}"), name="undeclared-definer"),
    bad("PGMQ003", script(d=D.replace(" SECURITY DEFINER", "")), name="declared-definer-missing"),
    bad("PGMQ003", script(d=D.replace(REVOKE_D, "")), name="definer-not-revoked"),
    bad("PGMQ003", script(d=D.replace(REVOKE_D, REVOKE_D.replace("()", "(integer)"))),
        name="revoke-other-overload"),
    # PGMQ004 bodies compile
    ok("PGMQ004", pl("RETURN NEXT r;", declare="r pgmq.message_record;"), name="extension-type"),
    bad("PGMQ004", pl("IF THEN END IF;"), name="plpgsql-syntax"),
    bad("PGMQ004", pl("RETURN 1;", returns="void"), name="return-value-in-void"),
    bad("PGMQ004", pl("v_missing := 1;"), name="unknown-variable"),
    bad("PGMQ004", sql_f("SELEC * FROM pgmq.x"), name="sql-body"),
    # PGMQ005 dynamic SQL only through format('...%I...') or a variable
    ok("PGMQ005", script()),
    ok("PGMQ005", pl("RETURN QUERY EXECUTE format('SELECT * FROM pgmq.%1$I, pgmq.%1$I x', 'a');"),
       name="positional"),
    ok("PGMQ005", pl("EXECUTE v;", declare="v text := 'SELECT 1';"), name="variable"),
    ok("PGMQ005", pl("EXECUTE pg_catalog.format('SELECT ''100%%'' FROM pgmq.%I', 'a');"),
       name="qualified-format"),
    bad("PGMQ005", pl(f"EXECUTE {CONCAT};"), name="concat"),
    bad("PGMQ005", pl("RETURN QUERY EXECUTE format('SELECT 1 FROM pgmq.%I', 'q') || ' LIMIT 1';"),
        name="concat-format"),
    ok("PGMQ005", pl("EXECUTE format('COMMENT ON TABLE pgmq.%I IS %L', queue_name, 'x');"),
       name="L-in-ddl"),
    bad("PGMQ005", pl("EXECUTE format('DELETE FROM pgmq.q WHERE m = %L', queue_name);"), name="L"),
    bad("PGMQ005", pl("EXECUTE format('SELECT pgmq.f(%L)', queue_name);"), name="L-in-select"),
    bad("PGMQ005", pl("EXECUTE format('DELETE FROM pgmq.%s', queue_name);"), name="s"),
    bad("PGMQ005", pl("EXECUTE format('DELETE FROM pgmq.%2$s', 1, queue_name);"), name="positional-s"),
    bad("PGMQ005", pl("EXECUTE format('DELETE FROM pgmq.%-10I', queue_name);"), name="width"),
    bad("PGMQ005", pl("EXECUTE format(t, queue_name);", declare="t text := 'SELECT 1';"),
        name="variable-template"),
    bad("PGMQ005", pl(f"FOR r IN EXECUTE {CONCAT} LOOP END LOOP;", declare="r record;"), name="dynfors"),
    bad("PGMQ005", pl(f"OPEN c FOR EXECUTE {CONCAT};", declare="c refcursor;"), name="open"),
    bad("PGMQ005", pl("RETURN QUERY EXECUTE upper('select 1');"), name="other-call"),
    # PGMQ006 relations are schema-qualified
    ok("PGMQ006", pl("RETURN QUERY WITH m AS (SELECT 1 FROM pgmq.meta) SELECT * FROM m, pg_catalog.pg_class;"),
       name="cte"),
    bad("PGMQ006", pl("DELETE FROM meta;"), name="execsql"),
    bad("PGMQ006", pl("IF EXISTS (SELECT 1 FROM meta) THEN RETURN; END IF;"), name="expression"),
    bad("PGMQ006", pl("NULL;", declare="n bigint := (SELECT count(*) FROM meta);"), name="declare-default"),
    bad("PGMQ006", pl("PERFORM 1 FROM pg_class;"), name="bare-catalog"),
    bad("PGMQ006", pl("EXECUTE format('TRUNCATE %I', queue_name);"), name="format-template"),
    bad("PGMQ006", pl("EXECUTE format('SELECT (', queue_name);"), name="template-does-not-parse"),
    bad("PGMQ006", sql_f("SELECT * FROM message_table"), name="sql-body"),
    bad("PGMQ006", script(BEGIN_ATOMIC), name="begin-atomic"),
    bad("PGMQ006", script(extra="CREATE INDEX meta_idx ON meta (queue_name);\n"), name="top-level"),
    # PGMQ007 no OR REPLACE / IF NOT EXISTS at top level (function bodies are exempt)
    ok("PGMQ007", pl("EXECUTE format('CREATE TABLE IF NOT EXISTS pgmq.%I (a int)', 'x');"), name="body"),
    bad("PGMQ007", script(create_f(head="CREATE OR REPLACE FUNCTION pgmq.f")), name="or-replace"),
    bad("PGMQ007", script(table=TABLE.replace("TABLE", "TABLE IF NOT EXISTS") + DUMP), name="table"),
    bad("PGMQ007", script(extra="CREATE INDEX IF NOT EXISTS i ON pgmq.meta (queue_name);\n"), name="index"),
    bad("PGMQ007", script(extra="CREATE SCHEMA IF NOT EXISTS pgmq2;\n"), name="schema"),
    bad("PGMQ007", script(extra="CREATE SEQUENCE IF NOT EXISTS pgmq.s;\n"), name="sequence"),
    bad("PGMQ007", script(extra="CREATE OR REPLACE VIEW pgmq.v AS SELECT 1;\n"), name="view"),
    # PGMQ008 config tables are config-dumped (extension only); nothing is ADDed
    ok("PGMQ008", pl("EXECUTE format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', 'x');"), name="drop"),
    ok("PGMQ008", standalone(), "standalone", name="standalone"),
    bad("PGMQ008", script(table=TABLE), name="not-dumped"),
    bad("PGMQ008", script(table=DUMP + TABLE), name="dumped-before-create"),
    bad("PGMQ008", script(table=""), name="not-created"),
    bad("PGMQ008", standalone(table=TABLE + DUMP), "standalone", name="dump-in-standalone"),
    bad("PGMQ008", script(extra=TABLE.replace("meta", "other") + DUMP.replace("meta", "other")),
        name="undeclared"),
    bad("PGMQ008", script(extra="ALTER EXTENSION pgmq ADD TABLE pgmq.meta;\n"), name="add-top-level"),
    bad("PGMQ008", pl("EXECUTE format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', 'x');"), name="add-in-body"),
    # PGMQ009 no transaction control, ASCII only
    ok("PGMQ009", script()),
    bad("PGMQ009", script(head=GUARD + "\nBEGIN;\n", extra="COMMIT;\n"), name="top-level"),
    bad("PGMQ009", script(p=P.replace("PERFORM pg_catalog.pg_sleep(n);", "COMMIT;")), name="commit"),
    bad("PGMQ009", script(p=P.replace("PERFORM pg_catalog.pg_sleep(n);", "ROLLBACK;")), name="rollback"),
    bad("PGMQ009", pl("EXECUTE format('SAVEPOINT %I', 'x');"), name="dynamic"),
    bad("PGMQ009", script(extra="-- caf\u00e9\n"), name="non-ascii"),
    # PGMQ010 volatility is explicit (procedures have none)
    ok("PGMQ010", script()),
    bad("PGMQ010", opts(PINNED), name="missing"),
    # PGMQ011 upstream functions (f is one) raise declared messages with declared classes only
    ok("PGMQ011", pl("RAISE EXCEPTION 'msgs cannot be NULL or empty';"), name="upstream-text"),
    ok("PGMQ011", pl(r"RAISE EXCEPTION E'queue name contains invalid characters: $, ;, --, or \\''';"),
       name="backslash-quirk"),
    ok("PGMQ011", pl("""RAISE EXCEPTION 'Queue "%" does not exist. Create it first using pgmq.create()', """
                     "queue_name;"), name="schema-in-text"),
    ok("PGMQ011", pl("RAISE EXCEPTION 'delay cannot be negative' USING ERRCODE = 'invalid_parameter_value';"),
       name="declared-refusal"),
    ok("PGMQ011", pl("RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;"), name="notice"),
    ok("PGMQ011", script(p=P.replace("PERFORM pg_catalog.pg_sleep(n);", "RAISE NOTICE 'ours';")),
       name="not-upstream"),
    ok("PGMQ011", pl("BEGIN NULL; EXCEPTION WHEN OTHERS THEN RAISE; END;"), name="re-raise"),
    bad("PGMQ011", pl("RAISE EXCEPTION 'msgs cannot be NULL or empty' USING ERRCODE = '22023';"),
        name="specific-sqlstate"),
    bad("PGMQ011", pl("RAISE EXCEPTION 'msgs cannot be NULL or empty' USING ERRCODE = 'invalid_parameter_value';"),
        name="specific-condition"),
    bad("PGMQ011", pl("RAISE EXCEPTION 'delay cannot be negative';"), name="refusal-as-p0001"),
    bad("PGMQ011", pl("RAISE EXCEPTION 'msgs cannot be NULL or empty.';"), name="text"),
    bad("PGMQ011", pl("RAISE EXCEPTION USING MESSAGE = 'msgs cannot be NULL or empty';"), name="using-message"),
    bad("PGMQ011", pl("RAISE invalid_parameter_value;"), name="condition-only"),
    bad("PGMQ011", pl("RAISE NOTICE 'something else';"), name="chatter"),
    bad("PGMQ011", pl("RAISE WARNING 'pgmq queue `%` does not exist', queue_name;"), name="level"),
    # PGMQ012 upstream's routines (f) keep upstream's signature; all of them are created
    ok("PGMQ012", script()),
    ok("PGMQ012", script(create_f(args="queue_name pg_catalog.text, ids int8[]")), name="spelling"),
    bad("PGMQ012", script(create_f(args="queue text, ids bigint[]")), name="arg-name"),
    bad("PGMQ012", script(create_f(args="queue_name text, ids bigint[] DEFAULT NULL")), name="new-default"),
    bad("PGMQ012", script(create_f(args="queue_name text, ids bigint")), name="not-array"),
    bad("PGMQ012", script(create_f(args="queue_name varchar, ids bigint[]")), name="arg-type"),
    bad("PGMQ012", script(create_f(returns="SETOF bigint")), name="returns"),
    bad("PGMQ012", script(create_f(returns="pgmq.message_record")), name="not-setof"),
    bad("PGMQ012", script(create_f(returns="SETOF message_record")), name="unqualified-type"),
    bad("PGMQ012", script(f=""), name="missing"),
    bad("PGMQ012", script(f=f"CREATE PROCEDURE pgmq.f(queue_name text, ids bigint[]) LANGUAGE plpgsql {PINNED}\n"
                          "AS $fn$ BEGIN END $fn$;\n"), name="procedure"),
]


@pytest.mark.parametrize(("code", "sql", "target", "fails"), CASES)
def test_rule(code: str, sql: str, target: str, fails: bool) -> None:
    found = codes(sql, target)
    if fails:
        assert code in found
    else:
        assert found == [], lint_script(sql, M, target)


def test_every_rule_has_a_passing_and_a_failing_case() -> None:
    covered = {(c.values[0], c.values[3]) for c in CASES}
    for code in CODES:
        assert (code, False) in covered and (code, True) in covered, code


def test_codes_are_complete() -> None:
    assert sorted(CODES) == [f"PGMQ{n:03d}" for n in range(1, 13)]
    assert len(RULES) == 11  # PGMQ001 runs first, on the raw text
    assert all(len(text) > 80 for text in CODES.values())


# ------------------------------------------------------------------------------- details

def test_parse_error_stops_and_has_the_line() -> None:
    sql = script(create_f(options="VOLATILE"), extra="SELECT 1;\nSELEC 2;\n")
    problems = lint_script(sql, M)
    assert [(p.code, p.obj) for p in problems] == [("PGMQ001", "script")]
    assert problems[0].line == sql.splitlines().index("SELEC 2;") + 1


def test_meta_command_is_named() -> None:
    (problem,) = lint_script(script(extra="\\i other.sql\n"), M)
    assert problem.message.startswith("psql meta-command \\i ")


def test_problem_fields() -> None:
    sql = script(create_f(options="VOLATILE"))
    (problem,) = lint_script(sql, M)
    assert problem == Problem(
        "PGMQ003",
        "pgmq.f(queue_name text, ids bigint[])",
        "no SET search_path = pg_catalog, pg_temp",
        sql.splitlines().index("CREATE FUNCTION pgmq.f(queue_name text, ids bigint[])") + 1,
    )


def test_missing_routine_names_the_policy_entry() -> None:
    (problem,) = lint_script(script(p=""), M)
    assert (problem.code, problem.obj) == ("PGMQ002", "pgmq.p")


def test_a_changed_upstream_signature_names_upstreams() -> None:
    (problem,) = lint_script(script(create_f(args="queue text, ids bigint[]")), M)
    assert problem.code == "PGMQ012"
    assert problem.message == ("differs from upstream's contract: function  "
                               "pgmq.f(queue_name text, ids bigint[]) RETURNS SETOF pgmq.message_record")
    (problem,) = lint_script(script(create_f(args="queue_name text, ids bigint")), M)
    assert (problem.code, problem.obj) == ("PGMQ012", "pgmq.f(queue_name text, ids bigint[])")
    assert problem.message.endswith("the script has pgmq.f(queue_name text, ids bigint)")


def test_an_upgrade_script_need_not_create_upstreams_routines() -> None:
    assert lint_script(script(f="", head=upgrade_guard(M.version) + "\n"), M, previous="") == []


def test_definer_reason_is_required() -> None:
    manifest = dataclasses.replace(M, routines=policies("f", "d", "p"))
    assert codes(script(), manifest=manifest) == ["PGMQ003"]


def test_a_policy_entry_may_name_one_overload() -> None:
    manifest = dataclasses.replace(M, routines=policies("f", M.routines[1], Policy("p", ("integer",))))
    assert codes(script(), manifest=manifest) == []
    other = script(p=P.replace("n integer", "n bigint"))
    assert [(p.code, p.obj) for p in lint_script(other, manifest)] == [
        ("PGMQ002", "pgmq.p(integer)"), ("PGMQ002", "pgmq.p(n bigint)")]


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError):
        lint_script(script(), M, target="upgrade")


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("int", "integer"),
        ("int4", "integer"),
        ("pg_catalog.int4", "integer"),
        ("int8", "bigint"),
        ("bigint[]", "bigint[]"),
        ("int[][]", "integer[]"),
        ("bool", "boolean"),
        ("boolean", "boolean"),
        ("timestamptz", "timestamp with time zone"),
        ("timestamp(3) with time zone", "timestamp with time zone"),
        ("timestamp", "timestamp without time zone"),
        ("varchar(10)", "character varying"),
        ("character varying", "character varying"),
        ("float8", "double precision"),
        ("real", "real"),
        ("numeric(10, 2)", "numeric"),
        ("interval", "interval"),
        ("json", "json"),
        ("text", "text"),
        ("jsonb[]", "jsonb[]"),
        ("pgmq.message_record", "pgmq.message_record"),
        ("pgmq.message_record[]", "pgmq.message_record[]"),
        ('"char"', '"char"'),
        ('pgmq."Odd"', 'pgmq."Odd"'),
    ],
)
def test_type_name_normalisation(spelling: str, canonical: str) -> None:
    cast = parse_sql(f"SELECT NULL::{spelling}")[0].stmt.targetList[0].val
    assert type_name(cast.typeName) == canonical


@pytest.mark.parametrize(
    ("header", "identity", "result"),
    [
        ("f(a int, b text DEFAULT 'x') RETURNS SETOF bigint", "a integer, b text", "SETOF bigint"),
        ('f("order" int, "Odd" text, x int) RETURNS void', '"order" integer, "Odd" text, x integer', "void"),
        ("f(VARIADIC xs int[]) RETURNS int", "VARIADIC xs integer[]", "integer"),
        ("f(a int, OUT b text)", "a integer, OUT b text", "text"),
        ("f(INOUT a int, OUT b text)", "INOUT a integer, OUT b text", "record"),
        ("f(q text) RETURNS TABLE(id bigint, at timestamptz)", "q text",
         "TABLE(id bigint, at timestamp with time zone)"),
        ("f(int, text) RETURNS pgmq.message_record", "integer, text", "pgmq.message_record"),
    ],
)
def test_signature(header: str, identity: str, result: str) -> None:
    fn = parse_sql(f"CREATE FUNCTION pgmq.{header} LANGUAGE sql AS 'SELECT 1'")[0].stmt
    assert (identity_args(fn), result_type(fn)) == (identity, result)


@pytest.mark.parametrize(
    ("args", "identity"),
    [("a int", "a integer"), ("a int, OUT b int", "IN a integer, OUT b integer")],
)
def test_procedure_signature(args: str, identity: str) -> None:
    fn = parse_sql(f"CREATE PROCEDURE pgmq.p({args}) LANGUAGE sql AS 'SELECT 1'")[0].stmt
    assert (identity_args(fn), result_type(fn)) == (identity, None)


# (argument list as written, as pg_get_function_arguments prints it; the integration test
# test_catalog_contract.py::test_default_printing_matches_the_server asks a server)
DEFAULTS = [
    ("a int DEFAULT 5, b bigint DEFAULT 0", "a integer DEFAULT 5, b bigint DEFAULT 0"),
    ("a text DEFAULT 'x', b text DEFAULT NULL", "a text DEFAULT 'x'::text, b text DEFAULT NULL::text"),
    ("a jsonb DEFAULT '{}'", "a jsonb DEFAULT '{}'::jsonb"),
    ("a jsonb DEFAULT '{}'::jsonb", "a jsonb DEFAULT '{}'::jsonb"),
    ("a character DEFAULT 'N'", "a character DEFAULT 'N'::bpchar"),
    ("a char DEFAULT NULL::bpchar", "a character DEFAULT NULL::bpchar"),
    ("a timestamptz DEFAULT NULL::timestamptz",
     "a timestamp with time zone DEFAULT NULL::timestamp with time zone"),
    ("a double precision DEFAULT 1", "a double precision DEFAULT 1"),
    ("a boolean DEFAULT false, b bool DEFAULT true", "a boolean DEFAULT false, b boolean DEFAULT true"),
    ("a text DEFAULT 'it''s'", "a text DEFAULT 'it''s'::text"),
    ("a text[] DEFAULT NULL::text[]", "a text[] DEFAULT NULL::text[]"),
    ("a name DEFAULT NULL::name, b int4 DEFAULT NULL", "a name DEFAULT NULL::name, b integer DEFAULT NULL::integer"),
]


@pytest.mark.parametrize(("args", "printed"), DEFAULTS)
def test_arguments_with_defaults(args: str, printed: str) -> None:
    fn = parse_sql(f"CREATE FUNCTION pgmq.f({args}) RETURNS void LANGUAGE sql AS ''")[0].stmt
    assert arguments(fn) == printed
    assert parse_signature(signature(fn).line) == signature(fn)


@pytest.mark.parametrize("default", ["now()", "-1", "1.5", "5::bigint", "'x'::varchar(3)", "ARRAY[1]"])
def test_defaults_whose_printing_is_unknown_are_refused(default: str) -> None:
    fn = parse_sql(f"CREATE FUNCTION pgmq.f(a int DEFAULT {default}) RETURNS void LANGUAGE sql AS ''")[0].stmt
    with pytest.raises(ValueError):
        arguments(fn)


def test_signature_lines() -> None:
    fn = parse_sql("CREATE PROCEDURE pgmq.p(q name, n int DEFAULT 1) LANGUAGE sql AS ''")[0].stmt
    assert signature(fn).line == "procedure pgmq.p(q name, n integer DEFAULT 1)"
    fn = parse_sql("CREATE FUNCTION pgmq.delete(q text) RETURNS TABLE(id int8) LANGUAGE sql AS ''")[0].stmt
    assert signature(fn).line == "function  pgmq.delete(q text) RETURNS TABLE(id bigint)"
    assert signature(fn).key == ("delete", ("text",))
    with pytest.raises(ValueError):
        parse_signature("trigger pgmq.t()")


@pytest.mark.parametrize("target", ["extension", "standalone"])
def test_rendered_scripts_lint_clean(target: str) -> None:
    files = render_all(MANIFEST)
    name = standalone_name(MANIFEST) if target == "standalone" else f"pgmq--{MANIFEST.version}.sql"
    assert lint_script(files[name], MANIFEST, target) == []


TRIGGER_FN = f"""CREATE FUNCTION pgmq.t() RETURNS trigger LANGUAGE plpgsql VOLATILE {PINNED}
AS $fn$ BEGIN DELETE FROM pgmq.meta m USING changed c WHERE m.queue_name = c.queue_name; RETURN NULL; END $fn$;
"""
TRIGGER = ("CREATE TRIGGER t AFTER DELETE ON pgmq.meta REFERENCING OLD TABLE AS changed "
           "FOR EACH STATEMENT EXECUTE FUNCTION pgmq.t();\n")


def test_a_trigger_function_reads_its_transition_tables_by_bare_name() -> None:
    manifest = dataclasses.replace(M, routines=(*M.routines, *policies("t")))
    assert codes(script(extra=TRIGGER_FN + TRIGGER), manifest=manifest) == []
    assert codes(script(extra=TRIGGER_FN), manifest=manifest) == ["PGMQ006"]
    # an upgrade that replaces only the function: the trigger is the previous version's
    upgrade = script(f="", head=upgrade_guard(M.version) + "\n", extra=TRIGGER_FN)
    assert lint_script(upgrade, manifest, previous=script(extra=TRIGGER_FN + TRIGGER)) == []
    assert [p.code for p in lint_script(upgrade, manifest, previous=script())] == ["PGMQ006"]
