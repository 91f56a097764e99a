"""A parsed install script: its top-level statements and, per routine, the compiled body.

Everything is parsed once here; the rules in ``rules.py`` only read. Parse failures inside
bodies are kept (not raised) so PGMQ004 can report them while other rules use what did parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from pglast import ast, parse_plpgsql, parse_sql
from pglast.parser import ParseError

from ..manifest import Manifest, Policy
from . import sqlast

TARGETS = ("extension", "standalone")
# The one psql line an extension script may hold: it stops `psql -f` from running the script
# outside CREATE EXTENSION (ALTER EXTENSION for an upgrade script). Only these forms are accepted.
GUARD = '\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit'
UPGRADE_GUARD_RE = re.compile(
    r'^\\echo Use "ALTER EXTENSION pgmq UPDATE TO \'\d+(?:\.\d+)*\'" to load this file\. \\quit[ \t]*$', re.M)
# Either form (for tools that read any of our scripts).
GUARD_RE = re.compile(rf"{UPGRADE_GUARD_RE.pattern}|^{re.escape(GUARD)}[ \t]*$", re.M)


def upgrade_guard(version: str) -> str:
    """The guard line of the extension upgrade script into ``version``."""
    return f'\\echo Use "ALTER EXTENSION pgmq UPDATE TO \'{version}\'" to load this file. \\quit'


class Problem(NamedTuple):
    code: str
    obj: str
    message: str
    line: int


def problem(code: str, where: Statement | Routine, message: str) -> Problem:
    """A problem found in a top-level statement or routine, reported at its first line."""
    return Problem(code, where.obj, message, where.line)


def strip_guard(sql: str, target: str, upgrade: bool = False) -> str:
    """The script with the extension guard line blanked (line numbers are kept): the
    CREATE EXTENSION form in an install script, the ALTER EXTENSION form in an upgrade script."""
    if target != "extension":
        return sql
    if upgrade:
        return UPGRADE_GUARD_RE.sub("", sql)
    return re.sub(rf"^{re.escape(GUARD)}[ \t]*$", "", sql, flags=re.M)


def blank_guard(sql: str) -> str:
    """The script with any guard line (either form) blanked: offsets and line numbers kept."""
    return GUARD_RE.sub(lambda m: " " * len(m.group(0)), sql)


def routine_statements(sql: str) -> Iterator[tuple[int, ast.CreateFunctionStmt]]:
    """(offset, statement) of every CREATE FUNCTION/PROCEDURE in a script (any guard line
    ignored); raises ParseError when it does not parse."""
    for raw in parse_sql(blank_guard(sql)):
        if isinstance(raw.stmt, ast.CreateFunctionStmt):
            yield raw.stmt_location, raw.stmt


def routine_keys(sql: str) -> frozenset[tuple[str, str]]:
    """(name, identity arguments) of every CREATE FUNCTION/PROCEDURE in a script (any guard
    line ignored); raises ParseError when it does not parse."""
    return frozenset((n.funcname[-1].sval, sqlast.identity_args(n)) for _, n in routine_statements(sql))


def transition_tables(nodes: Iterable[ast.Node]) -> dict[str, set[str]]:
    """Trigger function name -> the transition tables (REFERENCING ... AS name) of the triggers
    among these statements that run it: a trigger function reads them by their bare names."""
    found: dict[str, set[str]] = {}
    for node in nodes:
        if isinstance(node, ast.CreateTrigStmt):
            fn = ".".join(n.sval for n in node.funcname)
            for rel in node.transitionRels or ():
                found.setdefault(fn, set()).add(rel.name)
    return found


def previous_transition_tables(sql: str) -> dict[str, set[str]]:
    """transition_tables of a previous version's install script: its triggers stay through an
    upgrade that replaces only their functions."""
    return transition_tables(raw.stmt for raw in parse_sql(blank_guard(sql)))


def error_offset(exc: ParseError) -> int | None:
    return exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else None


@dataclass(frozen=True)
class Statement:
    node: ast.Node
    text: str
    line: int
    obj: str = "script"


@dataclass(frozen=True)
class BodySql:
    """Statements run by a routine: static SQL, or a dynamic-SQL format() template."""

    kind: str  # "static" | "template"
    stmts: tuple


@dataclass
class Routine:
    stmt: Statement
    schema: str
    body_errors: list[str] = field(default_factory=list)
    template_errors: list[str] = field(default_factory=list)
    sql: list[BodySql] = field(default_factory=list)
    plpgsql: list | None = None

    @property
    def node(self) -> ast.CreateFunctionStmt:
        return self.stmt.node

    @property
    def obj(self) -> str:
        return self.stmt.obj

    @property
    def line(self) -> int:
        return self.stmt.line

    @cached_property
    def options(self) -> dict[str, object]:
        """DefElem name -> arg (``set`` is collected by ``settings``)."""
        return {o.defname: o.arg for o in self.node.options or () if o.defname != "set"}

    @property
    def settings(self) -> list[ast.VariableSetStmt]:
        return [o.arg for o in self.node.options or () if o.defname == "set"]

    @property
    def language(self) -> str:
        lang = self.options.get("language")
        return lang.sval.lower() if lang is not None else ""

    @property
    def body(self) -> str | None:
        body = self.options.get("as")
        return body[0].sval if body and len(body) == 1 else None

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """(name, input argument types), as manifest.Policy and sqlast.Signature key routines."""
        return (self.node.funcname[-1].sval, tuple(sqlast.in_arg_types(self.node.parameters)))

    @property
    def qualified(self) -> bool:
        return [n.sval for n in self.node.funcname[:-1]] == [self.schema]


def _routine_obj(fn: ast.CreateFunctionStmt) -> str:
    return f"{sqlast.dotted(fn.funcname)}({sqlast.identity_args(fn)})"


def _parse_all(parse: Callable[[Any], tuple], items: list[tuple[Any, str]],
               errors: list[str], kind: str) -> list[BodySql]:
    """Parse each (source, label); failures go to ``errors`` as "label: message"."""
    out = []
    for item, label in items:
        try:
            out.append(BodySql(kind, tuple(parse(item))))
        except ParseError as exc:
            errors.append(f"{label}: {exc.args[0]}")
    return out


def _templates(tree: object) -> list[tuple[str, str]]:
    """(filled template, label) for every dynamic query that is format('constant', ...)."""
    out = []
    for query in sqlast.dynamic_queries(tree):
        try:
            node = sqlast.expression(query)
        except ParseError:
            continue  # reported by PGMQ004 with the other expressions
        template = sqlast.format_string(node) if sqlast.is_call(node, "format") else None
        if template is not None:
            out.append((sqlast.fill_format(template), f"format string {template.strip()[:60]!r}"))
    return out


def _compile_plpgsql(routine: Routine) -> None:
    # parse_plpgsql has no catalog: it resolves only pg_catalog and public names.
    text = re.sub(rf"\b{re.escape(routine.schema)}\.", "public.", routine.stmt.text)
    try:
        tree = routine.plpgsql = parse_plpgsql(text)
    except ParseError as exc:
        routine.body_errors.append(f"PL/pgSQL body does not compile: {exc.args[0]}")
        return
    exprs = [(e, f"SQL {e['query'].strip()[:60]!r}") for e in sqlast.plpgsql_exprs(tree)]
    routine.sql += _parse_all(sqlast.parse_expr, exprs, routine.body_errors, "static")
    routine.sql += _parse_all(parse_sql, _templates(tree), routine.template_errors, "template")


def compile_routine(routine: Routine) -> None:
    """Fill in a routine's compiled PL/pgSQL tree and the SQL its body runs."""
    fn, body = routine.node, routine.body
    if fn.sql_body:  # BEGIN ATOMIC: already parsed, a list of statement lists
        nested = (i if isinstance(i, tuple | list) else (i,) for i in fn.sql_body)
        routine.sql.append(BodySql("static", tuple(s for group in nested for s in group)))
    elif routine.language == "sql" and body is not None:
        routine.sql += _parse_all(parse_sql, [(body, "SQL body")], routine.body_errors, "static")
    elif routine.language == "plpgsql":
        _compile_plpgsql(routine)


