"""Small, pure helpers over pglast trees: source positions, type names, signatures, PL/pgSQL JSON.

Nothing here knows about the manifest or the rules; ``script.py`` builds on these and the rules
in ``rules.py`` read the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

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


def _param(p: ast.FunctionParameter, in_prefix: str, defaults: bool = False) -> str:
    name = quote_ident(p.name) + " " if p.name else ""
    default = f" DEFAULT {default_text(p)}" if defaults and p.defexpr is not None else ""
    return _MODE_PREFIX.get(p.mode, in_prefix) + name + type_name(p.argType) + default


def _params(fn: ast.CreateFunctionStmt, defaults: bool) -> str:
    params = [p for p in fn.parameters or () if p.mode != Mode.FUNC_PARAM_TABLE]
    mark_in = fn.is_procedure and any(p.mode not in _IN for p in params)
    return ", ".join(_param(p, "IN " if mark_in else "", defaults) for p in params)


def identity_args(fn: ast.CreateFunctionStmt) -> str:
    """The argument list without defaults (pg_get_function_identity_arguments).

    Like pg_get_function_arguments, a procedure that has any non-IN argument marks its IN
    arguments with ``IN`` too (PostgreSQL marks them in every procedure; the listing and the
    tests leave the mark out where nothing else is marked).
    """
    return _params(fn, defaults=False)


def arguments(fn: ast.CreateFunctionStmt) -> str:
    """The argument list with defaults, as pg_get_function_arguments prints it."""
    return _params(fn, defaults=True)


def _cast_label(tn: ast.TypeName, from_argument: bool = False) -> str:
    """The type of a constant as ruleutils prints it after ``::`` (format_type with a typmod of
    -1: bpchar stays bpchar). An argument's type loses its modifiers; a cast keeping one is not
    a form the templates use."""
    if tn.typmods and not from_argument:
        raise ValueError(f"a cast with a type modifier ({type_name(tn)})")
    names = [n.sval for n in tn.names]
    if names[-1] == "bpchar" and names[:-1] in ([], ["pg_catalog"]):
        return "bpchar" + ("[]" if tn.arrayBounds else "")
    return type_name(tn)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def default_text(p: ast.FunctionParameter) -> str:
    """A parameter's DEFAULT as pg_get_function_arguments prints it: PostgreSQL stores the
    expression coerced to the argument's type and deparses that. Only the forms our templates
    and upstream PGMQ write are known (the catalog-contract test checks them against a server):
    NULL and string constants, cast or not, and bare non-negative integers and booleans (an
    implicit cast prints as its argument). Anything else raises ValueError."""
    expr, label = p.defexpr, None
    if isinstance(expr, ast.TypeCast):
        expr, label = expr.arg, _cast_label(expr.typeName)
    if not isinstance(expr, ast.A_Const):
        raise ValueError(f"DEFAULT {type(expr).__name__} of {p.name}: not a constant")
    label = label or _cast_label(p.argType, from_argument=True)
    value = expr.val
    if expr.isnull:
        return f"NULL::{label}"
    if isinstance(value, ast.String):
        return f"{_literal(value.sval)}::{label}"
    if p.defexpr is expr and isinstance(value, ast.Integer) and value.ival >= 0:
        return str(value.ival)
    if p.defexpr is expr and isinstance(value, ast.Boolean):
        return "true" if value.boolval else "false"
    raise ValueError(f"DEFAULT of {p.name}: a constant form whose printing is not known")


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


@dataclass(frozen=True)
class RoutineHead:
    """What names a routine and what it returns (:class:`Signature` and upgrade.Routine add to it)."""

    schema: str
    name: str
    kind: str  # "function" | "procedure"
    arg_types: tuple[str, ...]  # the identity: input argument types
    result: str | None  # pg_get_function_result; None for a procedure


def routine_head(fn: ast.CreateFunctionStmt) -> dict[str, object]:
    """The :class:`RoutineHead` fields of a CREATE FUNCTION / PROCEDURE; ValueError when its
    name is not schema-qualified."""
    names = [n.sval for n in fn.funcname]
    if len(names) != 2:
        raise ValueError(f"routine {'.'.join(names)} is not schema-qualified")
    return {"schema": names[0], "name": names[1], "kind": "procedure" if fn.is_procedure else "function",
            "arg_types": tuple(in_arg_types(fn.parameters)), "result": result_type(fn)}


@dataclass(frozen=True)
class Signature(RoutineHead):
    """A routine's signature as PostgreSQL prints it with search_path = pg_catalog.

    ``line`` is its line in the API listing (docs/api.txt) and in upstream's contract
    (pgmq_build/upstream-pgmq-1.13.txt); :func:`parse_signature` reads such a line back.
    """

    arguments: str = ""  # pg_get_function_arguments
    identity: str = ""  # pg_get_function_identity_arguments

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """(name, input argument types): what tells overloads apart."""
        return (self.name, self.arg_types)

    @property
    def text(self) -> str:
        name = self.name if _SIMPLE_NAME.match(self.name) else quote_ident(self.name)
        returns = f" RETURNS {self.result}" if self.result is not None else ""
        return f"{quote_ident(self.schema)}.{name}({self.arguments}){returns}"

    @property
    def line(self) -> str:
        return f"{self.kind:<9} {self.text}"


def signature(fn: ast.CreateFunctionStmt) -> Signature:
    """The signature of a CREATE FUNCTION / PROCEDURE (its name must be schema-qualified)."""
    return Signature(**routine_head(fn), arguments=arguments(fn), identity=identity_args(fn))


@lru_cache(maxsize=8)
def parse_signatures(lines: tuple[str, ...]) -> tuple[Signature, ...]:
    """:func:`parse_signature` of each line (e.g. a manifest's contract), parsed once."""
    return tuple(parse_signature(line) for line in lines)


def parse_signature(line: str) -> Signature:
    """A ``Signature.line`` read back (parsed as the CREATE statement it abbreviates)."""
    kind, _, text = line.strip().partition(" ")
    if kind not in ("function", "procedure"):
        raise ValueError(f"not a signature line: {line!r}")
    (raw,) = parse_sql(f"CREATE {kind.upper()} {text.strip()} LANGUAGE sql AS ''")
    return signature(raw.stmt)


def split_args(args: str) -> list[str]:
    """Split an argument list's text on top-level commas (defaults may hold commas in quotes)."""
    out, depth, quote, cur = [], 0, False, []
    for ch in args:
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def strip_defaults(args: str) -> str:
    """An argument list's text without its DEFAULT clauses (the templates' COMMENT and GRANT
    statements name a routine by its arguments)."""
    return ", ".join(a.split(" DEFAULT ", 1)[0] for a in split_args(args))


def strip_in(args: str) -> str:
    """PostgreSQL prints every argument of a procedure as "IN name type"; the listing writes
    "name type" unless another mode is marked too."""
    return ", ".join(a.removeprefix("IN ") for a in split_args(args))


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
