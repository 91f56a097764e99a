"""Small, pure helpers over pglast trees: source positions, type names, signatures, PL/pgSQL JSON.

Nothing here knows about the manifest or the rules; ``script.py`` builds on these and the rules
in ``rules.py`` read the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pglast import ast, parse_sql
from pglast.enums import FunctionParameterMode as Mode
from pglast.keywords import (
    COL_NAME_KEYWORDS,
    RESERVED_KEYWORDS,
    TYPE_FUNC_NAME_KEYWORDS,
    UNRESERVED_KEYWORDS,
)

# ----------------------------------------------------------------------------- source positions

_LEADING = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)


def line_at(text: str, offset: int) -> int:
    """1-based line number of a character offset."""
    return text.count("\n", 0, max(offset, 0)) + 1


def statement_bounds(text: str, raw: ast.RawStmt) -> tuple[int, int]:
    """(start, end) of a statement's own text: leading blanks and comments skipped.

    pglast's ``stmt_location`` points just past the previous ``;`` and ``stmt_len == 0``
    means "to the end of the script".
    """
    end = raw.stmt_location + raw.stmt_len if raw.stmt_len else len(text)
    return _LEADING.match(text, raw.stmt_location).end(), end


# ----------------------------------------------------------------------------- names and types

# format_type() spellings of the built-in types the grammar rewrites (int -> pg_catalog.int4)
# or that a template may spell by their internal name.
CANONICAL_TYPES = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "varchar": "character varying",
    "bpchar": "character",
    "varbit": "bit varying",
    "time": "time without time zone",
    "timetz": "time with time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "char": '"char"',
}

_QUOTED_KEYWORDS = RESERVED_KEYWORDS | TYPE_FUNC_NAME_KEYWORDS | COL_NAME_KEYWORDS
_SIMPLE_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


def quote_ident(name: str) -> str:
    """PostgreSQL's quote_ident(): unreserved keywords and simple lower-case names stay bare."""
    if _SIMPLE_NAME.match(name) and (name in UNRESERVED_KEYWORDS or name not in _QUOTED_KEYWORDS):
        return name
    return '"' + name.replace('"', '""') + '"'


def type_name(tn: ast.TypeName) -> str:
    """A TypeName as pg_get_function_arguments prints it with search_path = pg_catalog.

    Type modifiers are dropped (function arguments do not keep them) and any number of array
    bounds prints as one ``[]``, as PostgreSQL does.
    """
    names = [n.sval for n in tn.names]
    if len(names) == 2 and names[0] == "pg_catalog":
        names = names[1:]
    # format_type() quotes type names only when they are not simple (keywords like numeric,
    # interval or json stay bare); the one special spelling, "char", is in CANONICAL_TYPES.
    quoted = [n if _SIMPLE_NAME.match(n) else quote_ident(n) for n in names]
    base = CANONICAL_TYPES.get(names[0], quoted[0]) if len(names) == 1 else ".".join(quoted)
    if tn.pct_type:
        base += "%TYPE"
    return base + ("[]" if tn.arrayBounds else "")


def dotted(names: tuple[ast.String, ...] | None) -> str:
    return ".".join(n.sval for n in names or ())


def is_qualified(relation: str) -> bool:
    """Whether a name from referenced_relations() has a schema (a dot in quotes does not count)."""
    return "." in re.sub(r'"(?:[^"]|"")*"', "x", relation)


# ----------------------------------------------------------------------------- function signatures

_IN = (Mode.FUNC_PARAM_IN, Mode.FUNC_PARAM_DEFAULT)
_MODE_PREFIX = {
    Mode.FUNC_PARAM_OUT: "OUT ",
    Mode.FUNC_PARAM_INOUT: "INOUT ",
    Mode.FUNC_PARAM_VARIADIC: "VARIADIC ",
}


def _param(p: ast.FunctionParameter, in_prefix: str) -> str:
    name = quote_ident(p.name) + " " if p.name else ""
    return _MODE_PREFIX.get(p.mode, in_prefix) + name + type_name(p.argType)


def identity_args(fn: ast.CreateFunctionStmt) -> str:
    """The argument list without defaults, in the form of ``manifest.Function.identity_args``.

    Like pg_get_function_arguments, a procedure that has any non-IN argument marks its IN
    arguments with ``IN`` too.
    """
    params = [p for p in fn.parameters or () if p.mode != Mode.FUNC_PARAM_TABLE]
    mark_in = fn.is_procedure and any(p.mode not in _IN for p in params)
    return ", ".join(_param(p, "IN " if mark_in else "") for p in params)


