"""Lint rendered install scripts with pglast: the PGMQ0xx rules (see codes.py for the why).

    from pgmq_build.lint import lint_script
    problems = lint_script(sql, MANIFEST, target="extension")
"""

from __future__ import annotations

from ..manifest import Manifest
from .rules import RULES, pgmq001_parses
from .script import TARGETS, Problem, Script

__all__ = ["Problem", "lint_script"]


def lint_script(sql: str, manifest: Manifest, target: str = "extension") -> list[Problem]:
    """Every problem in one install script, ordered by line then code (empty when clean)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    problems = pgmq001_parses(sql, target)
    if problems:
        return problems
    script = Script.parse(sql, manifest, target)
    found = dict.fromkeys(p for rule in RULES for p in rule(script))  # de-duplicated, ordered
    return sorted(found, key=lambda p: (p.line, p.code))
