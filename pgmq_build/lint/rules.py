"""The PGMQ0xx rules. Each rule is one function; ``codes.py`` says why each exists.

PGMQ001 runs on the raw text (nothing else can run if the script does not parse); the others
take a parsed :class:`~.script.Script` and yield :class:`~.script.Problem` items.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pglast import ast, parse_sql, visitors
from pglast.enums import ObjectType, RoleSpecType, VariableSetKind
from pglast.parser import ParseError

from .. import errors
from . import sqlast
from .script import (
    Problem,
    Script,
    Statement,
    error_offset,
    problem,
    strip_guard,
    transition_tables,
)

PINNED_SEARCH_PATH = ["pg_catalog", "pg_temp"]
ROUTINE_OBJECTS = (ObjectType.OBJECT_FUNCTION, ObjectType.OBJECT_PROCEDURE,
                   ObjectType.OBJECT_ROUTINE)
PLPGSQL_TRANSACTION = ("PLpgSQL_stmt_commit", "PLpgSQL_stmt_rollback")
# Statements that accept $n parameters from EXECUTE ... USING; utility statements (DDL) do not,
# so a value in DDL (a trigger argument, a COMMENT) can only be written with %L.
PARAMETERIZABLE = (ast.SelectStmt, ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt,
                   ast.CallStmt)


# ----------------------------------------------------------------------------- PGMQ001

def pgmq001_parses(sql: str, target: str, upgrade: bool = False) -> list[Problem]:
    """The script parses as plain SQL (the extension guard line aside)."""
    text = strip_guard(sql, target, upgrade)
    try:
        parse_sql(text)
    except ParseError as exc:
        offset = error_offset(exc)
        line = sqlast.line_at(text, offset) if offset is not None else 1
        source = text.splitlines()[line - 1].lstrip() if offset is not None else ""
        message = exc.args[0]
        if source.startswith("\\"):
            message = f"psql meta-command {source.split()[0]} (only the extension guard is allowed)"
        return [Problem("PGMQ001", "script", message, line)]
    return []


# ----------------------------------------------------------------------------- PGMQ002

def pgmq002_declared(script: Script) -> Iterator[Problem]:
    """Routines are schema-qualified, created once, printable and have a policy entry; in an
    install script every policy entry has a routine."""
    schema, seen = script.manifest.schema, set()
    for r in script.routines:
        if not r.qualified:
            yield problem("PGMQ002", r, f"name must be qualified with schema {schema!r}")
            continue
        if r.key in seen:
            yield problem("PGMQ002", r, "created more than once")
        seen.add(r.key)
        if script.policy(r) is None:
            yield problem("PGMQ002", r, f"no policy entry for {r.key[0]} in the manifest (manifest.ROUTINES)")
        try:
            sqlast.arguments(r.node)
        except ValueError as exc:
            yield problem("PGMQ002", r, f"its arguments cannot be listed as PostgreSQL prints them: {exc}")
    if script.upgrade:
        return
    names = {name for name, _ in seen}
    for policy in script.manifest.routines:
        if (policy.name not in names) if policy.arg_types is None else (policy.key not in seen):
            types = "" if policy.arg_types is None else f"({', '.join(policy.arg_types)})"
            yield Problem("PGMQ002", f"{schema}.{policy.name}{types}",
                          "has a policy entry in the manifest but the script creates no such routine", 1)


# ----------------------------------------------------------------------------- PGMQ003

def _search_path_problem(setting: ast.VariableSetStmt) -> str | None:
    values = [str(getattr(a.val, "sval", a.val)) for a in setting.args or ()]
    if setting.kind == VariableSetKind.VAR_SET_VALUE and values == PINNED_SEARCH_PATH:
        return None
    shown = f"= {', '.join(values)}" if values else setting.kind.name.removeprefix("VAR_SET_")
    return f"SET search_path {shown}; it must be exactly = {', '.join(PINNED_SEARCH_PATH)}"


def _revokes_from_public(node: ast.Node, fn: ast.CreateFunctionStmt) -> bool:
    """Whether a statement is REVOKE ... ON FUNCTION <fn> ... FROM PUBLIC."""
    if not isinstance(node, ast.GrantStmt) or node.is_grant or node.objtype not in ROUTINE_OBJECTS:
        return False
    if not any(r.roletype == RoleSpecType.ROLESPEC_PUBLIC for r in node.grantees or ()):
        return False
    name, types = sqlast.dotted(fn.funcname), sqlast.in_arg_types(fn.parameters)
    return any(
        sqlast.dotted(o.objname) == name
        and (o.args_unspecified or [sqlast.type_name(t) for t in o.objargs or ()] == types)
        for o in node.objects or ()
    )


def pgmq003_search_path_and_security(script: Script) -> Iterator[Problem]:
    """search_path is pinned; SECURITY DEFINER only where declared, and revoked from PUBLIC."""
    for r in script.routines:
        policy = script.policy(r)
        paths = [s for s in r.settings if s.name == "search_path"]
        unpinned = bool(policy and policy.unpinned_reason.strip())
        if not paths and not unpinned:
            yield problem("PGMQ003", r, "no SET search_path = pg_catalog, pg_temp")
        if paths and unpinned:
            yield problem("PGMQ003", r, "the manifest says this routine does not pin search_path")
        for message in filter(None, map(_search_path_problem, paths)):
            yield problem("PGMQ003", r, message)
        security = r.options.get("security")
        definer = bool(security is not None and security.boolval)
        allowed = bool(policy and policy.security_definer)
        if definer and not allowed:
            yield problem("PGMQ003", r, "SECURITY DEFINER but the manifest gives no definer_reason for it")
        elif allowed and not definer:
            yield problem("PGMQ003", r, "the manifest gives a definer_reason but it is not SECURITY DEFINER")
        if definer and not any(_revokes_from_public(s.node, r.node) for s in script.statements):
            yield problem("PGMQ003", r, "SECURITY DEFINER without REVOKE ... FROM PUBLIC")


# ----------------------------------------------------------------------------- PGMQ004

def pgmq004_bodies_compile(script: Script) -> Iterator[Problem]:
    """PL/pgSQL bodies compile and the SQL in them parses; LANGUAGE sql bodies parse."""
    for r in script.routines:
        for message in r.body_errors:
            yield problem("PGMQ004", r, message)


# ----------------------------------------------------------------------------- PGMQ005

def _takes_parameters(template: str) -> bool:
    """Whether dynamic SQL could take its values as $n USING parameters (DDL cannot)."""
    try:
        stmts = parse_sql(sqlast.fill_format(template))
    except ParseError:
        return True
    return any(isinstance(s.stmt, PARAMETERIZABLE) for s in stmts)


def _format_problem(template: str) -> str | None:
    for spec in sqlast.FORMAT_SPEC.finditer(template):
        text, kind = spec.group(0), spec.group("type")
        if kind == "L" and _takes_parameters(template):
            return f"format string uses {text}; pass values with USING, not as quoted literals"
        if kind == "s":
            return f"format string uses {text}; quote identifiers with %I, pass values with USING"
        if kind not in (None, "I", "L") or spec.group("flags") or spec.group("width"):
            return f"format string uses {text}; only %I, %n$I (and %L in DDL) are allowed"
    return None


def _dynamic_sql_problem(query: str) -> str | None:
    try:
        node = sqlast.expression(query)
    except ParseError:
        return None  # reported by PGMQ004
    if isinstance(node, ast.ColumnRef | ast.ParamRef):
        return None
    if isinstance(node, ast.A_Expr) and sqlast.dotted(node.name) == "||":
        return "dynamic SQL built with ||; use format() with %I and pass values with USING"
    if not sqlast.is_call(node, "format"):
        return f"dynamic SQL must be format(...) or a variable, not {type(node).__name__}"
    template = sqlast.format_string(node)
    if template is None:
        return "the format() string of dynamic SQL must be a string constant"
    return _format_problem(template)


def pgmq005_dynamic_sql(script: Script) -> Iterator[Problem]:
    """EXECUTE-like statements run format('constant with %I', ...) or a variable, only."""
    for r in script.routines:
        for query in sqlast.dynamic_queries(r.plpgsql or []):
            message = _dynamic_sql_problem(query)
            if message:
                yield problem("PGMQ005", r, message)


# ----------------------------------------------------------------------------- PGMQ006

def _unqualified(stmts: object) -> list[str]:
    relations = visitors.referenced_relations(stmts)
    return sorted(rel for rel in relations if not sqlast.is_qualified(rel))


def _transition_tables(script: Script) -> dict[str, set[str]]:
    """The transition tables each trigger function may read: its triggers' in this script, and
    in an upgrade script the previous version's too."""
    found = transition_tables(stmt.node for stmt in script.statements)
    for fn, names in script.previous_transitions.items():
        found.setdefault(fn, set()).update(names)
    return found


