"""pgspot (Timescale's checker for extension scripts) over the generated scripts.

pgspot pins ``pglast==7.21`` while our lint needs pglast 8 (pglast 7's PL/pgSQL parser rejects
record fields such as ``v_msg.msg_id`` of a declared composite type), so the two cannot share
one environment: pgspot and its pglast are installed on first use with ``pip install --target``
into ``.venv-pgspot`` in the checkout (no venv module needed, nothing else changes) and run
with that directory first on PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import history, surface
from .lint.sqlast import split_args
from .manifest import MANIFEST, Manifest
from .paths import extension_dir

PGSPOT_VERSION = "0.9.4"


class PgspotError(Exception):
    pass


def allowed_unpinned(manifest: Manifest = MANIFEST) -> list[str]:
    """The only narrowing of pgspot we accept, kept in this one place: routines whose manifest
    policy gives an ``unpinned_reason`` (a procedure that COMMITs cannot SET search_path; a
    callback name must resolve in the caller's path) may lack SET search_path, so pgspot's PS005
    is waived for exactly them (each overload, as the templates create them). pgspot still
    checks their bodies as if the search_path were hostile, so every name and operator in them
    must be qualified. Spelled as pgspot spells a routine: ``schema.name(arg type,arg type)``."""
    return [f"{manifest.schema}.{e.name}({','.join(split_args(e.signature.identity))})"
            for e in surface.current(manifest) if e.policy and e.policy.unpinned_reason]


def command(pgspot: Sequence[str], files: Sequence[Path], manifest: Manifest = MANIFEST,
            append: bool = False) -> list[str]:
    cmd = list(pgspot)
    for routine in allowed_unpinned(manifest):
        cmd += ["--proc-without-search-path", routine]
    return cmd + (["--append"] if append else []) + [str(f) for f in files]


def upgrade_source(path: Path) -> Path | None:
    """For an upgrade script ``pgmq[-standalone]--A--B.sql``: the install script of A next to it
    (or in extension/); None for any other file."""
    prefix, *versions = path.name.removesuffix(".sql").split("--")
    if len(versions) != 2 or prefix not in ("pgmq", "pgmq-standalone") or \
            versions[0] in (*MANIFEST.upstream, MANIFEST.bridge):
        return None  # a bridge, or the step from upstream PGMQ (it creates our routines): nothing of ours before it
    name = f"{prefix}--{versions[0]}.sql"
    return path.parent / name if (path.parent / name).exists() else history.find(name)


def batches(files: Sequence[Path]) -> list[tuple[list[Path], bool]]:
    """The pgspot runs over files: (files, append). Install scripts are checked together, as
    they are. Each upgrade script is checked appended to the install script of the version it
    upgrades from: its CREATE OR REPLACE of an existing routine is then known to replace one of
    ours (pgspot's PS002 would otherwise flag every such statement, since nothing in the upgrade
    script alone says who made the routine), while a CREATE OR REPLACE of anything that version
    does not have is still reported. The replaced routine is an extension member, so PostgreSQL
    itself refuses to let ALTER EXTENSION UPDATE replace a look-alike (CVE-2022-2625), and in
    the standalone form it exists and is owned by the installer."""
    plain = [f for f in files if upgrade_source(f) is None]
    out = [(plain, False)] if plain else []
    for f in files:
        source = upgrade_source(f)
        if source is not None:
            if not source.exists():
                raise PgspotError(f"{f.name}: the install script it upgrades from, {source}, is missing")
            out.append(([source, f], True))
    return out


def default_venv() -> Path:
    return extension_dir().parent / ".venv-pgspot"


def _env(target: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(target), "PYTHONNOUSERSITE": "1"}


def ensure_pgspot(target: Path | None = None) -> list[str]:
    """The command running pgspot of the pinned version, installing it into `target` if needed."""
    target = target or default_venv()
    cmd = [sys.executable, "-m", "pgspot"]
    if _version(cmd, target) == PGSPOT_VERSION:
        return cmd
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--upgrade", "--target", str(target), f"pgspot=={PGSPOT_VERSION}"], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PgspotError(f"could not install pgspot {PGSPOT_VERSION} into {target}: {exc}") from exc
    if _version(cmd, target) != PGSPOT_VERSION:
        raise PgspotError(f"pgspot in {target} does not report version {PGSPOT_VERSION}")
    return cmd


def _version(cmd: Sequence[str], target: Path) -> str | None:
    if not target.is_dir():
        return None
    proc = subprocess.run([*cmd, "--version"], capture_output=True, text=True, env=_env(target))
    out = proc.stdout.split()
    return out[-1] if proc.returncode == 0 and out else None


def run(files: Sequence[Path], pgspot: Path | None = None) -> int:
    """Run pgspot over files (see ``batches``); the first non-zero exit status, else 0 (no error,
    warning, unknown or parse failure). `pgspot`: an executable to use instead of the pinned
    install."""
    if pgspot is not None:
        exe, env = [str(pgspot)], None
    else:
        target = default_venv()
        exe, env = ensure_pgspot(target), _env(target)
    status = 0
    for batch, append in batches(files):
        code = subprocess.run(command(exe, batch, append=append), env=env).returncode
        status = status or code
    return status
