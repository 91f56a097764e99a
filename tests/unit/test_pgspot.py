"""pgspot's narrowing comes from the manifest only; the pinned pgspot (installed into
.venv-pgspot on first use, as make gates does) finds the generated scripts clean and catches a
planted flaw."""

from __future__ import annotations

from pathlib import Path

from pgmq_build import pgspot, surface
from pgmq_build.paths import extension_dir


def test_only_declared_unpinned_routines_are_allowed_without_search_path():
    assert pgspot.allowed_unpinned() == [
        "pgmq.create_partitioned(queue_name text,partition_interval text,retention_interval text,premake integer)",
        "pgmq.convert_archive_partitioned(table_name text,partition_interval text,retention_interval text,"
        "leading_partition integer)",
        "pgmq.run_partition_maintenance(queue_name text)",
        "pgmq.stream_send(stream_name text,msg jsonb,headers jsonb)",
        "pgmq.register_callback(q_name text,callback text)",
        "pgmq.unregister_callback(q_name text,callback text)",
        "pgmq.dispatch(queue_name text,max_messages integer)",
    ]
    assert len(pgspot.allowed_unpinned()) == sum(bool(e.policy.unpinned_reason) for e in surface.current())


def test_command_waives_nothing_else():
    cmd = pgspot.command(["pgspot"], [Path("a.sql")])
    assert "--ignore" not in cmd
    assert cmd.count("--proc-without-search-path") == 7
    assert cmd[-1] == "a.sql"


def test_generated_scripts_are_clean():
    assert pgspot.run(sorted(extension_dir().glob("*.sql"))) == 0


def test_a_planted_flaw_is_caught(tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE SCHEMA s;\nCREATE FUNCTION s.f(a int) RETURNS int LANGUAGE sql "
                   "SET search_path = pg_catalog, pg_temp AS $$ SELECT a + 1 $$;\n"
                   "CREATE FUNCTION s.g() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n")
    assert pgspot.run([bad]) != 0