def pgmq006_qualified_relations(script: Script) -> Iterator[Problem]:
    """Relations in top-level statements, bodies and dynamic-SQL templates have a schema
    (a trigger function's transition tables excepted)."""
    for stmt in script.statements:
        if not isinstance(stmt.node, ast.CreateFunctionStmt):
            for rel in _unqualified(stmt.node):
                yield problem("PGMQ006", stmt, f"relation {rel} is not schema-qualified")
    transition = _transition_tables(script)
    for r in script.routines:
        exempt = transition.get(".".join(n.sval for n in r.node.funcname), set())
        for sql in r.sql:
            where = " in dynamic SQL" if sql.kind == "template" else ""
            for rel in _unqualified(sql.stmts):
                if rel in exempt:
                    continue
                yield problem("PGMQ006", r, f"relation {rel}{where} is not schema-qualified")
        for message in r.template_errors:
            yield problem("PGMQ006", r, f"cannot check relations: {message}")


# ----------------------------------------------------------------------------- PGMQ007

def _replaces_previous(script: Script, stmt: Statement) -> bool:
    """An upgrade script's CREATE OR REPLACE of a routine the previous version has."""
    node = stmt.node
    if not (script.upgrade and isinstance(node, ast.CreateFunctionStmt)):
        return False
    qualified = [n.sval for n in node.funcname[:-1]] == [script.manifest.schema]
    return qualified and (node.funcname[-1].sval, sqlast.identity_args(node)) in script.previous