@dataclass
class Script:
    text: str
    manifest: Manifest
    target: str
    statements: list[Statement]
    routines: list[Routine]
    # An upgrade script: the routines of the version it upgrades from, as (name, identity
    # arguments). None: an install script.
    previous: frozenset[tuple[str, str]] | None = None
    # An upgrade script: the previous version's triggers' transition tables (transition_tables).
    previous_transitions: dict[str, set[str]] = field(default_factory=dict)

    @property
    def upgrade(self) -> bool:
        return self.previous is not None

    @classmethod
    def parse(cls, sql: str, manifest: Manifest, target: str,
              previous: frozenset[tuple[str, str]] | None = None,
              previous_transitions: dict[str, set[str]] | None = None) -> Script:
        """Parse a script that PGMQ001 accepted."""
        text = strip_guard(sql, target, upgrade=previous is not None)
        statements, routines = [], []
        for raw in parse_sql(text):
            start, end = sqlast.statement_bounds(text, raw)
            node = raw.stmt
            obj = _routine_obj(node) if isinstance(node, ast.CreateFunctionStmt) else "script"
            stmt = Statement(node, text[start:end], sqlast.line_at(text, start), obj)
            statements.append(stmt)
            if isinstance(node, ast.CreateFunctionStmt):
                routine = Routine(stmt, manifest.schema)
                compile_routine(routine)
                routines.append(routine)
        return cls(text, manifest, target, statements, routines, previous, previous_transitions or {})

    def policy(self, routine: Routine) -> Policy | None:
        """The manifest's policy of a routine (None: it has none, or it is not in our schema)."""
        return self.manifest.policy(*routine.key) if routine.qualified else None

    @cached_property
    def contract(self) -> dict[tuple[str, tuple[str, ...]], sqlast.Signature]:
        """Upstream's routines by (name, argument types): the manifest's UPSTREAM_CONTRACT."""
        return {s.key: s for s in sqlast.parse_signatures(self.manifest.contract)}
