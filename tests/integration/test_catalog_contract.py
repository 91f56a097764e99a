"""The installed catalog matches docs/api.txt (the routines as the templates declare them), the
manifest's policies and upstream PGMQ 1.13's contract."""

from __future__ import annotations

import pytest

from pgmq_build import surface
from pgmq_build.lint.sqlast import Signature, strip_in
from pgmq_build.manifest import MANIFEST
from tests.helpers import column, scalar
from tests.unit.test_lint_rules import DEFAULTS


def installed_functions(conn):
    conn.execute("SET search_path = pg_catalog")
    return conn.execute("""
        SELECT p.proname, p.prokind = 'p', pg_get_function_arguments(p.oid),
               pg_get_function_identity_arguments(p.oid),
               CASE WHEN p.prokind = 'p' THEN NULL ELSE pg_get_function_result(p.oid) END,
               p.prosecdef, p.proconfig
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgmq'""").fetchall()


def catalog_line(name: str, procedure: bool, args: str, result: str | None) -> str:
    """A routine of the catalog as its line in docs/api.txt (without upstream/ours)."""
    kind = "procedure" if procedure else "function"
    return Signature("pgmq", name, kind, (), result, arguments=strip_in(args)).line


def test_functions_match_the_api_listing(conn):
    got = sorted(catalog_line(name, proc, args, result) for name, proc, args, _, result, _, _ in
                 installed_functions(conn))
    want = sorted(line for _, line in surface.read_listing())
    assert sorted(set(want) - set(got)) == [], "listed but not installed as listed"
    assert sorted(set(got) - set(want)) == [], "installed but not listed"
    assert got == want


def test_security_definer_and_search_path_as_the_policies_say(conn):
    entries = {(e.name, e.signature.identity): e for e in surface.current()}
    for name, _, _, ident, _, definer, config in installed_functions(conn):
        policy = entries[(name, strip_in(ident))].policy
        assert definer == policy.security_definer, name
        if policy.unpinned_reason:  # e.g. dispatch, which commits: PostgreSQL forbids SET there
            assert config is None, name
        else:  # first; the payload conversions pin more (their SET clauses)
            assert config[0] == "search_path=pg_catalog, pg_temp", name


def test_every_listed_routine_is_an_extension_member(conn):
    members = scalar(conn, """SELECT count(*) FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
                             WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
                               AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgmq')""")
    assert members == len(surface.read_listing())


@pytest.mark.parametrize(("args", "printed"), DEFAULTS)
def test_default_printing_matches_the_server(conn, args, printed):
    """sqlast.arguments prints defaults as PostgreSQL does, beyond the forms the templates use."""
    conn.execute(f"CREATE FUNCTION public.defaults_probe({args}) RETURNS void LANGUAGE sql AS ''")
    assert scalar(conn, "SELECT pg_get_function_arguments('public.defaults_probe'::regproc)") == printed


def type_columns(conn, typname):
    return conn.execute("""SELECT a.attname, format_type(a.atttypid, a.atttypmod)
                           FROM pg_attribute a JOIN pg_type t ON t.typrelid = a.attrelid
                           JOIN pg_namespace n ON n.oid = t.typnamespace
                           WHERE n.nspname = 'pgmq' AND t.typname = %s AND a.attnum > 0
                           ORDER BY a.attnum""", (typname,)).fetchall()


TSZ = "timestamp with time zone"


def test_composite_types_in_contract_order(conn):
    assert type_columns(conn, "message_record") == [
        ("msg_id", "bigint"), ("read_ct", "integer"), ("enqueued_at", TSZ), ("last_read_at", TSZ),
        ("vt", TSZ), ("message", "jsonb"), ("headers", "jsonb")]
    assert type_columns(conn, "queue_record") == [
        ("queue_name", "character varying"), ("is_partitioned", "boolean"), ("is_unlogged", "boolean"),
        ("created_at", TSZ)]
    assert type_columns(conn, "metrics_result") == [
        ("queue_name", "text"), ("queue_length", "bigint"), ("newest_msg_age_sec", "integer"),
        ("oldest_msg_age_sec", "integer"), ("total_messages", "bigint"), ("scrape_time", TSZ),
        ("queue_visible_length", "bigint"), ("default_partition_length", "bigint")]


def test_meta_table_layout(conn):
    assert type_columns(conn, "meta") == [
        ("queue_name", "character varying"), ("is_partitioned", "boolean"), ("is_unlogged", "boolean"),
        ("created_at", TSZ)]
    assert scalar(conn, """SELECT pg_get_constraintdef(oid) FROM pg_constraint
                          WHERE conrelid = 'pgmq.meta'::regclass AND contype = 'u'""") == "UNIQUE (queue_name)"
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'pgmq.meta'::regclass "
                        "AND contype = 'p'") == 0


def test_queue_table_layout(conn, queue):
    assert type_columns(conn, "q_jobs")[:7] == [
        ("msg_id", "bigint"), ("read_ct", "integer"), ("enqueued_at", TSZ), ("last_read_at", TSZ),
        ("vt", TSZ), ("message", "jsonb"), ("headers", "jsonb")]
    assert scalar(conn, "SELECT attidentity FROM pg_attribute WHERE attrelid = 'pgmq.q_jobs'::regclass "
                        "AND attname = 'msg_id'") == "a"
    assert type_columns(conn, "a_jobs")[:8] == [
        ("msg_id", "bigint"), ("read_ct", "integer"), ("enqueued_at", TSZ), ("last_read_at", TSZ),
        ("archived_at", TSZ), ("vt", TSZ), ("message", "jsonb"), ("headers", "jsonb")]


def test_control_file_contract(repo_root):
    control = (repo_root / "extension" / "pgmq.control").read_text()
    for line in ("comment = 'A lightweight message queue. Like AWS SQS and RSMQ but on Postgres.'",
                 f"default_version = '{MANIFEST.version}'", "schema = 'pgmq'", "relocatable = false", "superuser = false"):
        assert line in control.splitlines()
    assert "requires" not in control


def test_public_functions_have_comments(conn, manifest):
    missing = column(conn, """SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                              WHERE n.nspname = 'pgmq' AND p.proname NOT LIKE '\\_%%'
                                AND obj_description(p.oid, 'pg_proc') IS NULL
                                AND p.oid NOT IN (SELECT p2.oid FROM pg_proc p2 WHERE p2.prolang =
                                    (SELECT oid FROM pg_language WHERE lanname = 'sql'))""")
    assert missing == []