def pgmq007_no_replace_or_if_not_exists(script: Script) -> Iterator[Problem]:
    """Top-level statements never CREATE OR REPLACE nor CREATE ... IF NOT EXISTS; an upgrade
    script may CREATE OR REPLACE a routine that the version it upgrades from has."""
    kind = "an upgrade script" if script.upgrade else "an install script"
    for stmt in script.statements:
        if type(stmt.node).__name__.startswith("Alter"):
            continue  # ALTER TEXT SEARCH CONFIGURATION ... REPLACE is not CREATE OR REPLACE
        if getattr(stmt.node, "replace", False) and not _replaces_previous(script, stmt):
            what = "of a routine the previous version does not have" \
                if isinstance(stmt.node, ast.CreateFunctionStmt) and script.upgrade else ""
            yield problem("PGMQ007", stmt, f"CREATE OR REPLACE {what + ' ' if what else ''}in {kind}")
        if getattr(stmt.node, "if_not_exists", False):
            yield problem("PGMQ007", stmt, f"IF NOT EXISTS in {kind}")


# ----------------------------------------------------------------------------- PGMQ008

def _config_dump_arg(node: ast.Node) -> str | None:
    """The table named by SELECT pg_extension_config_dump('<table>', ...), else None."""
    if not isinstance(node, ast.SelectStmt):
        return None
    for target in node.targetList or ():
        call = target.val
        if sqlast.is_call(call, "pg_extension_config_dump") and call.args:
            arg = call.args[0].arg if isinstance(call.args[0], ast.TypeCast) else call.args[0]
            return getattr(arg.val, "sval", "") if isinstance(arg, ast.A_Const) else ""
    return None


def _adds_to_extension(node: ast.Node) -> bool:
    node = getattr(node, "stmt", node)  # RawStmt from parse_sql
    return isinstance(node, ast.AlterExtensionContentsStmt) and node.action == 1


