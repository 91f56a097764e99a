"""`pgmq-build` reads as two tools: --help lists the operator commands apart from the build
commands, every command that takes a database takes it from PGMQ_DSN too, and a command whose
extra is not installed names the extra (no ImportError traceback)."""

from __future__ import annotations

import sys

import click
import pytest

from pgmq_build import cli
from tests.helpers import run_cli

OPERATOR = ["dashboard", "demo", "dlq", "exchange", "install", "metrics", "migrate", "queue", "queues",
            "stream", "top", "worker"]
BUILD = ["check", "explain", "generate", "lint", "pgspot"]


def sections(text: str) -> dict[str, list[str]]:
    """--help's command sections: title -> command names."""
    found: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            found[title] = []
        elif title and line.startswith("  ") and line.strip() and not line.startswith("   "):
            found[title].append(line.split()[0])
    return found


def test_help_lists_operator_commands_apart_from_build_commands():
    result = run_cli("--help")
    assert result.exit_code == 0, result.output
    found = sections(result.output)
    assert found["Operator commands (a database: PGMQ_DSN or --dsn)"] == OPERATOR
    assert found["Build commands (templates/ -> extension/; the [build] extra)"] == BUILD
    assert "Commands" not in found


def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        out.append((f"{prefix}{name}", cmd))
        if isinstance(cmd, click.Group):
            out += commands(cmd, f"{prefix}{name} ")
    return out


def test_every_dsn_option_takes_pgmq_dsn():
    with_dsn = []
    for name, cmd in commands(cli.main):
        for param in cmd.params:
            if param.name == "dsn" and name != "demo":  # the demo's --dsn: see below
                envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
                assert "PGMQ_DSN" in envvars, name
                with_dsn.append(name)
    # the four that did not before, and the admin commands
    assert {"worker", "dashboard", "install", "migrate", "queues", "top", "metrics",
            "queue create", "dlq list", "stream list"} <= set(with_dsn)


def test_the_demo_ignores_pgmq_dsn():
    """The tour creates queues: PGMQ_DSN, exported for real work, must not send it there
    (without --dsn it runs on a throwaway server); PGMQ_BUILD_DEMO_DSN still works."""
    [param] = [p for p in cli.main.commands["demo"].params if p.name == "dsn"]
    assert param.envvar is None


def test_install_files_only_ignores_pgmq_dsn(monkeypatch, tmp_path):
    """--files-only touches no database, even with PGMQ_DSN exported (a --dsn given is refused)."""
    monkeypatch.setenv("PGMQ_DSN", "host=nowhere.invalid")
    result = run_cli("install", "--files-only", "--pg-config", str(tmp_path / "no-pg_config"))
    assert result.exit_code == 1 and "no-pg_config not found" in result.output
    result = run_cli("install", "--files-only", "--dsn", "host=x")
    assert result.exit_code == 2 and "--files-only copies files and touches no database" in result.output


def test_a_command_specific_variable_still_wins_over_pgmq_dsn(monkeypatch):
    """PGMQ_BUILD_WORKER_DSN (the auto variable the worker had) before PGMQ_DSN."""
    monkeypatch.setenv("PGMQ_DSN", "host=a")
    monkeypatch.setenv("PGMQ_BUILD_WORKER_DSN", "nonsense===")
    result = run_cli("worker")
    assert result.exit_code == 2 and "PGMQ_BUILD_WORKER_DSN" in result.output


@pytest.fixture
def without(monkeypatch):
    """without(*modules): those imports fail as if their extra were not installed (and our
    modules that import them are imported again)."""

    def hide(*modules: str) -> None:
        for name in list(sys.modules):
            if name.startswith(("pgmq_build.ops.", "pgmq_build.dashboard", "pgmq_build.render",
                                "pgmq_build.surface", "pgmq_build.lint", "pgmq_build.migrate",
                                "pgmq_build.upgrade", "pgmq_build.pgspot")):
                monkeypatch.delitem(sys.modules, name)
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)  # import raises ModuleNotFoundError

    return hide


@pytest.mark.parametrize(("args", "hidden", "extra"), [
    (["queues", "--dsn", "host=x"], ("rich",), "ops"),
    (["top", "--dsn", "host=x", "--interval", "1"], ("rich",), "ops"),
    (["metrics", "--dsn", "host=x"], ("prometheus_client",), "ops"),
    (["queue", "create", "q", "--dsn", "host=x"], ("rich",), "ops"),
    (["dashboard", "--dsn", "host=x"], ("jinja2",), "ops"),
    (["generate"], ("jinja2", "pglast"), "build"),
    (["check"], ("jinja2", "pglast"), "build"),
    (["lint"], ("pglast",), "build"),
    (["migrate", "--dsn", "host=x"], ("pglast",), "migrate"),
])
def test_a_command_without_its_extra_names_the_extra(without, args, hidden, extra):
    without(*hidden)
    result = run_cli(*args)
    assert result.exit_code == 1, result.output
    assert f"pip install 'pgmq-build[{extra}]'" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    # (the first of the hidden packages the command imports)
    assert any(result.output.startswith(f"error: pgmq-build {args[0]} needs the Python package {h!r}")
               for h in hidden), result.output


def test_help_lists_a_command_whose_extra_is_missing(without):
    without("rich")
    result = run_cli("--help")
    assert result.exit_code == 0, result.output
    assert "queues     (not installed: pip install 'pgmq-build[ops]')" in result.output
    result = run_cli("queues", "--help")
    assert result.exit_code == 0 and "pip install 'pgmq-build[ops]'" in " ".join(result.output.split())