def result_type(fn: ast.CreateFunctionStmt) -> str | None:
    """What pg_get_function_result prints; None for a procedure."""
    if fn.is_procedure:
        return None
    params = fn.parameters or ()
    table = [p for p in params if p.mode == Mode.FUNC_PARAM_TABLE]
    if table:
        columns = (f"{quote_ident(p.name)} {type_name(p.argType)}" for p in table)
        return f"TABLE({', '.join(columns)})"
    if fn.returnType is None:
        outs = [p for p in params if p.mode in (Mode.FUNC_PARAM_OUT, Mode.FUNC_PARAM_INOUT)]
        return type_name(outs[0].argType) if len(outs) == 1 else "record"
    return ("SETOF " if fn.returnType.setof else "") + type_name(fn.returnType)


def in_arg_types(params: tuple[ast.FunctionParameter, ...] | None) -> list[str]:
    """The argument types that identify a routine in GRANT/REVOKE (no OUT, no TABLE columns)."""
    skip = (Mode.FUNC_PARAM_OUT, Mode.FUNC_PARAM_TABLE)
    return [type_name(p.argType) for p in params or () if p.mode not in skip]


# ----------------------------------------------------------------------------- PL/pgSQL JSON

def walk(node: object) -> Iterator[dict]:
    """Every dict in parse_plpgsql()'s JSON, depth first."""
    if isinstance(node, dict):
        yield node
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return
    for child in children:
        yield from walk(child)


def plpgsql_exprs(tree: object) -> Iterator[dict]:
    """Every PLpgSQL_expr payload ({"query": ..., "parseMode": ...})."""
    for node in walk(tree):
        if "PLpgSQL_expr" in node:
            yield node["PLpgSQL_expr"]


# Statements whose query is an expression computing SQL text at run time, and its key.
DYNAMIC_SQL = {
    "PLpgSQL_stmt_dynexecute": "query",
    "PLpgSQL_stmt_dynfors": "query",
    "PLpgSQL_stmt_return_query": "dynquery",
    "PLpgSQL_stmt_open": "dynquery",
}


def dynamic_queries(tree: object) -> Iterator[str]:
    """The expression text of every EXECUTE-like statement."""
    for node in walk(tree):
        for stmt, key in DYNAMIC_SQL.items():
            if key in node.get(stmt, {}):
                yield node[stmt][key]["PLpgSQL_expr"]["query"]


_ASSIGN_TARGET = re.compile(r"^.*?:?=", re.S)


def parse_expr(expr: dict) -> tuple[ast.RawStmt, ...]:
    """Parse a PLpgSQL_expr: a statement (mode 0), an expression (2) or ``var := expr`` (3-5)."""
    query, mode = expr["query"], expr.get("parseMode", 0)
    if mode == 0:
        return parse_sql(query)
    if mode >= 3:
        query = _ASSIGN_TARGET.sub("", query, count=1)
    return parse_sql("SELECT " + query)


def expression(query: str) -> ast.Node:
    """The single expression of a PL/pgSQL expression text, as a typed node."""
    return parse_sql("SELECT " + query)[0].stmt.targetList[0].val


# ----------------------------------------------------------------------------- format()

# %[n$][-][width]type, as format() reads it; "%%" is a literal percent sign.
FORMAT_SPEC = re.compile(
    r"%(?:%|(?P<pos>\d+\$)?(?P<flags>-)?(?P<width>\d+|\*(?:\d+\$)?)?(?P<type>.?))", re.S
)


def format_string(node: ast.Node) -> str | None:
    """The constant first argument of a format() call (dollar-quoted or not), else None."""
    args = node.args or ()
    if args and isinstance(args[0], ast.A_Const) and isinstance(args[0].val, ast.String):
        return args[0].val.sval
    return None


def is_call(node: ast.Node, name: str) -> bool:
    """A call of ``name`` or ``pg_catalog.name``."""
    if not isinstance(node, ast.FuncCall):
        return False
    parts = [n.sval for n in node.funcname]
    return parts[-1] == name and parts[:-1] in ([], ["pg_catalog"])


def fill_format(template: str) -> str:
    """A format string with a dummy name for each %I/%s and a literal for %L, so it parses."""
    def repl(m: re.Match) -> str:
        kind = m.group("type")
        return {"I": "x_ident", "s": "x_ident", "L": "'x'"}.get(kind, "%") if kind else "%"

    return FORMAT_SPEC.sub(repl, template)
