"""The routine part of an upgrade script, computed from two install scripts.

Pure functions over SQL text (pglast; no server). Given the install script of the version an
upgrade starts from (frozen) and the one it ends at (rendered), :func:`plan_routines` finds
every CREATE FUNCTION / CREATE PROCEDURE in both and classifies each routine:

``same``         identical statement text: nothing to do (comments and ACL are still compared)
``replace``      same identity, result, argument names and modes, and no default removed:
                 ``CREATE OR REPLACE`` with the new text
``drop-create``  same identity but PostgreSQL cannot replace it (result type, argument names or
                 modes changed, a default removed, function <-> procedure): ``DROP`` then ``CREATE``
``new``          only in the new script: ``CREATE``
``gone``         only in the old script: ``DROP``

DROPs come first (reverse order of the old script), then, in the new script's order, the new
script's own statements for the routines that change: the CREATE (text span of the install
script, only ``CREATE`` -> ``CREATE OR REPLACE`` for a replace), its COMMENT and GRANT/REVOKE
statements. Last, per routine, what makes its comment and effective ACL those of a fresh install:
``CREATE OR REPLACE`` keeps the old comment and ACL, so a routine that was REVOKEd FROM PUBLIC
before and is not any more gets EXECUTE back. ACLs are modelled as PostgreSQL's
``coalesce(proacl, acldefault('f', proowner))``: EXECUTE for PUBLIC (and the owner, never
touched here) until a GRANT or REVOKE says otherwise. Grants made by users to other roles are
left alone.

DROP never cascades: objects that depend on a routine that must be dropped (policies, column
defaults, per-queue triggers) are the hand-written ``pre.sql.j2`` step's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pglast import ast, parse_sql
from pglast.enums import FunctionParameterMode as Mode
from pglast.enums import GrantTargetType, ObjectType, RoleSpecType
from pglast.parser import ParseError

from .lint import sqlast
from .lint.script import blank_guard

ROUTINE_OBJECTS = {
    ObjectType.OBJECT_FUNCTION: "function",
    ObjectType.OBJECT_PROCEDURE: "procedure",
    ObjectType.OBJECT_ROUTINE: None,  # either
}
CHANGES = ("same", "replace", "drop-create", "new", "gone")
EMITTED = ("replace", "drop-create", "new")

# An ACL: grantee -> EXECUTE (1) or EXECUTE WITH GRANT OPTION (2); absent = no privilege.
# Grantees: "PUBLIC", a role name as written, or CURRENT_ROLE / CURRENT_USER / SESSION_USER.
Acl = Mapping[str, int]
DEFAULT_ACL: Acl = {"PUBLIC": 1}  # acldefault('f', owner): PUBLIC and the owner may execute

Key = tuple[str, str, tuple[str, ...]]  # (schema, name, input argument types)


class UpgradeError(Exception):
    """An install script holds something the upgrade generator cannot carry over."""


@dataclass(frozen=True)
class Routine(sqlast.RoutineHead):
    """A routine of an install script, with what the plan compares besides its head."""

    params: tuple[tuple[str, str], ...] = ()  # (mode, name) of every parameter, OUT and TABLE too
    defaults: int = 0  # how many input arguments have a DEFAULT
    text: str = ""  # the statement as written in the script, with its ";"

    @property
    def key(self) -> Key:
        return (self.schema, self.name, self.arg_types)

    @property
    def signature(self) -> str:
        """``schema.name(type, type)``, for DROP, COMMENT, GRANT and REVOKE."""
        name = f"{sqlast.quote_ident(self.schema)}.{sqlast.quote_ident(self.name)}"
        return f"{name}({', '.join(self.arg_types)})"

    @property
    def keyword(self) -> str:
        return self.kind.upper()


@dataclass(frozen=True)
class Statement:
    """A top-level statement that concerns routines."""

    kind: str  # "routine" | "comment" | "acl"
    text: str
    keys: tuple[Key, ...]
    node: ast.Node


@dataclass
class ScriptRoutines:
    """What one install script says about its routines, in script order."""

    routines: dict[Key, Routine] = field(default_factory=dict)
    statements: list[Statement] = field(default_factory=list)
    comments: dict[Key, str | None] = field(default_factory=dict)
    acls: dict[Key, dict[str, int]] = field(default_factory=dict)


# ----------------------------------------------------------------------------- extraction

strip_guard = blank_guard  # the script with a psql guard line blanked (offsets and lines kept)


def _mode(p: ast.FunctionParameter) -> str:
    return "IN" if p.mode in (Mode.FUNC_PARAM_IN, Mode.FUNC_PARAM_DEFAULT) else p.mode.name.removeprefix("FUNC_PARAM_")


def routine_of(node: ast.CreateFunctionStmt, text: str) -> Routine:
    try:
        head = sqlast.routine_head(node)
    except ValueError as exc:
        raise UpgradeError(str(exc)) from exc
    params = node.parameters or ()
    inputs = [p for p in params if p.mode not in (Mode.FUNC_PARAM_OUT, Mode.FUNC_PARAM_TABLE)]
    return Routine(**head, params=tuple((_mode(p), p.name or "") for p in params),
                   defaults=sum(p.defexpr is not None for p in inputs), text=text)


def _object_keys(obj: ast.ObjectWithArgs, routines: Mapping[Key, Routine], kind: str | None,
                 what: str) -> Key:
    names = [n.sval for n in obj.objname]
    if len(names) != 2:
        raise UpgradeError(f"{what}: routine {'.'.join(names)} is not schema-qualified")
    schema, name = names
    if obj.args_unspecified:
        found = [k for k in routines if k[:2] == (schema, name)]
        if len(found) != 1:
            raise UpgradeError(f"{what}: {schema}.{name} without arguments matches {len(found)} routines")
        key = found[0]
    else:
        key = (schema, name, tuple(sqlast.type_name(t) for t in obj.objargs or ()))
    routine = routines.get(key)
    if routine is None:
        raise UpgradeError(f"{what}: {schema}.{name}({', '.join(key[2])}) is not created before")
    if kind is not None and routine.kind != kind:
        raise UpgradeError(f"{what}: {routine.signature} is a {routine.kind}")
    return key


def _grantee(role: ast.RoleSpec) -> str:
    if role.roletype == RoleSpecType.ROLESPEC_PUBLIC:
        return "PUBLIC"
    if role.roletype == RoleSpecType.ROLESPEC_CSTRING:
        return role.rolename
    return role.roletype.name.removeprefix("ROLESPEC_")  # CURRENT_ROLE, CURRENT_USER, SESSION_USER


def apply_grant(acl: Acl, node: ast.GrantStmt) -> dict[str, int]:
    """The ACL after one GRANT/REVOKE [GRANT OPTION FOR] {EXECUTE | ALL} ... TO/FROM ... ."""
    privileges = {p.priv_name for p in node.privileges or ()}
    if privileges - {"execute"}:
        raise UpgradeError(f"privileges {sorted(privileges)} on a routine (only EXECUTE exists)")
    out = dict(acl)
    for role in node.grantees or ():
        grantee, level = _grantee(role), out.get(_grantee(role), 0)
        if node.is_grant:
            level = max(level, 2 if node.grant_option else 1)
        else:
            level = min(level, 1) if node.grant_option else 0
        if level:
            out[grantee] = level
        else:
            out.pop(grantee, None)
    return out


def _unsupported(node: ast.Node) -> str | None:
    """Why a statement touching routines cannot be carried over (None: it can, or it does not)."""
    if isinstance(node, ast.GrantStmt) and node.objtype in ROUTINE_OBJECTS \
            and node.targtype != GrantTargetType.ACL_TARGET_OBJECT:
        return "GRANT/REVOKE ... ON ALL FUNCTIONS/PROCEDURES/ROUTINES IN SCHEMA"
    if isinstance(node, ast.AlterFunctionStmt):
        return "ALTER FUNCTION/PROCEDURE/ROUTINE (put the setting in the CREATE statement)"
    if isinstance(node, ast.AlterOwnerStmt | ast.AlterObjectSchemaStmt | ast.AlterObjectDependsStmt) \
            and node.objectType in ROUTINE_OBJECTS:
        return "ALTER ... OWNER / SET SCHEMA / DEPENDS ON of a routine"
    if isinstance(node, ast.RenameStmt) and node.renameType in ROUTINE_OBJECTS:
        return "ALTER ... RENAME of a routine"
    if isinstance(node, ast.AlterDefaultPrivilegesStmt) and node.action.objtype in ROUTINE_OBJECTS:
        return "ALTER DEFAULT PRIVILEGES for routines"
    return None


def parse_script(sql: str) -> ScriptRoutines:
    """Every routine of an install script with its comment, effective ACL and statements."""
    text = strip_guard(sql)
    try:
        raws = parse_sql(text)
    except ParseError as exc:
        raise UpgradeError(f"the script does not parse: {exc.args[0]}") from exc
    out = ScriptRoutines()
    for raw in raws:
        node = raw.stmt
        start, end = sqlast.statement_bounds(text, raw)
        stmt_text = text[start:end].rstrip() + ";"
        where = f"line {sqlast.line_at(text, start)}"
        reason = _unsupported(node)
        if reason:
            raise UpgradeError(f"{where}: {reason} is not supported by the upgrade generator")
        if isinstance(node, ast.CreateFunctionStmt):
            routine = routine_of(node, stmt_text)
            if routine.key in out.routines:
                raise UpgradeError(f"{where}: {routine.signature} is created twice")
            out.routines[routine.key] = routine
            out.acls[routine.key] = dict(DEFAULT_ACL)
            out.statements.append(Statement("routine", stmt_text, (routine.key,), node))
        elif isinstance(node, ast.CommentStmt) and node.objtype in ROUTINE_OBJECTS:
            key = _object_keys(node.object, out.routines, ROUTINE_OBJECTS[node.objtype], where)
            out.comments[key] = node.comment
            out.statements.append(Statement("comment", stmt_text, (key,), node))
        elif isinstance(node, ast.GrantStmt) and node.objtype in ROUTINE_OBJECTS:
            kind = ROUTINE_OBJECTS[node.objtype]
            keys = tuple(_object_keys(o, out.routines, kind, where) for o in node.objects or ())
            for key in keys:
                out.acls[key] = apply_grant(out.acls[key], node)
            out.statements.append(Statement("acl", stmt_text, keys, node))
    return out


# ----------------------------------------------------------------------------- classification

def not_replaceable(old: Routine, new: Routine) -> str | None:
    """Why PostgreSQL's CREATE OR REPLACE cannot turn old into new (None: it can)."""
    if old.kind != new.kind:
        return f"{old.kind} became a {new.kind}"
    if old.result != new.result:
        return f"result changed from {old.result} to {new.result}"
    if old.params != new.params:
        return "argument names or modes changed"
    if new.defaults < old.defaults:
        return "an argument default was removed"
    return None


