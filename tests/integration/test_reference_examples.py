"""Every example of docs/reference/sql.md (pgmq_build/reference/examples.py) runs as written:
through psql with ON_ERROR_STOP, in a fresh database with the extension, as a superuser, and
leaves no role behind (roles belong to the whole cluster). tests/unit/test_reference.py checks
that every public routine has one."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from pgmq_build.cluster import pg_bindir
from pgmq_build.reference.examples import EXAMPLES
from tests.helpers import partman_available

# The output each of these examples shows in a comment, checked beyond "it ran".
SHOWS = {
    "format_table_name": "q_jobs",
    "read_grouped_rr": '{"n": 3}',
    "get_queue_table": "pgmq.q_jobs",
    "read_message_any": '<doc id="1"/>',
    "dispatch": "      42",
    "payload_type": " xml",
    "pop_payload": " hi",
}


def roles(conn: psycopg.Connection) -> set[str]:
    return {r for (r,) in conn.execute("SELECT rolname FROM pg_roles")}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_as_written(name, dsn, conn):
    script = EXAMPLES[name]
    if "pg_partman" in script and not partman_available(conn):
        pytest.skip("pg_partman is not installed on the server")
    before = roles(conn)
    out = subprocess.run([str(pg_bindir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
                         input=script + "\n", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"example of {name} failed:\n{out.stdout[-3000:]}\n{out.stderr}"
    assert "ERROR" not in out.stderr, out.stderr
    if name in SHOWS:
        assert SHOWS[name] in out.stdout, out.stdout
    assert roles(conn) == before, "the example left a role behind"


def test_every_installed_public_routine_has_an_example(conn):
    installed = {n for (n,) in conn.execute(
        r"SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'pgmq'::regnamespace "
        r"AND proname NOT LIKE '\_%'")}
    assert len(installed) > 100
    assert installed == set(EXAMPLES)
