"""Putting the extension into a server: files into sharedir, CREATE/ALTER EXTENSION, or the
standalone script for databases that cannot take extension files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import psycopg
from psycopg.rows import tuple_row

from .manifest import MANIFEST, version_key
from .paths import extension_dir, history_dir
from .scriptnames import standalone_name, upgrade_name


class InstallError(RuntimeError):
    pass


# What an operator command says in a database without pgmq, instead of psycopg's error.
NOT_INSTALLED = ("pgmq is not installed in this database: "
                 "CREATE EXTENSION pgmq there, or run `pgmq-build install --dsn DSN`")


def pgmq_missing(exc: psycopg.Error) -> bool:
    """Whether a server error means that schema pgmq is not there: no CREATE EXTENSION pgmq."""
    return exc.sqlstate == "3F000" and (exc.diag.message_primary or "") == 'schema "pgmq" does not exist'


def has_pgmq(conn: psycopg.Connection) -> bool:
    """Whether pgmq (the extension or the standalone script) is in conn's database: a routine of
    it, not just schema pgmq (DROP EXTENSION pgmq leaves the schema). From the catalog, which
    every role may read (to_regprocedure would need USAGE on the schema)."""
    return conn.cursor(row_factory=tuple_row).execute("""SELECT EXISTS (SELECT FROM pg_catalog.pg_proc p
                                          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                                          WHERE n.nspname = 'pgmq' AND p.proname = 'list_queues')""").fetchone()[0]


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


def install_files(pg_config: str = "pg_config", also: Sequence[Path] = ()) -> list[Path]:
    """Copy pgmq.control and the pgmq--*.sql scripts into <sharedir>/extension; ``also``: more
    directories whose pgmq--*.sql to copy (the tests' history/extension/, for old versions)."""
    dest = sharedir(pg_config) / "extension"
    if not dest.is_dir():
        raise InstallError(f"{dest} does not exist: is the PostgreSQL server installed?")
    if not os.access(dest, os.W_OK):
        raise InstallError(f"{dest} is not writable: run as root (sudo make install) or use --standalone")
    copied = []
    for f in [*extension_files(), *(f for d in also for f in sorted(d.glob("pgmq--*.sql")))]:
        target = dest / f.name
        data = f.read_bytes()
        if not target.exists() or target.read_bytes() != data:
            # a server reading the file meanwhile (another test process) sees the old one or the
            # new one whole, never a half-written one
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        copied.append(target)
    return copied


def connect(dsn: str, **kw: object) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, **kw)  # type: ignore[arg-type]
    except psycopg.OperationalError as exc:
        raise InstallError(f"cannot connect to the server ({dsn!r}): {str(exc).strip()}") from exc


class ExtensionResult(NamedTuple):
    """What create_or_update_extension did: ``created``, ``updated`` or ``current``."""

    action: str
    version: str  # extversion now
    previous: str | None  # extversion before

    def __str__(self) -> str:
        if self.action == "created":
            return f"CREATE EXTENSION pgmq: version {self.version} is installed"
        if self.action == "updated":
            return f"ALTER EXTENSION pgmq UPDATE: {self.previous} -> {self.version}"
        return f"extension pgmq {self.version} is already installed; nothing was changed"


