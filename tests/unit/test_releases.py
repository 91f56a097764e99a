"""Released versions are frozen and every version after them ships generated upgrade scripts:
the manifest's records, `pgmq-build check` / `generate` refusals, the rendered upgrade scripts,
their lint and pgspot runs. No server."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path

import pytest

from pgmq_build import cli, history, pgspot, render
from pgmq_build.lint import lint_script
from pgmq_build.manifest import MANIFEST, RELEASED, VERSION, Release, version_key
from pgmq_build.paths import extension_dir, templates_dir
from tests.helpers import run_cli
from tests.unit.test_lint_rules import DUMP, GUARD, TABLE, M, create_f, script

OLD = RELEASED[-1].version
PREV = RELEASED[-2].version
STEP = f"{OLD}--{VERSION}"
# the step from upstream PGMQ (docs/guides/migrating-from-pgmq.md), in both forms, and the
# extension's bridges from upstream's versions to it (1.13.x: manifest.UPSTREAM_BRIDGE)
UPSTREAM_FILES = [f"{prefix}--{MANIFEST.bridge}--{VERSION}.sql" for prefix in ("pgmq", "pgmq-standalone")]
BRIDGES = [f"pgmq--{u}--{MANIFEST.bridge}.sql" for u in MANIFEST.upstream]


@pytest.fixture
def ext_copy(tmp_path, monkeypatch) -> Path:
    """A copy of extension/ that `pgmq-build check` looks at."""
    out = tmp_path / "extension"
    shutil.copytree(extension_dir(), out)
    monkeypatch.setattr(cli, "extension_dir", lambda: out)
    return out


@pytest.fixture
def templates_copy(tmp_path, monkeypatch) -> Path:
    out = tmp_path / "templates"
    shutil.copytree(templates_dir(), out)
    monkeypatch.setattr(render, "templates_dir", lambda: out)
    return out


# ------------------------------------------------------------------------------- the manifest

def test_version_and_releases():
    # The version being built is never a released one, releases are in order and each
    # release (and the version being built) is reached from the one before it by one step.
    released = [r.version for r in RELEASED]
    assert released[:2] == ["2.0.0", "2.1.0"]
    assert VERSION not in released
    assert released == sorted(released, key=version_key)
    assert version_key(VERSION) > version_key(released[-1])
    assert MANIFEST.versions == (*released, VERSION)
    assert MANIFEST.steps == tuple(zip(MANIFEST.versions, MANIFEST.versions[1:], strict=False))
    assert version_key("2.10.0") > version_key("2.9.1")


def test_released_hashes_are_the_committed_files():
    for release in RELEASED:
        assert set(release.scripts) >= {f"pgmq--{release.version}.sql", f"pgmq-standalone--{release.version}.sql"}
        for name, digest in release.scripts.items():
            assert hashlib.sha256(history.find(name).read_bytes()).hexdigest() == digest, name


def test_pyproject_version_matches():
    text = (extension_dir().parent / "pyproject.toml").read_text()
    assert f'\nversion = "{VERSION}"\n' in text


def test_every_step_has_its_templates():
    for old, new in MANIFEST.steps:
        for name in render.STEP_TEMPLATES:
            assert (templates_dir() / "upgrades" / f"{old}--{new}" / name).is_file()


# ------------------------------------------------------------------------------- rendering

def test_render_all_has_the_upgrade_scripts_and_not_the_released_ones():
    files = render.render_all()
    assert list(files) == ["pgmq.control", f"pgmq--{VERSION}.sql", f"pgmq-standalone--{VERSION}.sql",
                           f"pgmq--{STEP}.sql", f"pgmq-standalone--{STEP}.sql", *UPSTREAM_FILES, *BRIDGES]
    # a released bridge names no version of ours: it renders again, the same bytes as released
    released = render.released_scripts(RELEASED)
    assert not (set(files) - set(BRIDGES)) & set(released)
    for name in set(BRIDGES) & set(released):
        assert hashlib.sha256(files[name].encode()).hexdigest() == released[name][1]


@pytest.mark.parametrize("with_bridges", [False, True])
def test_the_next_version_renders_after_a_release_of_one_step_from_upstream(templates_copy, with_bridges):
    """VERSION released as 2.12.0 was (one step from upstream, 1.13.x; its record may list the
    bridges or not), next to the releases that shipped a step per upstream version: the next
    version renders its own step from 1.13.x and the same bridges, and a later generate moves
    VERSION's step to history/ but no bridge."""
    files = render.render_all()
    scripts = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in files.items()
               if n.endswith(f"{VERSION}.sql") or (with_bridges and n in BRIDGES)}
    nxt = "9.0.0"
    (templates_copy / "upgrades" / f"{VERSION}--{nxt}").mkdir()
    for name in render.STEP_TEMPLATES:
        (templates_copy / "upgrades" / f"{VERSION}--{nxt}" / name).write_text("")
    manifest = dataclasses.replace(MANIFEST, version=nxt, released=(*RELEASED, Release(VERSION, scripts)))
    assert render.release_problems(extension_dir(), manifest) == []
    after = render.render_all(manifest)
    assert list(after)[-4:] == [f"pgmq--{MANIFEST.bridge}--{nxt}.sql", f"pgmq-standalone--{MANIFEST.bridge}--{nxt}.sql",
                                *BRIDGES]
    assert [after[n] for n in BRIDGES] == [files[n] for n in BRIDGES]
    assert render.frozen_problems(extension_dir(), manifest.released) == []
    superseded = history.historical(manifest.released)
    assert set(UPSTREAM_FILES) | {"pgmq--1.13.0--2.11.0.sql", "pgmq-standalone--1.13.1--2.11.0.sql"} <= superseded
    assert not superseded & set(BRIDGES)


