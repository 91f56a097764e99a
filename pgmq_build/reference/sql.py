"""docs/reference/sql.md: every public routine of the install script, from the script itself.

One entry per routine name (its overloads together), grouped by feature in manifest order:
the signatures as docs/api.txt prints them (surface.py), whether upstream PGMQ has them, what
they do (the COMMENT ON FUNCTION the template's ``comment=`` renders, and the ``-- name: ...``
comment the template writes above the CREATE), the errors they can raise and an example
(examples.py, each run by tests/integration/test_reference_examples.py).

Errors are read from the compiled PL/pgSQL bodies (the lint's Script), not declared twice:
every ``RAISE EXCEPTION`` of the routine and of the pgmq routines it calls, at any depth, with
its SQLSTATE (an ERRCODE option, a condition name, or P0001 for a bare RAISE). Templates write
upstream's errors through ``raise_error()`` (errors.py), which renders such RAISE statements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg.errors
from pglast import ast

from .. import surface
from ..errors import CONDITIONS
from ..lint import sqlast
from ..lint.rules import ELOG_LEVELS
from ..lint.script import Script
from ..manifest import MANIFEST, Manifest
from .examples import EXAMPLES

HEADER = """\
# SQL reference

Every public routine of schema `pgmq` in pgmq {version}, grouped by feature. Generated from
the templates by `pgmq-build generate` (do not edit; `pgmq-build check` fails when it is
stale); the one-line listing of every routine, internal ones included, is [api.txt](../api.txt).
*Upstream PGMQ* marks routines upstream PGMQ 1.13 has, whose signatures are kept as a contract.
The errors listed are those the routine's code and the pgmq routines it calls raise, over all
its overloads and paths; errors PostgreSQL raises by itself (such as 42P01 when the table of a
queue that does not exist is read) are not. Every example runs as written in a fresh database
after `CREATE EXTENSION pgmq`.
"""

_RAISE_OPTION = {0: "ERRCODE", 1: "MESSAGE"}  # PLPGSQL_RAISEOPTION_* in parse_plpgsql()'s JSON
_CALL = re.compile(r"\b{schema}\.(\w+)\s*\(")
_PLACEHOLDER = re.compile(r"%(%|[sIL]?)")  # RAISE's %, format()'s %s %I %L; %% is a %


@dataclass(frozen=True, order=True)
class Raised:
    """One error a routine can raise: SQLSTATE, condition name, message (placeholders as …)."""

    sqlstate: str
    condition: str
    message: str


@dataclass
class Routine:
    """A public routine name: its overloads and what the reference says of it."""

    name: str
    feature: str
    upstream: bool = False
    signatures: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: set[Raised] = field(default_factory=set)

    @property
    def description(self) -> str:
        return "\n\n".join(self.comments + self.notes)


def _sqlstate(condition: str) -> tuple[str, str]:
    """(SQLSTATE, condition name) of an ERRCODE value or a condition name."""
    if re.fullmatch(r"[0-9A-Z]{5}", condition):
        cls = psycopg.errors.lookup(condition)
        return condition, re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
    # errors.CONDITIONS first: PL/pgSQL reads null_value_not_allowed as 22004, psycopg as 39004
    return CONDITIONS.get(condition) or psycopg.errors.lookup(condition.upper()).sqlstate, condition


def _literal(query: str) -> str | None:
    """The text of a constant string expression ('...', E'...', or format('...', ...))."""
    m = re.match(r"\s*(?:format\s*\(\s*)?(E?)'((?:[^']|'')*)'", query)
    if m is None:
        return None
    text = m.group(2).replace("''", "'")
    return text.replace("\\\\", "\\") if m.group(1) else text


def _raised(stmt: dict, schema: str) -> Raised | None:
    """What a PLpgSQL_stmt_raise raises, when it is an error with a message. The lint parses
    bodies with "<schema>." read as "public." (lint/script.py): messages are read back."""
    if ELOG_LEVELS.get(stmt.get("elog_level")) != "EXCEPTION":
        return None
    options = {_RAISE_OPTION.get(o["PLpgSQL_raise_option"].get("opt_type", 0)):
               o["PLpgSQL_raise_option"]["expr"]["PLpgSQL_expr"]["query"] for o in stmt.get("options") or ()}
    message = stmt.get("message") or _literal(options.get("MESSAGE", ""))
    if message is None:
        return None  # a bare RAISE re-raises what a handler caught
    condition = _literal(options.get("ERRCODE", "")) or stmt.get("condname") or "raise_exception"
    message = _PLACEHOLDER.sub(lambda m: "%" if m.group(1) == "%" else "…", message)
    message = message.replace("public.", f"{schema}.")
    return Raised(*_sqlstate(condition), " ".join(message.split()))


def _leading_comment(text: str, line: int, name: str) -> str:
    """The ``-- name: ...`` block right above line ``line`` (1-based), without its prefix."""
    lines, block = text.splitlines(), []
    i = line - 2
    while i >= 0 and lines[i].startswith("-- "):
        block.insert(0, lines[i][3:].strip())
        i -= 1
    starts = [n for n, text in enumerate(block) if text.startswith(f"{name}:")]
    if not starts:
        return ""
    note = " ".join(block[starts[-1]:]).removeprefix(f"{name}:").strip()
    return note[:1].upper() + note[1:]


def _comments(script: Script) -> dict[str, list[str]]:
    """Routine name -> its COMMENT ON FUNCTION / PROCEDURE texts, in script order."""
    out: dict[str, list[str]] = {}
    for stmt in script.statements:
        node = stmt.node
        if isinstance(node, ast.CommentStmt) and isinstance(node.object, ast.ObjectWithArgs):
            name = node.object.objname[-1].sval
            if node.comment and node.comment not in out.setdefault(name, []):
                out[name].append(node.comment)
    return out


def _closure_errors(script: Script) -> dict[str, set[Raised]]:
    """Routine name -> every error its overloads and the pgmq routines they call can raise."""
    direct: dict[str, set[Raised]] = {}
    calls: dict[str, set[str]] = {}
    call = re.compile(_CALL.pattern.format(schema=re.escape(script.manifest.schema)))
    for r in script.routines:
        name = r.key[0]
        found = direct.setdefault(name, set())
        for node in sqlast.walk(r.plpgsql or []):
            if "PLpgSQL_stmt_raise" in node and (err := _raised(node["PLpgSQL_stmt_raise"], script.manifest.schema)):
                found.add(err)
        body = r.stmt.text.split("AS $", 1)[-1]
        calls.setdefault(name, set()).update(call.findall(body))
    out = {}
    for name in direct:
        seen, todo, errs = {name}, [name], set()
        while todo:
            current = todo.pop()
            errs |= direct.get(current, set())
            for callee in calls.get(current, set()) - seen:
                seen.add(callee)
                todo.append(callee)
        out[name] = errs
    return out


def routines(install_sql: str, manifest: Manifest = MANIFEST) -> list[Routine]:
    """The public routines (name not starting with _), by feature in manifest order."""
    script = Script.parse(install_sql, manifest, "extension")
    comments, errors = _comments(script), _closure_errors(script)
    lines = {r.obj: r.line for r in script.routines}
    by_name: dict[str, Routine] = {}
    for entry in surface.entries(install_sql, manifest):
        name = entry.name
        if name.startswith("_"):
            continue
        routine = by_name.setdefault(name, Routine(name, entry.feature, errors=errors.get(name, set())))
        routine.upstream |= entry.upstream
        routine.signatures.append(entry.signature.text)
        note = _leading_comment(script.text, lines[f"{manifest.schema}.{name}({entry.signature.identity})"], name)
        if note and note not in routine.notes:
            routine.notes.append(note)
    for routine in by_name.values():
        routine.comments = [c for c in comments.get(routine.name, []) if not c.startswith("Overload of ")]
    order = {f.name: i for i, f in enumerate(manifest.features)}
    return sorted(by_name.values(), key=lambda r: order[r.feature])  # stable: script order within


def markdown(text: str) -> str:
    """Plain text as Markdown that shows it as is (in a table cell too)."""
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text).replace("<", "&lt;")


def _entry(routine: Routine) -> list[str]:
    origin = "*Upstream PGMQ*" if routine.upstream else "*pgmq only* (not in upstream PGMQ)"
    out = [f"### {routine.name}", "", origin, "", markdown(routine.description), "",
           "```text", *routine.signatures, "```", ""]
    if routine.errors:
        out += ["| SQLSTATE | Condition | Message |", "|---|---|---|"]
        out += [f"| {e.sqlstate} | `{e.condition}` | {markdown(e.message)} |" for e in sorted(routine.errors)]
        out.append("")
    example = EXAMPLES.get(routine.name)
    if example:
        out += ["Example:", "", "```sql", example.strip(), "```", ""]
    return out


def page(install_sql: str, manifest: Manifest = MANIFEST) -> str:
    """The text of docs/reference/sql.md."""
    out, feature = [HEADER.format(version=manifest.version)], None
    for routine in routines(install_sql, manifest):
        if routine.feature != feature:
            feature = routine.feature
            out += [f"## Feature: {feature}", ""]
        out += _entry(routine)
    return "\n".join(out).rstrip() + "\n"