def classify(old: Routine | None, new: Routine | None) -> str:
    if old is None and new is None:
        raise ValueError("nothing to classify")
    if old is None:
        return "new"
    if new is None:
        return "gone"
    if old.text == new.text:
        return "same"
    return "replace" if not_replaceable(old, new) is None else "drop-create"


def or_replace(text: str) -> str:
    """A CREATE FUNCTION/PROCEDURE statement as CREATE OR REPLACE, otherwise unchanged."""
    replaced, n = re.subn(r"\ACREATE\s+(?=(?:FUNCTION|PROCEDURE)\b)", "CREATE OR REPLACE ", text,
                          flags=re.I)
    if n != 1:
        raise UpgradeError(f"not a CREATE FUNCTION/PROCEDURE statement: {text[:60]!r}")
    return replaced


def drop(routine: Routine) -> str:
    return f"DROP {routine.keyword} {routine.signature};"


def _role(grantee: str) -> str:
    if grantee in ("PUBLIC", "CURRENT_ROLE", "CURRENT_USER", "SESSION_USER"):
        return grantee
    return sqlast.quote_ident(grantee)


def acl_fix(routine: Routine, current: Acl, target: Acl) -> list[str]:
    """GRANT/REVOKE statements that turn ACL ``current`` into ``target`` (for the grantees
    either names; other grants are left as they are)."""
    on = f"ON {routine.keyword} {routine.signature}"
    out = []
    for grantee in sorted(set(current) | set(target)):
        have, want, role = current.get(grantee, 0), target.get(grantee, 0), _role(grantee)
        if have == want:
            continue
        if want == 0:
            out.append(f"REVOKE ALL {on} FROM {role};")
        elif want == 1 and have == 2:
            out.append(f"REVOKE GRANT OPTION FOR EXECUTE {on} FROM {role};")
        else:
            out.append(f"GRANT EXECUTE {on} TO {role}{' WITH GRANT OPTION' if want == 2 else ''};")
    return out


