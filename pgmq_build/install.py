"""Putting the extension into a server: files into sharedir, CREATE/ALTER EXTENSION, or the
standalone script for databases that cannot take extension files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psycopg

from .manifest import MANIFEST
from .paths import extension_dir
from .render import standalone_name


class InstallError(RuntimeError):
    pass


def sharedir(pg_config: str = "pg_config") -> Path:
    exe = shutil.which(pg_config)
    if exe is None:
        raise InstallError(
            f"{pg_config} not found: install the server's development files "
            "(Debian: postgresql-server-dev-15) or pass --pg-config PATH"
        )
    out = subprocess.run([exe, "--sharedir"], capture_output=True, text=True)
    if out.returncode != 0:
        raise InstallError(f"{exe} --sharedir failed: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def extension_files(src: Path | None = None) -> list[Path]:
    src = src or extension_dir()
    files = [src / "pgmq.control", *sorted(src.glob("pgmq--*.sql"))]
    missing = [f for f in files if not f.exists()]
    if missing or len(files) < 2:
        raise InstallError(f"extension files missing in {src}: run `pgmq-build generate`")
    return files


def install_files(pg_config: str = "pg_config") -> list[Path]:
    """Copy pgmq.control and the pgmq--*.sql scripts into <sharedir>/extension."""
    dest = sharedir(pg_config) / "extension"
    if not dest.is_dir():
        raise InstallError(f"{dest} does not exist: is the PostgreSQL server installed?")
    if not os.access(dest, os.W_OK):
        raise InstallError(f"{dest} is not writable: run as root (sudo make install) or use --standalone")
    copied = []
    for f in extension_files():
        target = dest / f.name
        shutil.copyfile(f, target)
        copied.append(target)
    return copied


def connect(dsn: str, **kw: object) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, **kw)  # type: ignore[arg-type]
    except psycopg.OperationalError as exc:
        raise InstallError(f"cannot connect to the server ({dsn!r}): {str(exc).strip()}") from exc


def create_or_update_extension(dsn: str) -> str:
    """CREATE EXTENSION pgmq, or ALTER EXTENSION pgmq UPDATE when an older version is there."""
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'").fetchone()
        try:
            if row is None:
                conn.execute("CREATE EXTENSION pgmq")
            elif row[0] != MANIFEST.version:
                conn.execute("ALTER EXTENSION pgmq UPDATE")
        except psycopg.Error as exc:
            raise InstallError(f"installing the extension failed: {str(exc).strip()}") from exc
        return conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'").fetchone()[0]


def standalone_script() -> str:
    path = extension_dir() / standalone_name()
    if not path.exists():
        raise InstallError(f"{path} missing: run `pgmq-build generate`")
    return path.read_text()


def apply_standalone(dsn: str) -> str:
    """Run the standalone script in one transaction; nothing is left behind if it fails."""
    script = standalone_script()
    with connect(dsn) as conn:
        exists = conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmq'").fetchone()
        if exists:
            raise InstallError("schema pgmq already exists in this database; nothing was changed")
        try:
            conn.execute(script)  # no parameters: sent as one simple-protocol batch
        except psycopg.Error as exc:
            raise InstallError(f"the standalone script failed (rolled back): {str(exc).strip()}") from exc
    return MANIFEST.version


def ensure_pgmq(conn: psycopg.Connection) -> str:
    """Make pgmq usable in conn's database: keep it, CREATE EXTENSION, or the standalone script.
    Returns how it got there."""
    if conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmq'").fetchone():
        return "already installed"
    available = conn.execute(
        "SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'pgmq'"
    ).fetchone()
    if available:
        conn.execute("CREATE EXTENSION pgmq")
        return f"CREATE EXTENSION pgmq (version {available[0]})"
    conn.execute(standalone_script())
    return "standalone script (the extension files are not installed on this server)"
