"""pgspot (Timescale's checker for extension scripts) over the generated scripts.

pgspot pins ``pglast==7.21`` while our lint needs pglast 8 (pglast 7's PL/pgSQL parser rejects
record fields such as ``v_msg.msg_id`` of a declared composite type), so the two cannot share
one environment: pgspot gets its own virtualenv, ``.venv-pgspot`` in the checkout, made on
first use with the pinned version below.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .manifest import MANIFEST, Manifest, split_args
from .paths import extension_dir

PGSPOT_VERSION = "0.9.4"


class PgspotError(Exception):
    pass


def allowed_unpinned(manifest: Manifest = MANIFEST) -> list[str]:
    """The only narrowing of pgspot we accept, kept in this one place: routines the manifest
    declares with an ``unpinned_reason`` (a procedure that COMMITs cannot SET search_path; a
    callback name must resolve in the caller's path) may lack SET search_path, so pgspot's PS005
    is waived for exactly them. pgspot still checks their bodies as if the search_path were
    hostile, so every name and operator in them must be qualified. Spelled as pgspot spells a
    routine: ``schema.name(arg type,arg type)``."""
    return [f"{manifest.schema}.{f.name}({','.join(split_args(f.identity_args))})"
            for f in manifest.functions if f.unpinned_reason]


def command(pgspot: Path | str, files: Sequence[Path], manifest: Manifest = MANIFEST) -> list[str]:
    cmd = [str(pgspot)]
    for routine in allowed_unpinned(manifest):
        cmd += ["--proc-without-search-path", routine]
    return cmd + [str(f) for f in files]


def default_venv() -> Path:
    return extension_dir().parent / ".venv-pgspot"


def ensure_pgspot(venv: Path | None = None) -> Path:
    """The pgspot executable of the pinned version, installing it into its venv if needed."""
    venv = venv or default_venv()
    exe = venv / "bin" / "pgspot"
    if _version(exe) == PGSPOT_VERSION:
        return exe
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", f"pgspot=={PGSPOT_VERSION}"], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PgspotError(f"could not install pgspot {PGSPOT_VERSION} into {venv}: {exc}") from exc
    if _version(exe) != PGSPOT_VERSION:
        raise PgspotError(f"{exe} does not report version {PGSPOT_VERSION}")
    return exe


def _version(exe: Path) -> str | None:
    if not os.access(exe, os.X_OK):
        return None
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout.split()
    return out[-1] if out else None


def run(files: Sequence[Path], pgspot: Path | None = None) -> int:
    """Run pgspot over files; its exit status (0: no error, warning, unknown or parse failure)."""
    exe = pgspot or ensure_pgspot()
    return subprocess.run(command(exe, files)).returncode