def create_or_update_extension(dsn: str) -> ExtensionResult:
    """CREATE EXTENSION pgmq, or ALTER EXTENSION pgmq UPDATE when an older version is there
    (PostgreSQL runs the chain of upgrade scripts in one transaction)."""
    query = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'"
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        previous = row[0] if row else None
        if previous is None and conn.execute(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmq'").fetchone():
            raise InstallError("schema pgmq exists but the extension is not installed (a standalone install?): "
                               "upgrade it with `pgmq-build install --standalone`; nothing was changed")
        if previous is not None and previous not in MANIFEST.versions:
            raise InstallError(f"the installed pgmq {previous} is not a version this pgmq-build knows "
                               f"({', '.join(MANIFEST.versions)}); nothing was changed")
        try:
            if previous is None:
                conn.execute("CREATE EXTENSION pgmq")
            elif previous != MANIFEST.version:
                conn.execute("ALTER EXTENSION pgmq UPDATE")
        except psycopg.Error as exc:
            hint = f"; {RETIRED_HINT.format(version=previous)}" if previous in MANIFEST.retired_versions else ""
            raise InstallError(f"installing the extension failed (rolled back): {str(exc).strip()}{hint}") from exc
        version = conn.execute(query).fetchone()[0]
    action = "created" if previous is None else "current" if previous == version else "updated"
    return ExtensionResult(action, version, previous)


# What an upgrade from a release older than the window needs (manifest.UPGRADE_WINDOW).
RETIRED_HINT = ("pgmq {version} is older than the releases whose upgrade steps this pgmq-build ships "
                f"(from {MANIFEST.released_versions[-MANIFEST.window:][0]} on): in a checkout of pgmq-build, "
                "`make install-retired` installs the retired steps (or upgrade through an older pgmq-build first)")


def standalone_script(name: str | None = None) -> str:
    """A standalone script of extension/; a retired step (an upgrade from a release older than
    the window) from history/extension/ when this is a checkout."""
    path = extension_dir() / (name or standalone_name())
    if not path.exists() and (history_dir() / path.name).exists():
        path = history_dir() / path.name
    if not path.exists():
        raise InstallError(f"{path} missing: run `pgmq-build generate`")
    return path.read_text()


STANDALONE_COMMENT = re.compile(r"pgmq (?P<version>\d+(?:\.\d+)*) \(standalone\)")


class StandaloneResult(NamedTuple):
    """What apply_standalone did: ``installed``, ``upgraded`` or ``current`` (nothing to do)."""

    action: str
    version: str  # the version now installed
    previous: str | None  # the version found before an upgrade
    scripts: tuple[str, ...]  # the scripts run, in order, in one transaction

    def __str__(self) -> str:
        if self.action == "installed":
            return f"installed pgmq {self.version} with the standalone script ({self.scripts[0]})"
        if self.action == "upgraded":
            return (f"upgraded the standalone pgmq {self.previous} to {self.version} in one transaction "
                    f"({', '.join(self.scripts)})")
        return f"the standalone pgmq {self.version} is already installed; nothing was changed"


def standalone_upgrade_chain(installed: str, manifest=MANIFEST) -> list[str]:
    """The standalone upgrade scripts from ``installed`` to the current version, in order."""
    versions = list(manifest.versions)
    if installed not in versions:
        newer = version_key(installed) > version_key(manifest.version)
        why = (f"newer than this pgmq-build ({manifest.version}): upgrade pgmq-build" if newer
               else f"not a released version (known: {', '.join(versions)})")
        raise InstallError(f"schema pgmq holds the standalone pgmq {installed}, which is {why}; "
                           "nothing was changed")
    if installed in manifest.retired_versions and not (history_dir() / upgrade_name(
            installed, versions[versions.index(installed) + 1], "standalone")).exists():
        raise InstallError(f"{RETIRED_HINT.format(version=installed)}; nothing was changed")
    start = versions.index(installed)
    return [upgrade_name(a, b, "standalone") for a, b in zip(versions[start:], versions[start + 1:], strict=False)]


def installed_standalone(conn: psycopg.Connection) -> str | None:
    """The standalone version in conn's database (None: no schema pgmq); InstallError when
    schema pgmq is there but is not a standalone install."""
    row = conn.execute("SELECT pg_catalog.obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace "
                       "WHERE nspname = 'pgmq'").fetchone()
    if row is None:
        return None
    ext = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'").fetchone()
    if ext is not None:
        raise InstallError(f"pgmq {ext[0]} is installed as an extension in this database: upgrade it with "
                           "`pgmq-build install --dsn ...` or ALTER EXTENSION pgmq UPDATE; nothing was changed")
    found = STANDALONE_COMMENT.fullmatch(row[0] or "")
    if found is None:
        raise InstallError(f"schema pgmq already exists in this database but was not made by the standalone "
                           f"script (its comment is {row[0]!r}); nothing was changed")
    return found["version"]


def apply_standalone(dsn: str) -> StandaloneResult:
    """Install the standalone script, or upgrade an older standalone install through every
    standalone upgrade step, in one transaction: if anything fails, nothing changes."""
    with connect(dsn) as conn:
        installed = installed_standalone(conn)
        if installed is None:
            result = StandaloneResult("installed", MANIFEST.version, None, (standalone_name(),))
        elif installed == MANIFEST.version:
            return StandaloneResult("current", installed, installed, ())
        else:
            chain = standalone_upgrade_chain(installed)
            result = StandaloneResult("upgraded", MANIFEST.version, installed, tuple(chain))
        scripts = [standalone_script(name) for name in result.scripts]
        try:
            for script in scripts:
                conn.execute(script)  # no parameters: sent as one simple-protocol batch
        except psycopg.Error as exc:
            what = "the standalone script" if installed is None else "the standalone upgrade"
            raise InstallError(f"{what} failed (rolled back): {str(exc).strip()}") from exc
    return result


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
