"""Lint rendered install scripts with pglast: the PGMQ0xx rules (see codes.py for the why).

    from pgmq_build.lint import lint_script
    problems = lint_script(sql, MANIFEST, target="extension")
"""

from __future__ import annotations

from pglast.parser import ParseError

from ..manifest import Manifest
from .rules import RULES, pgmq001_parses
from .script import TARGETS, Problem, Script, previous_transition_tables, routine_keys

__all__ = ["Problem", "lint_script"]


def lint_script(sql: str, manifest: Manifest, target: str = "extension",
                previous: str | None = None) -> list[Problem]:
    """Every problem in one script, ordered by line then code (empty when clean).

    ``previous``: lint an upgrade script; this is the install script of the version it upgrades
    from (CREATE OR REPLACE is allowed for routines that version has, the manifest's routines
    need not all be created, the guard line is the ALTER EXTENSION form)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    problems = pgmq001_parses(sql, target, upgrade=previous is not None)
    if problems:
        return problems
    keys, transitions = None, None
    if previous is not None:
        try:
            keys, transitions = routine_keys(previous), previous_transition_tables(previous)
        except ParseError as exc:
            return [Problem("PGMQ001", "script", f"the previous version's script does not parse: {exc.args[0]}", 1)]
    script = Script.parse(sql, manifest, target, keys, transitions)
    found = dict.fromkeys(p for rule in RULES for p in rule(script))  # de-duplicated, ordered
    return sorted(found, key=lambda p: (p.line, p.code))
