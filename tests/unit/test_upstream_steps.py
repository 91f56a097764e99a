"""The generated step from upstream PGMQ (pgmq[-standalone]--1.13.x--<version>.sql, 1.13.x
standing for 1.13.0 and 1.13.1) and the extension's bridges to it (pgmq--1.13.0--1.13.x.sql): what
they drop, keep and create, checked against upstream's own SQL from the PyPI `pgmq` package (read
at run time, never copied here). No server."""

from __future__ import annotations

import importlib.resources
import re

import pytest
from pglast import ast, parse_sql

from pgmq_build import render, surface, upgrade
from pgmq_build.lint import lint_script, sqlast
from pgmq_build.manifest import MANIFEST, UPSTREAM_CONTRACT_FILE, UPSTREAM_KEPT, VERSION

UPSTREAM = MANIFEST.bridge


def upstream_sql() -> str:
    return (importlib.resources.files("pgmq") / "sql" / "pgmq.sql").read_text()


def created(sql: str) -> dict[str, set[str]]:
    """Names of what a script creates in schema pgmq, by kind."""
    out: dict[str, set[str]] = {"table": set(), "type": set(), "index": set(), "view": set(), "routine": set()}
    for raw in parse_sql(upgrade.strip_guard(sql)):
        n = raw.stmt
        if isinstance(n, ast.CreateStmt):
            out["table"].add(n.relation.relname)
        elif isinstance(n, ast.CompositeTypeStmt):
            out["type"].add(n.typevar.relname)
        elif isinstance(n, ast.IndexStmt):
            out["index"].add(n.idxname)
        elif isinstance(n, ast.ViewStmt):
            out["view"].add(n.view.relname)
        elif isinstance(n, ast.CreateFunctionStmt):
            out["routine"].add((n.funcname[-1].sval, sqlast.identity_args(n)))
    return out


@pytest.fixture(scope="module")
def files():
    return render.render_all()


def test_the_contract_is_upstreams_own_sql():
    """manifest.UPSTREAM_CONTRACT is upstream's signatures, derived from its pgmq.sql again."""
    version = (importlib.resources.files("pgmq") / "sql" / "pgmq.sql.version").read_text().strip()
    assert surface.contract_text(upstream_sql(), version) == UPSTREAM_CONTRACT_FILE.read_text(), (
        f"{UPSTREAM_CONTRACT_FILE} is not upstream's: "
        'python3 -c "from pgmq_build import surface; surface.write_contract()" rewrites it')


def test_upstream_has_exactly_the_contract_routines_and_the_kept_objects():
    up = created(upstream_sql())
    assert up["routine"] == {(s.name, s.identity) for s in sqlast.parse_signatures(MANIFEST.contract)}
    assert len(up["routine"]) == 76
    for kind, names in UPSTREAM_KEPT.items():
        assert set(names) <= up[kind], kind
    assert "topic_bindings" in up["table"]


@pytest.mark.parametrize("target", render.TARGETS)
def test_the_step_drops_upstream_routines_and_creates_the_rest_of_ours(files, target):
    text = files[render.upgrade_name(UPSTREAM, VERSION, target)]
    ours = created(files[render.install_name(VERSION, target)])
    step = created(text)
    # every routine of ours is created (upstream's were dropped first), every object but the kept ones
    assert step["routine"] == ours["routine"]
    for kind in ("table", "type", "index"):
        assert step[kind] == ours[kind] - set(UPSTREAM_KEPT.get(kind, ())), kind
    assert step["view"] == ours["view"] == {"topic_bindings"}
    drops = re.findall(r"^DROP (?:FUNCTION|PROCEDURE) (pgmq\.[^;]+);$", text, re.M)
    assert len(drops) == 75 + 1  # upstream's routines but the renamed trigger function, then that one
    assert drops[-1] == "pgmq._upstream_notify_queue_listeners()"
    assert text.index("ALTER FUNCTION pgmq.notify_queue_listeners() RENAME TO _upstream_notify_queue_listeners") \
        < text.index(f"DROP FUNCTION {drops[0]};") < text.index("CREATE FUNCTION pgmq.notify_queue_listeners()")
    assert "\nCREATE SCHEMA pgmq" not in text
    for table in UPSTREAM_KEPT["table"]:
        assert f"-- (upstream's table of pgmq.{table} is kept)" in text
    assert lint_script(text, MANIFEST, target, previous="") == []