def test_extension_upgrade_script_form():
    text = render.render_all()[f"pgmq--{STEP}.sql"]
    assert text.startswith(f'\\echo Use "ALTER EXTENSION pgmq UPDATE TO \'{VERSION}\'" to load this file. \\quit\n')
    assert "SET LOCAL search_path = pg_catalog, pg_temp;" in text
    assert f"pre: templates/upgrades/{STEP}/pre.sql.j2" in text
    assert f"post: templates/upgrades/{STEP}/post.sql.j2" in text
    assert "COMMENT ON SCHEMA" not in text and "\\echo" not in text.split("\n", 1)[1]


def test_standalone_upgrade_script_form():
    text = render.render_all()[f"pgmq-standalone--{STEP}.sql"]
    assert "\\echo" not in text
    assert f"IF v_found <> 'pgmq {OLD} (standalone)' THEN" in text
    assert text.rstrip().endswith(f"COMMENT ON SCHEMA pgmq IS 'pgmq {VERSION} (standalone)';")
    assert text.index("DO $check$") < text.index("pre: templates/")


def test_step_templates_see_the_versions_and_the_macros(templates_copy):
    (templates_copy / "upgrades" / STEP / "pre.sql.j2").write_text(
        '{% from "_macros/ddl.sql.j2" import config_dump %}\n'
        "-- from {{ from_version }} to {{ to_version }} ({{ target }})\n{{ config_dump('meta') }}\n")
    files = render.render_all()
    assert f"-- from {OLD} to {VERSION} (extension)\nSELECT pg_catalog.pg_extension_config_dump('pgmq.meta', '');" \
        in files[f"pgmq--{STEP}.sql"]
    assert f"-- from {OLD} to {VERSION} (standalone)\n" in files[f"pgmq-standalone--{STEP}.sql"]
    assert "pg_extension_config_dump" not in files[f"pgmq-standalone--{STEP}.sql"]


def test_routine_changes_reach_the_upgrade_script(templates_copy):
    path = templates_copy / "features" / "core" / "functions"
    target = next(p for p in sorted(path.rglob("*.j2")) if "validate_queue_name" in p.read_text())
    text = target.read_text()
    target.write_text(text.replace("BEGIN\n", "BEGIN\n    -- changed\n", 1))
    upgraded = render.render_all()[f"pgmq--{STEP}.sql"]
    assert "\nCREATE OR REPLACE FUNCTION pgmq." in upgraded
    assert "    -- changed\n" in upgraded


# ------------------------------------------------------------------------------- check

