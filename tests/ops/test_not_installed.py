"""An operator command in a database without pgmq says so in one line, with the hint to
install it (CREATE EXTENSION pgmq or `pgmq-build install --dsn`), instead of a traceback or,
for `top`, retrying forever. The database comes from PGMQ_DSN."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner

from pgmq_build import cli
from pgmq_build.install import NOT_INSTALLED

HINT = "CREATE EXTENSION pgmq there, or run `pgmq-build install --dsn DSN`"


@pytest.fixture
def bare(dsn):
    """The test database with pgmq dropped."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP EXTENSION pgmq CASCADE")
    return dsn


@pytest.mark.parametrize("args", [
    ["queues"], ["queue", "create", "q"], ["queue", "peek", "q"], ["dlq", "list"], ["exchange", "list"],
    ["stream", "list"], ["metrics"], ["top", "--interval", "0.2"], ["dashboard", "--bind", "127.0.0.1:0"],
])
def test_operator_commands_hint_at_create_extension(bare, args):
    result = CliRunner().invoke(cli.main, args, env={"PGMQ_DSN": bare})
    assert result.exit_code == 1, result.output
    assert result.output.strip() in (f"error: {NOT_INSTALLED} (SQLSTATE 3F000)", f"error: {NOT_INSTALLED}")
    assert HINT in NOT_INSTALLED


def test_the_worker_logs_one_line_with_the_hint(bare):
    result = CliRunner().invoke(cli.main, ["worker", "--once"], env={"PGMQ_DSN": bare})
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert json.loads(line)["event"] == "not_installed" and json.loads(line)["error"] == NOT_INSTALLED


def test_json_output_carries_the_hint(bare):
    result = CliRunner().invoke(cli.main, ["queues", "--json"], env={"PGMQ_DSN": bare})
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"error": NOT_INSTALLED, "sqlstate": "3F000", "exit_code": 1}