def _created_table(stmt: Statement) -> str | None:
    """The table (or sequence: its value can be config-dumped too) a statement creates."""
    if not isinstance(stmt.node, (ast.CreateStmt, ast.CreateSeqStmt)):
        return None
    rel = stmt.node.relation if isinstance(stmt.node, ast.CreateStmt) else stmt.node.sequence
    return f"{rel.schemaname}.{rel.relname}" if rel.schemaname else rel.relname


def _config_dumps(script: Script) -> Iterator[Problem]:
    """Each pg_extension_config_dump call: extension only, of a declared, created table."""
    declared = {f"{script.manifest.schema}.{t}" for t in script.manifest.config_tables}
    # An upgrade script must config-dump the config tables it creates; the others exist already
    # (and may be dumped again, e.g. with a new filter).
    wanted = declared & {_created_table(s) for s in script.statements} if script.upgrade else set(declared)
    created: dict[str, Statement] = {}
    for stmt in script.statements:
        if _created_table(stmt):
            created[_created_table(stmt)] = stmt
        table = _config_dump_arg(stmt.node)
        if table is None:
            continue
        if script.target != "extension":
            yield problem("PGMQ008", stmt, "pg_extension_config_dump outside an extension script")
        elif table not in declared:
            yield problem("PGMQ008", stmt, f"{table} is config-dumped but not a config table")
        elif table not in created and (table in wanted or not script.upgrade):
            yield problem("PGMQ008", stmt, f"{table} is config-dumped before it is created")
        if table in created:
            wanted.discard(table)
    for table in sorted(wanted) if script.target == "extension" else ():
        where = created.get(table)
        if where is None:
            yield Problem("PGMQ008", "script", f"config table {table} is not created", 1)
        else:
            message = f"config table {table} is not followed by pg_extension_config_dump"
            yield problem("PGMQ008", where, message)


def pgmq008_config_dump(script: Script) -> Iterator[Problem]:
    """Config tables are config-dumped (extension only); nothing is ALTER EXTENSION ... ADDed."""
    yield from _config_dumps(script)
    for stmt in script.statements:
        if _adds_to_extension(stmt.node):
            yield problem("PGMQ008", stmt, "ALTER EXTENSION ... ADD in the script")
    for r in script.routines:
        if any(_adds_to_extension(s) for sql in r.sql for s in sql.stmts):
            yield problem("PGMQ008", r, "ALTER EXTENSION ... ADD in a function body")


# ----------------------------------------------------------------------------- PGMQ009

def pgmq009_no_transactions_ascii(script: Script) -> Iterator[Problem]:
    """No BEGIN/COMMIT/ROLLBACK/SAVEPOINT at top level or in bodies; ASCII text only."""
    for stmt in script.statements:
        if isinstance(stmt.node, ast.TransactionStmt):
            yield problem("PGMQ009", stmt, "transaction control at top level")
    for r in script.routines:
        in_plpgsql = any(k in n for n in sqlast.walk(r.plpgsql or []) for k in PLPGSQL_TRANSACTION)
        nodes = (getattr(s, "stmt", s) for sql in r.sql for s in sql.stmts)
        in_sql = any(isinstance(n, ast.TransactionStmt) for n in nodes)
        policy = script.policy(r)
        if (in_plpgsql or in_sql) and not (r.node.is_procedure and policy and policy.commits):
            yield problem("PGMQ009", r, "transaction control in a body the manifest does not allow")
    for number, text in enumerate(script.text.splitlines(), 1):
        bad = next((ch for ch in text if not ch.isascii()), None)
        if bad is not None:
            yield Problem("PGMQ009", "script", f"non-ASCII character U+{ord(bad):04X}", number)


# ----------------------------------------------------------------------------- PGMQ010

def pgmq010_volatility(script: Script) -> Iterator[Problem]:
    """Every function (procedures have none) says IMMUTABLE, STABLE or VOLATILE."""
    for r in script.routines:
        if not r.node.is_procedure and "volatility" not in r.options:
            yield problem("PGMQ010", r, "volatility not declared (IMMUTABLE, STABLE or VOLATILE)")


