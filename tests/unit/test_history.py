"""What ships in extension/ (what an upgrade can use) and what waits in history/extension/
(released, frozen, for the tests), and the move a release makes (pgmq_build/history.py)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from pgmq_build import cli, history, render
from pgmq_build.manifest import MANIFEST, RELEASED, VERSION, Release
from pgmq_build.paths import extension_dir, history_dir
from pgmq_build.scriptnames import bridge_names
from tests.helpers import run_cli

# the step from upstream PGMQ (1.13.x: 1.13.0 or 1.13.1) into VERSION, and the extension's bridges to 1.13.x
UPSTREAM_STEPS = {f"{p}--{MANIFEST.bridge}--{VERSION}.sql" for p in ("pgmq", "pgmq-standalone")}
BRIDGES = {f"pgmq--{u}--{MANIFEST.bridge}.sql" for u in MANIFEST.upstream}
MB = 1024 * 1024


def test_extension_holds_the_current_scripts_the_chain_and_the_upstream_step_only():
    generated = set(render.render_all())
    assert UPSTREAM_STEPS | BRIDGES <= generated
    assert set(bridge_names()) == BRIDGES and MANIFEST.bridge == "1.13.x"
    # no file of ours is named like a step between upstream's own versions
    assert not any(p.name.startswith(f"pgmq--{u}--{w}") for p in extension_dir().iterdir()
                   for u in MANIFEST.upstream for w in MANIFEST.upstream)
    chain = {f"{p}--{a}--{b}.sql" for a, b in MANIFEST.steps if a not in MANIFEST.retired_versions
             for p in ("pgmq", "pgmq-standalone")}
    assert {p.name for p in extension_dir().iterdir()} == generated | chain
    # every other released script is in history/, none of them in extension/ too
    assert {p.name for p in history_dir().iterdir()} == history.historical(RELEASED)
    assert f"pgmq--{RELEASED[0].version}.sql" in history.historical(RELEASED)
    # 2.11.0 and older shipped a step per upstream version, in both forms
    assert {f"{p}--{u}--2.11.0.sql" for u in MANIFEST.upstream
            for p in ("pgmq", "pgmq-standalone")} <= history.historical(RELEASED)


def test_what_make_install_ships_fits_the_budget():
    """`make install` copies pgmq.control and extension/pgmq--*.sql: the step a release adds to
    the chain (the newest released one) at most 1 MB; what is replaced at each release (the
    install script and the one step from upstream, 1.13.x) at most 2 MB; the bridges from
    upstream's versions a comment each; the whole at most 5 MB, as issue 31 asked.
    2.12.0: 4.64 MB in all (MB: 2**20 bytes; the install script 0.83, the step from upstream
    0.88, the chain 2.92), down from 5.52 MB when each upstream version had its own 0.88 MB step
    (the two differed only in the version they named: tests/unit/test_upstream_steps.py).
    2.13.0 reached 4.92 MB with the chain from 2.0.0: a step a release (0.06 to 0.62 MB, 0.27 on
    average from 2.4.0 on) outgrows any fixed budget, so only the steps from the newest
    UPGRADE_WINDOW (10) releases ship; the older retire to history/ (make install-retired)."""
    shipped = [extension_dir() / "pgmq.control", *extension_dir().glob("pgmq--*.sql")]
    assert sum(p.stat().st_size for p in shipped) <= 5 * MB
    replaced = [extension_dir() / f"pgmq--{VERSION}.sql", extension_dir() / f"pgmq--{MANIFEST.bridge}--{VERSION}.sql"]
    assert sum(p.stat().st_size for p in replaced) <= 2 * MB
    assert all((extension_dir() / name).stat().st_size <= 1024 for name in BRIDGES)
    newest = extension_dir() / f"pgmq--{RELEASED[-2].version}--{RELEASED[-1].version}.sql"
    assert newest.stat().st_size <= MB


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Copies of extension/ and history/extension/ that the CLI and the renderer look at."""
    ext, hist = tmp_path / "extension", tmp_path / "history"
    shutil.copytree(extension_dir(), ext)
    shutil.copytree(history_dir(), hist)
    monkeypatch.setattr(cli, "extension_dir", lambda: ext)
    monkeypatch.setattr(history, "extension_dir", lambda: ext)
    monkeypatch.setattr(history, "history_dir", lambda: hist)
    return ext, hist


