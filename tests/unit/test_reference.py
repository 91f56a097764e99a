"""docs/reference/*.md is complete: every public SQL routine of the declared surface
(docs/api.txt) has an entry with its signatures, a description and an example; every click
command and option of `pgmq-build`, every public method of the client and the worker, every
Spark option appears. Each check is shown to fail when an entry is missing. No server: the
examples run in tests/integration/test_reference_examples.py."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import click
import pytest

from pgmq_build import client, reference, spark_options, surface, worker
from pgmq_build.cli import main
from pgmq_build.lint import sqlast
from pgmq_build.manifest import MANIFEST
from pgmq_build.reference import cli as cli_page
from pgmq_build.reference import examples, sql
from pgmq_build.reference import python as python_page
from pgmq_build.reference import spark as spark_page
from pgmq_build.render import render_install
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def install_sql() -> str:
    return render_install(MANIFEST, "extension")


def committed(name: str) -> str:
    return (reference.reference_dir() / name).read_text()


def sections(page: str, level: str) -> dict[str, str]:
    """heading text -> the text up to the next heading of that level or higher."""
    parts = re.split(rf"^{level} (.+)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# ---------------------------------------------------------------------------------------- SQL

def public_surface() -> dict[str, list[str]]:
    """Public routine name -> its signatures, from docs/api.txt (the declared surface)."""
    out: dict[str, list[str]] = {}
    for _, line in surface.read_listing():
        sig = sqlast.parse_signature(line)
        if not sig.name.startswith("_"):
            out.setdefault(sig.name, []).append(sig.text)
    return out


def sql_gaps(page: str) -> list[str]:
    entries = sections(page, "###")
    gaps = []
    for name, signatures in public_surface().items():
        entry = entries.get(name)
        if entry is None:
            gaps.append(f"{name}: no entry")
            continue
        gaps += [f"{name}: signature {s} missing" for s in signatures if s not in entry]
        prose = entry.split("```", 1)[0].replace("*Upstream PGMQ*", "").replace(
            "*pgmq only* (not in upstream PGMQ)", "")
        if not prose.strip():
            gaps.append(f"{name}: no description")
        if "```sql" not in entry:
            gaps.append(f"{name}: no example")
    return gaps


def test_every_public_routine_has_signatures_description_and_example(install_sql):
    page = sql.page(install_sql)
    assert page == committed("sql.md")
    assert len(public_surface()) > 100
    assert sql_gaps(page) == []
    assert set(examples.EXAMPLES) == set(public_surface()), "an example of a routine that is not public"


def test_a_routine_without_example_fails(install_sql, monkeypatch):
    monkeypatch.delitem(examples.EXAMPLES, "send")
    assert sql_gaps(sql.page(install_sql)) == ["send: no example"]


def test_a_routine_without_description_fails(install_sql, monkeypatch):
    monkeypatch.setattr(sql, "_comments", lambda script: {})
    monkeypatch.setattr(sql, "_leading_comment", lambda text, line, name: "")
    gaps = sql_gaps(sql.page(install_sql))
    assert "send: no description" in gaps and "read: no description" in gaps


def test_a_missing_routine_fails(install_sql, monkeypatch):
    routines = sql.routines
    monkeypatch.setattr(sql, "routines", lambda *a: [r for r in routines(*a) if r.name != "pop"])
    assert sql_gaps(sql.page(install_sql)) == ["pop: no entry"]


def test_entries_say_upstream_and_errors_with_sqlstate(install_sql):
    entries = sections(committed("sql.md"), "###")
    assert "*Upstream PGMQ*" in entries["send"] and "*pgmq only*" in entries["send_reserved"]
    # raise_error("delay_negative_refused") in send's template, 22023 (errors.py)
    assert "| 22023 | `invalid_parameter_value` | delay cannot be negative |" in entries["send"]
    # a bare RAISE EXCEPTION of upstream's validate_topic_pattern: P0001
    assert "| P0001 | `raise_exception` | pattern cannot be NULL or empty |" in entries["validate_topic_pattern"]
    # null_value_not_allowed is 22004 for PL/pgSQL (psycopg alone would say 39004)
    assert "| 22004 | `null_value_not_allowed` | queue name cannot be NULL |" in entries["send"]
    assert "39004" not in committed("sql.md")


def test_errors_come_from_the_routines_called(install_sql):
    """create() raises nothing itself: its errors are those of the helpers it calls."""
    by_name = {r.name: r for r in sql.routines(install_sql)}
    assert {e.sqlstate for e in by_name["create"].errors} >= {"42602", "42622"}
    assert not by_name["list_queues"].errors


# ---------------------------------------------------------------------------------------- CLI

def click_tree(group: click.Group, path: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield f"{path}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from click_tree(cmd, f"{path}{name} ")


def cli_gaps(page: str) -> list[str]:
    entries = sections(page, "##")
    gaps = []
    for path, cmd in click_tree(main):
        entry = entries.get(path)
        if entry is None:
            gaps.append(f"{path}: no entry")
            continue
        for param in cmd.params:
            names = param.opts if isinstance(param, click.Option) else [param.human_readable_name.upper()]
            gaps += [f"{path}: {n} missing" for n in names if f"`{n}`" not in entry]
            envvar = getattr(param, "envvar", None)
            gaps += [f"{path}: {e} missing" for e in ([envvar] if isinstance(envvar, str) else envvar or [])
                     if f"`{e}`" not in entry]
    return gaps


def test_every_command_and_option_is_in_cli_md():
    page = committed("cli.md")
    assert page == cli_page.page(main)
    assert cli_gaps(page) == []
    worker = sections(page, "##")["worker"]
    assert "`PGMQ_BUILD_WORKER_MIN_WORKERS`" in worker and "| `3` |" in worker


def test_a_command_or_option_missing_from_cli_md_fails(monkeypatch):
    monkeypatch.setitem(main.commands, "frobnicate", click.Command("frobnicate", help="x"))
    install = main.commands["install"]
    monkeypatch.setattr(install, "params", [*install.params, click.Option(["--zzz"], envvar="ZZZ")])
    assert cli_gaps(committed("cli.md")) == ["frobnicate: no entry", "install: --zzz missing",
                                             "install: ZZZ missing"]


# ------------------------------------------------------------------------------------- Python

def public_methods() -> list[str]:
    out = []
    for module in (client, worker):
        for name in module.__all__:
            obj = getattr(module, name)
            out.append(name)
            if inspect.isclass(obj):
                out += [f"{name}.{m}" for m, v in vars(obj).items()
                        if not m.startswith("_") and (callable(v) or isinstance(v, property | classmethod))]
    return out


def python_gaps(page: str) -> list[str]:
    headings = set(re.findall(r"^#{3,4} (\S+)$", page, flags=re.M))
    return [f"{name}: no entry" for name in public_methods() if name not in headings]


def test_every_public_client_and_worker_name_is_in_python_md():
    page = committed("python.md")
    assert page == python_page.page((client, worker))
    assert "Client.send" in public_methods() and "Worker.start" in public_methods()
    assert python_gaps(page) == []


def test_a_method_missing_from_python_md_fails(monkeypatch):
    monkeypatch.setattr(client.Client, "frobnicate", lambda self: None, raising=False)
    assert python_gaps(committed("python.md")) == ["Client.frobnicate: no entry"]


# -------------------------------------------------------------------------------------- Spark

def spark_gaps(page: str) -> list[str]:
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", page, flags=re.M))
    gaps = []
    for direction, names in spark_options.OPTIONS.items():
        gaps += [f"{direction} {n}: no entry" for n in names if direction not in rows.get(n, "")]
    return gaps


def test_every_spark_option_is_in_spark_options_md():
    page = committed("spark-options.md")
    assert page == spark_page.page()
    assert spark_gaps(page) == []


def test_a_spark_option_missing_from_spark_options_md_fails(monkeypatch):
    monkeypatch.setitem(spark_options.OPTIONS, "read", (*spark_options.OPTIONS["read"], "frobnicate"))
    assert spark_gaps(committed("spark-options.md")) == ["read frobnicate: no entry"]


def test_the_spark_source_reads_only_declared_options(repo_root):
    """Every option name the parser looks up is declared (so documented)."""
    source = (repo_root / "pgmq_build/spark/options.py").read_text()
    read = set(re.findall(r'_(?:get|int|bool|float|choice|column_option)\(options, "(\w+)"', source))
    assert len(read) > 25
    assert read <= {o.name for o in spark_options.DECLARED}


# ------------------------------------------------------------------------- generate and check

def test_generate_writes_the_pages_and_check_fails_when_one_is_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "reference_dir", lambda: tmp_path)
    first = run_cli("generate")
    assert first.exit_code == 0, first.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.md", "python.md", "spark-options.md", "sql.md"]
    texts = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert texts == {n: committed(n) for n in texts} and reference.problems(texts) == []
    page = tmp_path / "sql.md"
    page.write_text(page.read_text().replace("### pop\n", "### popp\n"))
    stale = run_cli("check")
    assert stale.exit_code == 1 and "differs: reference/sql.md" in stale.output, stale.output
    page.unlink()
    assert reference.problems(texts) == [f"missing: reference/sql.md (in {tmp_path.parent})"]


def test_the_pages_do_not_depend_on_hash_order(repo_root):
    """Sets and dicts are ordered before they are printed: another PYTHONHASHSEED, same pages."""
    code = ("from pgmq_build import reference\nfrom pgmq_build.render import render_install\n"
            "for name, text in reference.pages(render_install()).items():\n"
            "    assert text == (reference.reference_dir() / name).read_text(), name\n")
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", code], cwd=repo_root, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed})
