"""The public surface: every routine's signature, parsed from the rendered install script.

A routine is declared once, in its template. This module renders the install script, parses its
CREATE FUNCTION / PROCEDURE statements with pglast (``lint.sqlast.signature``: arguments, their
defaults and the result as PostgreSQL prints them) and joins each with what only the manifest
knows: its policy (manifest.ROUTINES) and whether it is one of upstream PGMQ's
(manifest.UPSTREAM_CONTRACT). ``pgmq-build generate`` writes the result to docs/api.txt, one
line per routine, so that an API change shows in review; ``pgmq-build check`` fails when that
file is stale, and the catalog-contract test compares an installed database with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import render
from .lint import sqlast
from .lint.script import routine_statements
from .manifest import MANIFEST, UPSTREAM_CONTRACT_FILE, Manifest, Policy
from .paths import docs_dir

LISTING_HEADER = """\
# pgmq {version}: every routine of schema pgmq, in install order, as PostgreSQL prints it
# (pg_get_function_arguments and pg_get_function_result with search_path = pg_catalog; the
# IN of procedure arguments left out). Generated from templates/ by `pgmq-build generate`: do not
# edit. `pgmq-build check` fails when it is stale. upstream: one of upstream PGMQ 1.13's routines,
# whose signature is a contract (pgmq_build/upstream-pgmq-1.13.txt); ours: not in upstream.
"""
CONTRACT_HEADER = """\
# Upstream PGMQ 1.13's routines (schema pgmq) as PostgreSQL prints them: the contract that our
# routines of the same identity keep (lint PGMQ012). Derived from upstream's own pgmq.sql
# {version} (the PyPI package pgmq ships it) by pgmq_build.surface.contract_text;
# tests/unit/test_upstream_steps.py derives it again. 1.13.1 changed no signature.
"""


@dataclass(frozen=True)
class Entry:
    """One routine of the install script."""

    feature: str  # the feature whose templates create it
    signature: sqlast.Signature
    upstream: bool  # its identity is one of upstream's contract
    policy: Policy | None  # None: the manifest has no entry for it (lint PGMQ002 fails)

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def line(self) -> str:
        """Its line in docs/api.txt."""
        return f"{'upstream' if self.upstream else 'ours':<8} {self.signature.line}"


def entries(install_sql: str, manifest: Manifest = MANIFEST) -> tuple[Entry, ...]:
    """Every routine an install script creates, in script order."""
    features = [(m.start(), m.group(1)) for m in render.FEATURE_HEADER_RE.finditer(install_sql)]
    upstream = {s.key for s in sqlast.parse_signatures(manifest.contract)}
    out = []
    for offset, node in routine_statements(install_sql):
        try:
            sig = sqlast.signature(node)
        except ValueError as exc:
            raise render.RenderError(f"{sqlast.dotted(node.funcname)}: {exc}") from exc
        feature = next((name for start, name in reversed(features) if start <= offset), "")
        out.append(Entry(feature, sig, sig.key in upstream, manifest.policy(*sig.key)))
    return tuple(out)


@lru_cache(maxsize=4)
def current(manifest: Manifest = MANIFEST) -> tuple[Entry, ...]:
    """The routines of the install script rendered from today's templates."""
    return entries(render.render_install(manifest, "extension"), manifest)


def listing(install_sql: str, manifest: Manifest = MANIFEST) -> str:
    """The text of docs/api.txt: a header, then per feature a comment line and its routines."""
    lines, feature = [LISTING_HEADER.format(version=manifest.version).rstrip("\n")], None
    for entry in entries(install_sql, manifest):
        if entry.feature != feature:
            feature = entry.feature
            lines += ["", f"# feature: {feature}"]
        lines.append(entry.line)
    return "\n".join(lines) + "\n"


def listing_path() -> Path:
    return docs_dir() / "api.txt"


def read_listing(path: Path | None = None) -> list[tuple[bool, str]]:
    """(upstream, signature line) of every routine in docs/api.txt (or ``path``)."""
    text = (path or listing_path()).read_text()
    rows = [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(origin == "upstream", rest) for origin, rest in rows]


def listing_problems(text: str, path: Path | None = None) -> list[str]:
    """Why docs/api.txt is not ``text`` (empty when it is)."""
    path = path or listing_path()
    if not path.exists():
        return [f"missing: {path.name} (in {path.parent})"]
    return [] if path.read_text() == text else [f"differs: {path.name} (in {path.parent})"]


def contract_text(upstream_sql: str, version: str) -> str:
    """The text of pgmq_build/upstream-pgmq-1.13.txt, from upstream's pgmq.sql."""
    lines = sorted(sqlast.signature(node).line for _, node in routine_statements(upstream_sql))
    return CONTRACT_HEADER.format(version=version) + "\n".join(lines) + "\n"


def write_contract() -> Path:
    """Derive upstream's contract again from the PyPI package pgmq (its pgmq.sql) and write it."""
    from .migrate import upstream_sql

    version, sql = upstream_sql()
    UPSTREAM_CONTRACT_FILE.write_text(contract_text(sql, version))
    return UPSTREAM_CONTRACT_FILE