@pytest.mark.parametrize("with_bridges", [False, True])
def test_a_release_moves_what_it_supersedes_to_history(dirs, with_bridges):
    ext, hist = dirs
    # VERSION released as it is now: its install scripts and the step from upstream are
    # superseded, and the oldest step of the window retires; the bridges stay, whether the
    # release recorded them or not
    scripts = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in ext.glob("*.sql")
               if p.name.endswith(f"{VERSION}.sql") or (with_bridges and p.name in BRIDGES)}
    released = (*RELEASED, Release(VERSION, scripts))
    moved = history.move_superseded(released)
    oldest = f"{RELEASED[-MANIFEST.window].version}--{RELEASED[-MANIFEST.window + 1].version}"
    assert set(moved) == {f"pgmq--{VERSION}.sql", f"pgmq-standalone--{VERSION}.sql", f"pgmq--{oldest}.sql",
                          f"pgmq-standalone--{oldest}.sql"} | UPSTREAM_STEPS
    assert all((hist / n).exists() and not (ext / n).exists() for n in moved)
    assert all((ext / n).exists() and not (hist / n).exists() for n in BRIDGES)
    step = f"{RELEASED[-1].version}--{VERSION}"
    assert (ext / f"pgmq--{step}.sql").exists() and (ext / f"pgmq-standalone--{step}.sql").exists()
    assert history.misplaced(released) == []
    assert render.frozen_problems(ext, released) == []
    assert history.move_superseded(released) == []  # done once


def test_check_fails_on_a_superseded_script_in_extension_and_generate_moves_it(dirs):
    ext, hist = dirs
    name = f"pgmq--{RELEASED[-1].version}.sql"
    (hist / name).replace(ext / name)
    result = run_cli("check")
    assert result.exit_code == 1
    assert f"superseded released script in extension/: {name}" in result.output
    result = run_cli("generate", "--out", str(ext))
    assert result.exit_code == 0, result.output
    assert f"moved {name} to" in result.output
    assert (hist / name).exists() and not (ext / name).exists()
    assert run_cli("check").exit_code == 0


def test_check_fails_on_a_released_script_altered_in_history(dirs):
    ext, hist = dirs
    name = f"pgmq-standalone--{RELEASED[0].version}.sql"
    (hist / name).write_text("-- not it\n")
    result = run_cli("check")
    assert result.exit_code == 1 and f"altered released script: {name}" in result.output


def test_a_chain_step_moved_to_history_is_reported(dirs):
    ext, hist = dirs
    name = f"pgmq--{RELEASED[-2].version}--{RELEASED[-1].version}.sql"
    (ext / name).replace(hist / name)
    assert history.misplaced(RELEASED) == [
        f"released upgrade step in history/extension/ only: {name} (the chain of upgrades needs "
        "it in extension/: move it back)"]


def test_a_released_version_still_installs_from_the_test_copy(dirs):
    """The renderer reads the previous release's install script from history/."""
    ext, hist = dirs
    old = f"pgmq--{RELEASED[-1].version}.sql"
    assert not (ext / old).exists() and (hist / old).exists()
    text = render.read_released(ext, old)
    assert text == (hist / old).read_text()


def test_steps_from_releases_older_than_the_window_retire_to_history():
    window = RELEASED[-MANIFEST.window:]
    assert MANIFEST.retired_versions == tuple(r.version for r in RELEASED[:len(RELEASED) - MANIFEST.window])
    assert MANIFEST.retired_versions and MANIFEST.retired_versions[-1] == RELEASED[-MANIFEST.window - 1].version
    for a, b in zip(RELEASED, RELEASED[1:], strict=False):
        name = f"pgmq--{a.version}--{b.version}.sql"
        shipped = a in window
        assert (extension_dir() / name).exists() == shipped, name
        assert (history_dir() / name).exists() == (not shipped), name
    assert history.retired(RELEASED) == {f"{p}--{a}--{b}.sql" for a, b in zip(MANIFEST.retired_versions, (
        *MANIFEST.retired_versions[1:], window[0].version), strict=True) for p in ("pgmq", "pgmq-standalone")}
    # a wider window ships them again: nothing about a step but its age decides
    assert history.retired(RELEASED, window=len(RELEASED)) == set()
    assert history.chain(RELEASED, window=len(RELEASED)) >= history.retired(RELEASED)


def _make_install(target: str, destdir: Path) -> set[str]:
    """What `make <target> DESTDIR=destdir` puts into the server's extension directory."""
    subprocess.run(["make", "--no-print-directory", "-s", target, f"DESTDIR={destdir}"], check=True,
                   cwd=extension_dir().parent, capture_output=True)
    return {p.name for p in destdir.rglob("extension/pgmq*")}


def test_make_install_retired_adds_the_retired_steps(tmp_path):
    shipped = _make_install("install", tmp_path / "plain")
    assert shipped == {"pgmq.control", *(p.name for p in extension_dir().glob("pgmq--*.sql"))}
    retired = {n for n in history.retired(RELEASED) if n.startswith("pgmq--")}
    assert retired and not retired & shipped
    # what `make install-retired` adds: the retired steps, no other script of history/
    assert _make_install("install-retired", tmp_path / "retired") == shipped | retired


def test_the_guides_name_the_retired_releases_of_this_version():
    """upgrading.md and installing.md say which releases need `make install-retired`: the
    release that moves the window moves their words too."""
    retired = f"({MANIFEST.retired_versions[0]} to {MANIFEST.retired_versions[-1]} today)"
    for guide in ("upgrading.md", "installing.md"):
        text = " ".join((extension_dir().parent / "docs" / "guides" / guide).read_text().split())
        assert retired in text and "make install-retired" in text, guide