# ----------------------------------------------------------------------------- PGMQ011

# elog levels in parse_plpgsql()'s JSON (PostgreSQL's elog.h)
ELOG_LEVELS = {14: "DEBUG", 15: "LOG", 17: "INFO", 18: "NOTICE", 19: "WARNING", 21: "EXCEPTION"}
RAISE_ERRCODE = 0  # PLPGSQL_RAISEOPTION_ERRCODE


def _errcode(raise_stmt: dict) -> str | None:
    """The ERRCODE option of a RAISE (a constant), else None."""
    for option in raise_stmt.get("options") or ():
        opt = option["PLpgSQL_raise_option"]
        if opt.get("opt_type", 0) == RAISE_ERRCODE:
            query = opt["expr"]["PLpgSQL_expr"]["query"].strip()
            return query[1:-1] if query.startswith("'") and query.endswith("'") else query
    return None


def _raise_problem(raise_stmt: dict, schema: str) -> str | None:
    level = ELOG_LEVELS.get(raise_stmt.get("elog_level"), str(raise_stmt.get("elog_level")))
    message = raise_stmt.get("message")
    if message is None:
        if level == "EXCEPTION" and not raise_stmt.get("options") and "condname" not in raise_stmt:
            return None  # RAISE; re-raises the error being handled
        return f"RAISE {level} without a declared message (use raise_error() in the template)"
    # bodies are parsed with "<schema>." read as "public." (see script.py): texts too
    allowed = errors.allowed(level, message, lambda text: re.sub(rf"\b{re.escape(schema)}\.", "public.", text))
    if not allowed:
        return f"RAISE {level} {message!r} is not declared in pgmq_build/errors.py"
    condition = _errcode(raise_stmt) or raise_stmt.get("condname") or "raise_exception"
    if level == "EXCEPTION" and condition not in allowed:
        return f"raises {message!r} with {condition}, declared with {' / '.join(sorted(allowed))}"
    return None


def pgmq011_upstream_errors(script: Script) -> Iterator[Problem]:
    """Upstream functions (and their internal work) raise only declared messages and classes."""
    for r in script.routines:
        policy = script.policy(r)
        upstream = r.qualified and (r.key in script.contract or (policy and policy.upstream_path))
        if not upstream or r.plpgsql is None:
            continue
        for node in sqlast.walk(r.plpgsql):
            if "PLpgSQL_stmt_raise" in node:
                message = _raise_problem(node["PLpgSQL_stmt_raise"], script.manifest.schema)
                if message:
                    yield problem("PGMQ011", r, message)


# ----------------------------------------------------------------------------- PGMQ012

def pgmq012_upstream_contract(script: Script) -> Iterator[Problem]:
    """A routine with one of upstream's identities keeps upstream's signature (argument names,
    defaults, result, kind); an install script creates every routine of upstream's contract."""
    created = set()
    for r in script.routines:
        want = script.contract.get(r.key) if r.qualified else None
        if want is None:
            continue
        created.add(r.key)
        try:
            got = sqlast.signature(r.node)
        except ValueError:
            continue  # PGMQ002 says why
        if got.line != want.line:
            yield problem("PGMQ012", r, f"differs from upstream's contract: {want.line.strip()}")
    if script.upgrade:
        return
    for key, want in script.contract.items():
        if key not in created:
            ours = [r.obj for r in script.routines if r.qualified and r.key[0] == key[0]]
            hint = f"; the script has {', '.join(ours)}" if ours else ""
            yield Problem("PGMQ012", f"{want.schema}.{want.name}({want.identity})",
                          f"upstream's routine is not created{hint}", 1)


RULES = (
    pgmq002_declared,
    pgmq003_search_path_and_security,
    pgmq004_bodies_compile,
    pgmq005_dynamic_sql,
    pgmq006_qualified_relations,
    pgmq007_no_replace_or_if_not_exists,
    pgmq008_config_dump,
    pgmq009_no_transactions_ascii,
    pgmq010_volatility,
    pgmq011_upstream_errors,
    pgmq012_upstream_contract,
)