def test_check_passes_on_the_committed_tree():
    result = run_cli("check")
    assert result.exit_code == 0, result.output


def test_check_fails_when_a_released_script_is_altered(ext_copy):
    # a released step of the chain (extension/; history/'s are tests/unit/test_history.py's)
    path = ext_copy / f"pgmq--{PREV}--{OLD}.sql"
    path.write_text(path.read_text() + "-- a fix\n")
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"altered released script: pgmq--{PREV}--{OLD}.sql" in result.output
    assert "frozen" in result.output


def test_check_fails_when_a_released_script_is_missing(ext_copy):
    (ext_copy / f"pgmq-standalone--{PREV}--{OLD}.sql").unlink()
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"missing released script: pgmq-standalone--{PREV}--{OLD}.sql" in result.output


def test_check_flags_unexpected_and_stale_upgrade_scripts(ext_copy):
    (ext_copy / f"pgmq--{OLD}--9.9.9.sql").write_text("-- stray\n")
    up = ext_copy / f"pgmq--{STEP}.sql"
    up.write_text(up.read_text() + "-- hand edit\n")
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"unexpected: pgmq--{OLD}--9.9.9.sql" in result.output
    assert f"differs: pgmq--{STEP}.sql" in result.output


def test_check_fails_when_a_step_folder_is_missing(templates_copy):
    shutil.rmtree(templates_copy / "upgrades" / STEP)
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"missing upgrade step template: templates/upgrades/{STEP}/pre.sql.j2" in result.output
    assert f"templates/upgrades/{STEP}/post.sql.j2" in result.output


def released_current(monkeypatch):
    digests = {name: "0" * 64 for name in render.render_all()}
    manifest = dataclasses.replace(MANIFEST, released=(*RELEASED, Release(VERSION, digests)))
    monkeypatch.setattr(cli, "MANIFEST", manifest)
    return manifest


def test_check_and_generate_refuse_a_released_version(monkeypatch, tmp_path):
    manifest = released_current(monkeypatch)
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"version {VERSION} is released" in result.output and "bump the version" in result.output
    result = run_cli("generate", "--out", str(tmp_path))
    assert result.exit_code == 1 and "bump the version" in result.output
    with pytest.raises(render.RenderError, match="bump the version"):
        render.render_all(manifest)


def test_a_release_must_record_all_its_scripts():
    # releasing the version being built with one of its files recorded (and that one wrong)
    nxt = "9.0.0"
    manifest = dataclasses.replace(MANIFEST, version=nxt, released=(
        *RELEASED, Release(VERSION, {f"pgmq--{VERSION}.sql": "0" * 64})))
    problems = render.release_problems(extension_dir(), manifest)
    for name in (f"pgmq-standalone--{VERSION}.sql", f"pgmq--{STEP}.sql", f"pgmq-standalone--{STEP}.sql"):
        assert f"release {VERSION} does not record the sha256 of {name} in manifest.RELEASED" in problems
    assert any(p.startswith(f"altered released script: pgmq--{VERSION}.sql") for p in problems)
    assert f"missing upgrade step template: templates/upgrades/{VERSION}--{nxt}/pre.sql.j2" in problems[-2]


def test_versions_must_ascend():
    manifest = dataclasses.replace(MANIFEST, version="1.0.0")
    assert any("versions out of order" in p for p in render.release_problems(extension_dir(), manifest))


def test_generate_into_a_directory_copies_the_released_scripts(tmp_path):
    result = run_cli("generate", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in extension_dir().iterdir())
    assert render.diff_outputs(tmp_path, render.render_all()) == []


def test_render_refuses_an_altered_released_script(tmp_path):
    shutil.copytree(extension_dir(), tmp_path / "e")
    (tmp_path / "e" / f"pgmq--{OLD}.sql").write_text("-- not it\n")
    with pytest.raises(render.RenderError, match=f"altered released script: pgmq--{OLD}.sql"):
        render.render_all(frozen=tmp_path / "e")


# ------------------------------------------------------------------------------- lint and pgspot