def test_extension_and_standalone_forms(files):
    ext = files[render.upgrade_name(UPSTREAM, VERSION)]
    alone = files[render.upgrade_name(UPSTREAM, VERSION, "standalone")]
    assert ext.startswith(f'\\echo Use "ALTER EXTENSION pgmq UPDATE TO \'{VERSION}\'" to load this file. \\quit\n')
    assert "ALTER EXTENSION pgmq DROP TABLE pgmq.topic_bindings;" in ext
    assert "pg_extension_config_dump('pgmq.queue_owners'" in ext
    assert "pg_extension_config_dump('pgmq.meta'" not in ext  # upstream's registration stays
    assert "COMMENT ON SCHEMA" not in ext and "ALTER SCHEMA" not in ext
    assert "\\echo" not in alone and "pg_extension_config_dump" not in alone
    assert "\nALTER EXTENSION pgmq DROP" not in alone
    assert alone.index("DO $check$") < alone.index("ALTER SCHEMA pgmq OWNER TO CURRENT_USER;") < alone.index("pre: ")
    assert alone.rstrip().endswith(f"COMMENT ON SCHEMA pgmq IS 'pgmq {VERSION} (standalone)';")
    # both forms run the one sweep of queue tables (templates/_macros/adopt.sql.j2, which the
    # 2.8.0 -> 2.9.0 step ran too), then hand the tables over
    for target, text in (("extension", ext), ("standalone", alone)):
        macro = render.make_env(target).get_template("_macros/adopt.sql.j2").module.sweep_queue_tables()
        assert macro.strip() in text, target
    sweep = ext[ext.index("DO $sweep$"):ext.index("$sweep$;")]
    assert sweep in ext and sweep in alone
    assert ext.index("DO $sweep$") < ext.index("DO $handover$")


def test_one_step_serves_every_upstream_version_through_a_bridge(files):
    """The step names the upstream versions only in comments and messages; each bridge is a
    comment that names no version of ours (every release ships it unchanged)."""
    for target in render.TARGETS:
        text = files[render.upgrade_name(UPSTREAM, VERSION, target)]
        assert "does not hold upstream PGMQ 1.13.0 or 1.13.1: % missing" in text
        assert not any(render.upgrade_name(u, VERSION, target) in files for u in MANIFEST.upstream)
    ext = files[render.upgrade_name(UPSTREAM, VERSION)]
    assert "after the bridge from its\n-- version to 1.13.x: pgmq--1.13.0--1.13.x.sql or pgmq--1.13.1--1.13.x.sql)" in ext
    for u in MANIFEST.upstream:
        bridge = files[render.upgrade_name(u, UPSTREAM)]
        assert bridge.startswith(f"-- upstream PGMQ {u} -> 1.13.x: a bridge, nothing to run.")
        assert parse_sql(bridge) == () and VERSION not in bridge
        assert all(line.startswith("-- ") for line in bridge.splitlines())
        assert lint_script(bridge, MANIFEST, "extension", previous="") == []
    assert not any(f"pgmq-standalone--{u}--" in name for name in files for u in MANIFEST.upstream)


def test_a_kept_object_missing_from_the_install_script_is_an_error(monkeypatch):
    monkeypatch.setitem(UPSTREAM_KEPT, "table", (*UPSTREAM_KEPT["table"], "no_such_table"))
    with pytest.raises(render.RenderError, match="does not create what manifest.UPSTREAM_KEPT lists: config_dump no_such_table, table no_such"):
        render.upstream_body(MANIFEST, "extension")


def test_missing_upstream_templates_are_reported(tmp_path):
    import shutil

    from pgmq_build.paths import extension_dir, templates_dir

    shutil.copytree(templates_dir(), tmp_path / "t")
    (tmp_path / "t" / "upgrades" / "upstream" / "post.sql.j2").unlink()
    problems = render.release_problems(extension_dir(), MANIFEST, tmp_path / "t")
    assert any("templates/upgrades/upstream/post.sql.j2" in p for p in problems)
