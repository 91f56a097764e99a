"""A snapshot of everything schema pgmq holds in the catalog, to compare two databases: an
upgraded one with a fresh install, or a database before and after a failed upgrade.

    a, b = snapshot(conn_a), snapshot(conn_b)
    assert a == b, "\\n".join(differences(a, b))

The snapshot is plain data (dicts, lists, strings): routines (arguments, result, kind, security,
settings, volatility, strictness, full definition, effective ACL, owner), tables, views and
sequences (kind, persistence, columns with type / NOT NULL / default / identity, options, row
security, partitioning, effective ACL), indexes, constraints, triggers, rules, policies, types
(composite attributes, domains, enums), comments on all of these, default privileges, the
extension's members and its config-dump registrations. Per-queue objects (q_/a_ tables) are
included. Message data is not; ``rows=True`` adds the rows of the config-dumped catalog tables
without their timestamp columns.

ACLs are effective ACLs (``coalesce(acl, acldefault(...))``: a never-granted object and one
granted back to its defaults compare equal), as ``grantee=PRIVILEGE[*]/grantor`` with role
names; the role running the snapshot (the installer) is written ``<installer>`` so that
installs made by different roles compare equal.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg

INSTALLER = "<installer>"
Snapshot = dict[str, Any]


def _acl(column: str, kind: str, owner: str) -> str:
    """SQL: the effective ACL of a catalog row as a sorted text array (``kind``: the SQL of
    acldefault's object type, e.g. ``'f'``; ``%%``: the queries take psycopg parameters)."""
    return f"""(SELECT array_agg(format('%%s=%%s%%s/%%s',
                    CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                    a.privilege_type, CASE WHEN a.is_grantable THEN '*' ELSE '' END,
                    a.grantor::regrole::text) ORDER BY 1)
               FROM aclexplode(COALESCE({column}, acldefault(({kind})::"char", {owner}))) a)"""


QUERIES: dict[str, str] = {
    "schema": f"""
        SELECT n.nspname, n.nspowner::regrole::text AS owner, {_acl('n.nspacl', "'n'", 'n.nspowner')} AS acl,
               obj_description(n.oid, 'pg_namespace') AS comment
        FROM pg_namespace n WHERE n.oid = %(ns)s""",
    "routines": f"""
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS key,
               p.prokind AS kind, pg_get_function_arguments(p.oid) AS arguments,
               CASE WHEN p.prokind <> 'p' THEN pg_get_function_result(p.oid) END AS result,
               l.lanname AS language, p.prosecdef AS security_definer, p.proconfig AS config,
               p.provolatile AS volatility, p.proisstrict AS strict, p.proparallel AS parallel,
               p.proleakproof AS leakproof, p.procost AS cost, p.prorows AS rows,
               pg_get_functiondef(p.oid) AS definition,
               p.proowner::regrole::text AS owner, {_acl('p.proacl', "'f'", 'p.proowner')} AS acl,
               obj_description(p.oid, 'pg_proc') AS comment
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = %(ns)s""",
    "relations": f"""
        SELECT c.relname AS key, c.relkind AS kind, c.relpersistence AS persistence,
               am.amname AS access_method, c.reloptions AS options,
               c.relrowsecurity AS row_security, c.relforcerowsecurity AS force_row_security,
               c.relreplident AS replica_identity,
               CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END AS partition_key,
               CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, c.oid) END AS partition_bound,
               (SELECT array_agg(i.inhparent::regclass::text ORDER BY i.inhseqno)
                FROM pg_inherits i WHERE i.inhrelid = c.oid) AS parents,
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END AS view_definition,
               c.relowner::regrole::text AS owner,
               {_acl('c.relacl', "CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END", 'c.relowner')} AS acl,
               obj_description(c.oid, 'pg_class') AS comment
        FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam
        WHERE c.relnamespace = %(ns)s AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')""",
    "columns": f"""
        SELECT c.relname AS key,
               json_agg(json_build_object(
                   'name', a.attname, 'type', format_type(a.atttypid, a.atttypmod),
                   'not_null', a.attnotnull, 'default', pg_get_expr(d.adbin, d.adrelid),
                   'identity', a.attidentity, 'generated', a.attgenerated,
                   'collation', CASE WHEN a.attcollation <> 0 THEN a.attcollation::regcollation::text END,
                   'acl', {_acl('a.attacl', "'c'", 'c.relowner')}, 'comment', col_description(c.oid, a.attnum))
                   ORDER BY a.attnum) AS columns
        FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = %(ns)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
        GROUP BY c.relname""",
    "sequences": """
        SELECT c.relname AS key, s.seqtypid::regtype::text AS type, s.seqstart AS start,
               s.seqincrement AS increment, s.seqmax AS max, s.seqmin AS min, s.seqcache AS cache,
               s.seqcycle AS cycle,
               (SELECT d.refobjid::regclass::text || '.' || a.attname || ' (' || d.deptype::text || ')'
                FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                  AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')) AS owned_by
        FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
        WHERE c.relnamespace = %(ns)s""",
    "indexes": """
        SELECT ic.relname AS key, pg_get_indexdef(i.indexrelid) AS definition,
               i.indisprimary AS is_primary, i.indisclustered AS clustered, ic.reloptions AS options,
               obj_description(ic.oid, 'pg_class') AS comment
        FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
        WHERE ic.relnamespace = %(ns)s""",
    "constraints": """
        SELECT COALESCE(c.relname, t.typname) || '.' || k.conname AS key, k.contype AS type,
               pg_get_constraintdef(k.oid) AS definition, k.condeferrable AS deferrable,
               k.condeferred AS deferred, k.convalidated AS validated, k.conislocal AS local,
               k.coninhcount AS inherited, obj_description(k.oid, 'pg_constraint') AS comment
        FROM pg_constraint k LEFT JOIN pg_class c ON c.oid = k.conrelid
        LEFT JOIN pg_type t ON t.oid = k.contypid
        WHERE k.connamespace = %(ns)s""",
    "triggers": """
        SELECT c.relname || '.' || g.tgname AS key, pg_get_triggerdef(g.oid) AS definition,
               g.tgenabled AS enabled, obj_description(g.oid, 'pg_trigger') AS comment
        FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
        WHERE c.relnamespace = %(ns)s AND NOT g.tgisinternal""",
    "rules": """
        SELECT c.relname || '.' || r.rulename AS key, pg_get_ruledef(r.oid) AS definition,
               r.ev_enabled AS enabled, obj_description(r.oid, 'pg_rewrite') AS comment
        FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
        WHERE c.relnamespace = %(ns)s AND r.rulename <> '_RETURN'""",
    "policies": """
        SELECT c.relname || '.' || p.polname AS key, p.polcmd AS command, p.polpermissive AS permissive,
               (SELECT array_agg(CASE r WHEN 0 THEN 'PUBLIC' ELSE r::regrole::text END ORDER BY 1)
                FROM unnest(p.polroles) r) AS roles,
               pg_get_expr(p.polqual, p.polrelid) AS qual,
               pg_get_expr(p.polwithcheck, p.polrelid) AS with_check,
               obj_description(p.oid, 'pg_policy') AS comment
        FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
        WHERE c.relnamespace = %(ns)s""",
    "types": f"""
        SELECT t.typname AS key, t.typtype AS type,
               CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END AS base_type,
               t.typnotnull AS not_null, t.typdefault AS "default",
               (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                FROM pg_enum e WHERE e.enumtypid = t.oid) AS labels,
               t.typowner::regrole::text AS owner, {_acl('t.typacl', "'T'", 't.typowner')} AS acl,
               obj_description(t.oid, 'pg_type') AS comment
        FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE t.typnamespace = %(ns)s AND (t.typrelid = 0 OR c.relkind = 'c')
          AND NOT EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)""",
    "default_acls": """
        SELECT d.defaclrole::regrole::text || ' ' || d.defaclobjtype::text AS key,
               (SELECT array_agg(a::text ORDER BY 1) FROM unnest(d.defaclacl) a) AS acl
        FROM pg_default_acl d WHERE d.defaclnamespace = %(ns)s""",
    "extension": """
        SELECT e.extname AS key, e.extversion AS version, e.extrelocatable AS relocatable,
               e.extnamespace::regnamespace::text AS schema, e.extowner::regrole::text AS owner,
               obj_description(e.oid, 'pg_extension') AS comment
        FROM pg_extension e WHERE e.extnamespace = %(ns)s""",
    "extension_members": """
        SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS key, d.deptype AS type
        FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
        WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extnamespace = %(ns)s""",
    "config_dump": """
        SELECT x.cfg::regclass::text AS key, x.cond AS condition
        FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS x(cfg, cond)
        WHERE e.extnamespace = %(ns)s""",
}


def _rows(conn: psycopg.Connection, sql: str, ns: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(sql, {"ns": ns}).fetchall()


def _installer(value: Any, installer: str) -> Any:
    """The installer's role name replaced by <installer> in owners and ACL items."""
    if isinstance(value, str):
        if value == installer:
            return INSTALLER
        if "=" in value and "/" in value:  # grantee=PRIV/grantor
            grantee, rest = value.split("=", 1)
            privs, grantor = rest.rsplit("/", 1)
            return (f"{INSTALLER if grantee == installer else grantee}={privs}/"
                    f"{INSTALLER if grantor == installer else grantor}")
        return value
    if isinstance(value, list):
        return sorted(_installer(v, installer) for v in value) if all(isinstance(v, str) for v in value) \
            else [_installer(v, installer) for v in value]
    return value


def snapshot(conn: psycopg.Connection, schema: str = "pgmq", installer: str | None = None,
             rows: bool = False) -> Snapshot:
    """Everything in ``schema`` (see the module docstring), keyed by section then object name."""
    with conn.transaction():
        conn.execute("SET LOCAL search_path = pg_catalog")
        found = conn.execute("SELECT oid, current_user FROM pg_namespace WHERE nspname = %s",
                             (schema,)).fetchone()
        if found is None:
            return {}
        ns, current = found
        who = installer or current
        out: Snapshot = {}
        for section, sql in QUERIES.items():
            entries = {}
            for row in _rows(conn, sql, ns):
                key = row.pop("key", None) or row.pop("nspname", schema)
                fields = {k: _installer(v, who) if k in ("owner", "acl") else v for k, v in row.items()}
                if section == "columns":
                    fields["columns"] = [{**col, "acl": _installer(col["acl"], who)} for col in fields["columns"]]
                entries[key] = fields
            out[section] = dict(sorted(entries.items()))
        if rows:
            out["config_rows"] = _config_rows(conn, ns)
    return out


def _config_rows(conn: psycopg.Connection, ns: int) -> dict[str, list[str]]:
    """Rows of the config-dumped tables as sorted JSON text, timestamp columns left out (they
    record when something happened, not what)."""
    tables = conn.execute("""SELECT x.cfg::regclass::text FROM pg_extension e, unnest(e.extconfig) x(cfg)
                             WHERE e.extnamespace = %s
                             UNION SELECT c.oid::regclass::text FROM pg_class c
                             WHERE c.relnamespace = %s AND c.relkind IN ('r', 'p')
                               AND NOT c.relispartition AND c.relname !~ '^[qa]_' ORDER BY 1""",
                          (ns, ns)).fetchall()
    out = {}
    for (table,) in tables:
        columns = [r[0] for r in conn.execute(
            """SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0
               AND NOT attisdropped AND atttypid NOT IN ('timestamptz'::regtype, 'timestamp'::regtype)
               ORDER BY attnum""", (table,)).fetchall()]
        if not columns:
            continue
        query = f"SELECT json_build_array({', '.join(columns)})::text FROM {table}"  # names from the catalog
        out[table] = sorted(r[0] for r in conn.execute(query).fetchall())
    return out


def differences(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str] = ("a", "b"),
                limit: int = 200) -> list[str]:
    """What differs between two snapshots, one readable line (or a small diff) per difference."""
    out = list(_differences(a, b, names))
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]) -> Iterator[str]:
    left, right = names
    for section in sorted(set(a) | set(b)):
        sa, sb = a.get(section, {}), b.get(section, {})
        for key in sorted(set(sa) | set(sb)):
            if key not in sb:
                yield f"{section} {key}: only in {left}"
            elif key not in sa:
                yield f"{section} {key}: only in {right}"
            elif sa[key] != sb[key]:
                va, vb = sa[key], sb[key]
                if not (isinstance(va, dict) and isinstance(vb, dict)):
                    yield from _value_diff(f"{section} {key}", va, vb, names)
                    continue
                for field in sorted(set(va) | set(vb)):
                    if va.get(field) != vb.get(field):
                        yield from _value_diff(f"{section} {key} {field}", va.get(field), vb.get(field), names)


def _value_diff(where: str, va: Any, vb: Any, names: tuple[str, str]) -> Iterator[str]:
    ta = va if isinstance(va, str) else "\n".join(map(str, va)) if isinstance(va, list) else None
    tb = vb if isinstance(vb, str) else "\n".join(map(str, vb)) if isinstance(vb, list) else None
    if ta is not None and tb is not None and (ta.count("\n") or tb.count("\n")):
        lines = difflib.unified_diff(ta.splitlines(), tb.splitlines(), names[0], names[1], n=1, lineterm="")
        yield f"{where}:\n    " + "\n    ".join(lines)
    else:
        yield f"{where}: {names[0]}={va!r} {names[1]}={vb!r}"