def test_lint_covers_the_upgrade_scripts_and_skips_released_ones():
    todo, skipped = cli.lint_targets(())
    names = {p.name: previous is not None for p, _, previous in todo}
    assert names == {f"pgmq--{VERSION}.sql": False, f"pgmq-standalone--{VERSION}.sql": False,
                     f"pgmq--{STEP}.sql": True, f"pgmq-standalone--{STEP}.sql": True,
                     **dict.fromkeys(UPSTREAM_FILES, True)}
    # the step from upstream is linted as an upgrade from an unknown script (upstream's is not here)
    assert all(previous == "" for p, _, previous in todo if p.name in UPSTREAM_FILES)
    # the released scripts that ship: the chain of steps and the bridges (2.12.0 released
    # them); the rest is in history/extension/
    shipped = sorted(history.chain(RELEASED) | set(BRIDGES))
    assert sorted(p.name for p in skipped) == shipped
    result = run_cli("lint")
    assert result.exit_code == 0, result.output
    assert f"{len(shipped)} released script(s) skipped" in result.output


def test_pgspot_checks_each_upgrade_script_after_its_source():
    files = sorted(extension_dir().glob("*.sql"))
    batches = pgspot.batches(files)
    # install scripts, the step from upstream and the bridges (nothing of ours to append them to) alone
    from_upstream = {f.name for f in files if f.name.split("--")[1] in (*MANIFEST.upstream, MANIFEST.bridge)}
    assert from_upstream == set(UPSTREAM_FILES + BRIDGES)
    assert batches[0] == ([f for f in files if f.name.count("--") == 1 or f.name in from_upstream], False)
    # each of our steps after the install script it starts from
    steps = [(f"{prefix}--{a}.sql", f"{prefix}--{a}--{b}.sql") for a, b in MANIFEST.steps
             if a not in MANIFEST.retired_versions for prefix in ("pgmq", "pgmq-standalone")]
    assert sorted((tuple(p.name for p in b), append) for b, append in batches[1:]) == sorted(
        (step, True) for step in steps)
    assert pgspot.command(["pgspot"], [Path("a"), Path("b")], append=True)[-3:] == ["--append", "a", "b"]


# The lint of an upgrade script: the small manifest and base script of the rule tests.
UP_GUARD = "\\echo Use \"ALTER EXTENSION pgmq UPDATE TO '9.9.9'\" to load this file. \\quit\n"
PREVIOUS = script()


def up(body: str, head: str = UP_GUARD, target: str = "extension") -> list[str]:
    return [p.code for p in lint_script(head + body, M, target, previous=PREVIOUS)]


def test_upgrade_lint_allows_replacing_a_routine_of_the_previous_version():
    assert up(create_f(head="CREATE OR REPLACE FUNCTION pgmq.f")) == []
    assert up("") == []  # an upgrade need not create every routine
    assert up(TABLE.replace("meta", "extra")) == []


def test_upgrade_lint_refuses():
    # a new overload (its name's policy entry covers it) may not be CREATE OR REPLACEd
    assert up(create_f(head="CREATE OR REPLACE FUNCTION pgmq.f", args="queue_name text")) == ["PGMQ007"]
    assert up(create_f().replace("pgmq.f(", "pgmq.nope(")) == ["PGMQ002"]
    assert up("CREATE TABLE IF NOT EXISTS pgmq.x (a int);\n") == ["PGMQ007"]
    assert up("CREATE OR REPLACE VIEW pgmq.v AS SELECT 1;\n") == ["PGMQ007"]
    assert up(create_f() + create_f()) == ["PGMQ002"]  # created twice
    assert up("", head=GUARD + "\n") == ["PGMQ001"]  # the install guard in an upgrade script
    assert up("BEGIN;\n") == ["PGMQ009"]


def test_upgrade_lint_config_tables():
    assert up(TABLE) == ["PGMQ008"]  # a config table created by the upgrade must be dumped
    assert up(TABLE + DUMP) == []
    assert up(DUMP) == []  # dumping an existing one again (a new filter) is fine
    assert up(TABLE, head="", target="standalone") == []


def test_install_lint_refuses_the_upgrade_guard():
    assert [p.code for p in lint_script(script(head=UP_GUARD), M)] == ["PGMQ001"]