def _comment_null(routine: Routine) -> str:
    return f"COMMENT ON {routine.keyword} {routine.signature} IS NULL;"


@dataclass(frozen=True)
class RoutinePlan:
    changes: dict[Key, str]  # every routine of either script -> one of CHANGES
    statements: tuple[str, ...]  # the SQL to run, in order
    reasons: dict[Key, str] = field(default_factory=dict)  # why a routine is dropped and created

    def of(self, change: str) -> list[Key]:
        return [k for k, c in self.changes.items() if c == change]

    @property
    def sql(self) -> str:
        return "\n\n".join(self.statements) + ("\n" if self.statements else "")


def plan(old: ScriptRoutines, new: ScriptRoutines) -> RoutinePlan:
    """The statements that turn old's routines into new's (see the module's docstring)."""
    changes = {k: classify(old.routines.get(k), new.routines.get(k))
               for k in [*old.routines, *(k for k in new.routines if k not in old.routines)]}
    reasons = {k: not_replaceable(old.routines[k], new.routines[k]) or ""
               for k, c in changes.items() if c == "drop-create"}
    out = [drop(old.routines[k]) for k in reversed(old.routines)
           if changes[k] in ("gone", "drop-create")]
    # The ACL each routine has while the statements run: a kept routine keeps its old one.
    acls = {k: dict(old.acls[k] if changes[k] in ("same", "replace") else DEFAULT_ACL)
            for k in new.routines}
    for stmt in new.statements:
        emitted = any(changes[k] in EMITTED for k in stmt.keys)
        if stmt.kind == "routine":
            if emitted:
                (key,) = stmt.keys
                out.append(or_replace(stmt.text) if changes[key] == "replace" else stmt.text)
        elif stmt.kind == "comment":
            (key,) = stmt.keys
            changed = new.comments.get(key) != old.comments.get(key)
            if emitted or (changes[key] == "same" and changed):
                out.append(stmt.text)
        elif emitted:  # GRANT / REVOKE
            out.append(stmt.text)
            for key in stmt.keys:
                acls[key] = apply_grant(acls[key], stmt.node)
    for key, routine in new.routines.items():
        if changes[key] in ("same", "replace"):
            if old.comments.get(key) is not None and new.comments.get(key) is None:
                out.append(_comment_null(routine))
            out.extend(acl_fix(routine, acls[key], new.acls[key]))
    return RoutinePlan(changes, tuple(out), reasons)


def plan_routines(old_sql: str, new_sql: str) -> RoutinePlan:
    """:func:`plan` over two install scripts' text."""
    return plan(parse_script(old_sql), parse_script(new_sql))


def describe(p: RoutinePlan, routines: Iterable[Routine] = ()) -> Iterator[str]:
    """One line per change that is not ``same`` (for comments and reports)."""
    names = {r.key: r.signature for r in routines}
    for key, change in p.changes.items():
        if change != "same":
            name = names.get(key, f"{key[0]}.{key[1]}({', '.join(key[2])})")
            reason = f" ({p.reasons[key]})" if key in p.reasons else ""
            yield f"{change}: {name}{reason}"
