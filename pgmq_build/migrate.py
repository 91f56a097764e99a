"""`pgmq-build migrate`: upstream PGMQ 1.13 becomes this pgmq in place, in one transaction.

Upstream's SQL-only install (schema pgmq made by running its pgmq.sql, no extension row, as
pgmq-py's installer and managed databases do) is converted by the generated standalone script
``pgmq-standalone--1.13.x--<version>.sql`` (1.13.x: upstream 1.13.0 or 1.13.1, the same
step for both; manifest.UPSTREAM_BRIDGE): upstream's routines are replaced by ours, its
catalog rows kept, every queue adopted (our column and indexes, its tables handed to the
extension's owner). That is the standalone target. The extension target then makes CREATE
EXTENSION pgmq own our objects: it sets our standalone objects aside (catalog rows into
temporary tables, the queues' triggers recorded), drops them, runs CREATE EXTENSION pgmq in the
existing schema, and puts the rows and triggers back. Queue tables are never touched by that
second part; they are not extension members, as in a fresh install. (CREATE EXTENSION of a
non-relocatable extension whose control file names a schema that exists uses that schema; it
does not make it a member, nor does it when it creates the schema itself, so the result equals
a fresh install: the tests compare the catalogs. Its owner and grants stay; the standalone step
has made the migrating role its owner, as our installs have it.)

Upstream's extension (CREATE EXTENSION pgmq VERSION '1.13.0' or '1.13.1') needs no tool: ALTER
EXTENSION pgmq UPDATE runs the bridge ``pgmq--<upstream>--1.13.x.sql`` (a comment) and then
``pgmq--1.13.x--<version>.sql``; `migrate` does that too when asked.

Everything runs in one transaction: a failure anywhere changes nothing.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from pglast import ast, parse_sql
from psycopg import sql

from . import install, surface, upgrade
from .lint.sqlast import strip_in
from .manifest import MANIFEST, Manifest
from .paths import extension_dir
from .scriptnames import install_name, upgrade_name, upstream_step_name

Echo = Callable[[str], None]
TARGETS = ("extension", "standalone")


class MigrateError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- upstream's SQL

def upstream_sql() -> tuple[str, str]:
    """(version, text) of upstream's pgmq.sql shipped in the PyPI ``pgmq`` client package (the
    demo and the tests install upstream from it; it is never copied into this repository)."""
    try:
        files = importlib.resources.files("pgmq") / "sql"
        return (files / "pgmq.sql.version").read_text().strip(), (files / "pgmq.sql").read_text()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise MigrateError("upstream's SQL comes from the PyPI package pgmq (upstream's Python "
                           "client): pip install 'pgmq>=1.1.4'") from exc


# ----------------------------------------------------------------------------- what is there

@dataclass
class Queue:
    name: str
    kind: str  # plain | unlogged | partitioned
    messages: int
    archived: int
    owner: str


@dataclass
class Found:
    """Upstream PGMQ found in a database."""

    install: str  # "sql" (SQL-only) | "extension"
    version: str  # upstream's: 1.13.0 | 1.13.1
    queues: list[Queue] = field(default_factory=list)
    topic_bindings: int = 0
    notify: list[str] = field(default_factory=list)
    fifo: list[str] = field(default_factory=list)
    routines: int = 0
    schema_owner: str = ""
    extversion: str = ""  # the extension's version: upstream's, or manifest.bridge (updated to it only)

    @property
    def label(self) -> str:
        how = "extension" if self.install == "extension" else "SQL-only install, no extension"
        if self.extversion and self.extversion != self.version:
            how += f" at version {self.extversion}"
        return f"upstream PGMQ {self.version} ({how})"


def _identities(manifest: Manifest, upstream: bool) -> set[tuple[str, str]]:
    """(name, identity arguments) of our routines that upstream has too, or of our own only."""
    return {(e.name, e.signature.identity) for e in surface.current(manifest) if e.upstream == upstream}


def inspect(conn: psycopg.Connection, manifest: Manifest = MANIFEST) -> Found:
    """What schema pgmq holds, when it is upstream PGMQ this version migrates from; otherwise
    MigrateError saying what it is instead."""
    upstream = ", ".join(manifest.upstream)
    ext = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'").fetchone()
    if ext is not None:
        if ext[0] in manifest.versions:
            raise MigrateError(f"pgmq {ext[0]} is already this project's extension: upgrade it with "
                               "`pgmq-build install --dsn ...`; nothing was changed")
        if ext[0] not in (*manifest.upstream, manifest.bridge):
            raise MigrateError(f"extension pgmq {ext[0]} is not a version pgmq {manifest.version} migrates "
                               f"from ({upstream}): upgrade it to PGMQ 1.13 with upstream's own scripts "
                               "first (ALTER EXTENSION pgmq UPDATE with upstream's files); nothing was changed")
    schema = conn.execute("SELECT pg_catalog.obj_description(oid, 'pg_namespace'), nspowner::regrole::text "
                          "FROM pg_catalog.pg_namespace WHERE nspname = 'pgmq'").fetchone()
    if schema is None:
        raise MigrateError("schema pgmq does not exist: there is no PGMQ to migrate (install ours with "
                           "`pgmq-build install`)")
    if ext is None and install.STANDALONE_COMMENT.fullmatch(schema[0] or ""):
        raise MigrateError(f"schema pgmq already holds this project's {schema[0]}: upgrade it with "
                           "`pgmq-build install --standalone --dsn ...`; nothing was changed")
    rows = conn.execute("""SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)
                           FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'pgmq'::regnamespace""").fetchall()
    present = {(name, strip_in(args)) for name, args in rows}
    wanted = _identities(manifest, upstream=True)
    ours_only = _identities(manifest, upstream=False) & present
    if ours_only:
        names = ", ".join(sorted(f"pgmq.{n}({a})" for n, a in ours_only)[:3])
        raise MigrateError(f"schema pgmq holds routines of this project ({names}...) but is not marked as one of "
                           "its installs: it is not upstream PGMQ; nothing was changed")
    missing = wanted - present
    if len(missing) == len(wanted):
        raise MigrateError("schema pgmq holds no PGMQ routines: there is nothing to migrate")
    if missing:
        sample = ", ".join(sorted(f"pgmq.{n}({a})" for n, a in missing)[:4])
        raise MigrateError(f"schema pgmq holds an unknown or older PGMQ (missing {len(missing)} routines of "
                           f"1.13: {sample}...): migrate supports upstream PGMQ {upstream}; upgrade to 1.13 "
                           "with upstream's own instructions first; nothing was changed")
    if ext is not None and ext[0] in manifest.upstream:
        version = ext[0]
    else:  # the SQL-only install, or an extension at the bridge's version, which names neither
        src = conn.execute("SELECT p.prosrc FROM pg_catalog.pg_proc p WHERE p.oid = "
                           "'pgmq.notify_queue_listeners()'::pg_catalog.regprocedure").fetchone()[0]
        version = "1.13.1" if "TG_ARGV" in src else "1.13.0"  # 1.13.1 passes the queue name as an argument
    found = Found("extension" if ext else "sql", version, routines=len(present & wanted), schema_owner=schema[1],
                  extversion=ext[0] if ext else "")
    for name, partitioned, unlogged in conn.execute(
            "SELECT queue_name, is_partitioned, is_unlogged FROM pgmq.meta ORDER BY queue_name").fetchall():
        kind = "partitioned" if partitioned else "unlogged" if unlogged else "plain"
        counts = []
        for prefix in ("q", "a"):
            table = f"{prefix}_{name.lower()}"
            exists = conn.execute("SELECT pg_catalog.to_regclass(pg_catalog.format('pgmq.%%I', %s::text)) IS NOT NULL",
                                  (table,)).fetchone()[0]
            counts.append(conn.execute(sql.SQL("SELECT count(*) FROM pgmq.{}").format(sql.Identifier(table)))
                          .fetchone()[0] if exists else 0)
        owner = conn.execute("SELECT relowner::regrole::text FROM pg_catalog.pg_class WHERE oid = "
                             "pg_catalog.to_regclass(pg_catalog.format('pgmq.%%I', %s::text))",
                             (f"q_{name.lower()}",)).fetchone()
        found.queues.append(Queue(name, kind, counts[0], counts[1], owner[0] if owner else "?"))
    found.topic_bindings = conn.execute("SELECT count(*) FROM pgmq.topic_bindings").fetchone()[0]
    found.notify = [r[0] for r in conn.execute(
        """SELECT DISTINCT substring(c.relname FROM 3) FROM pg_catalog.pg_trigger t
           JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
           WHERE c.relnamespace = 'pgmq'::regnamespace AND t.tgname = 'trigger_notify_queue_insert_listeners'
           ORDER BY 1""").fetchall()]
    found.fifo = [r[0] for r in conn.execute(
        """SELECT substring(c.relname FROM 3 FOR length(c.relname) - 11) FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'pgmq'::regnamespace AND c.relkind IN ('i', 'I')
             AND c.relname LIKE 'q\\_%\\_fifo\\_idx' ORDER BY 1""").fetchall()]
    return found


def available_extension(conn: psycopg.Connection, manifest: Manifest = MANIFEST) -> bool:
    """Whether this version's extension files are installed on the server."""
    return conn.execute("SELECT 1 FROM pg_catalog.pg_available_extension_versions WHERE name = 'pgmq' "
                        "AND version = %s", (manifest.version,)).fetchone() is not None


def plan(found: Found, target: str, manifest: Manifest = MANIFEST) -> list[str]:
    """What a migration of ``found`` to ``target`` does, for a person to read."""
    v = manifest.version
    out = [f"Found {found.label}: {len(found.queues)} queue(s), {found.routines} routines."]
    width = max((len(q.name) for q in found.queues), default=5)
    for q in found.queues:
        out.append(f"  {q.name:<{width}}  {q.kind:<11}  {q.messages} message(s), {q.archived} archived, "
                   f"tables owned by {q.owner}")
    out.append("It will, in one transaction:")
    if found.install == "extension":
        scripts = [upstream_step_name("extension", manifest)]
        if found.extversion != manifest.bridge:
            scripts.insert(0, upgrade_name(found.extversion, manifest.bridge))
        out.append(f"  - ALTER EXTENSION pgmq UPDATE TO '{v}' (scripts {', '.join(scripts)})")
    else:
        out.append(f"  - run {upstream_step_name('standalone', manifest)} (pgmq {v}, standalone form)")
    out += [
        f"  - replace upstream's {found.routines} routines by pgmq {v}'s (same names, arguments and results)",
        "  - keep every message, archived row and msg_id sequence, pgmq.meta and the notify throttles",
        "  - add to every queue: column priority (0 for the messages already there), the priority index "
        "(partitioned queues: the vt index too)",
        f"  - move {found.topic_bindings} topic binding(s) into exchange 'pgmq.topic' "
        "(pgmq.topic_bindings becomes a view)",
    ]
    if found.notify:
        out.append(f"  - re-create the insert-notification trigger of {', '.join(found.notify)}")
    if found.fifo:
        out.append(f"  - replace the FIFO index (upstream's GIN) of {', '.join(found.fifo)} by ours")
    out.append("  - record each queue's owner (pgmq.queue_owners: its tables' owner) and hand the plain "
               "queue tables to the role running the migration (README: Security)")
    out.append(f"  - add pgmq {v}'s catalogs (queue_settings, queue_owners, exchanges, callbacks, ...) and grants")
    if found.install == "sql":
        if target == "extension":
            out.append(f"  - then CREATE EXTENSION pgmq (version {v}) in the existing schema: our objects "
                       "are set aside, created by the extension, and the catalog rows put back")
        else:
            out.append(f"  - mark schema pgmq as 'pgmq {v} (standalone)'")
    return out


# ----------------------------------------------------------------------------- running it

@dataclass
class Result:
    found: Found
    target: str
    dry_run: bool


def _script(name: str) -> str:
    path = extension_dir() / name
    if not path.exists():
        raise MigrateError(f"{path} missing: run `pgmq-build generate`")
    return path.read_text()


@dataclass
class _Objects:
    """What our standalone install script creates in schema pgmq, in script order."""

    tables: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    routines: list[upgrade.Routine] = field(default_factory=list)
    sequences: list[str] = field(default_factory=list)


def _objects(script: str, schema: str) -> _Objects:
    out = _Objects()
    for raw in parse_sql(upgrade.strip_guard(script)):
        node = raw.stmt
        if isinstance(node, ast.CreateStmt) and node.relation.schemaname == schema:
            out.tables.append(node.relation.relname)
        elif isinstance(node, ast.ViewStmt) and node.view.schemaname == schema:
            out.views.append(node.view.relname)
        elif isinstance(node, ast.CreateSeqStmt) and node.sequence.schemaname == schema:
            out.sequences.append(node.sequence.relname)
        elif isinstance(node, ast.CompositeTypeStmt) and node.typevar.schemaname == schema:
            out.types.append(node.typevar.relname)
        elif isinstance(node, ast.CreateFunctionStmt) and node.funcname[0].sval == schema:
            out.routines.append(upgrade.routine_of(node, ""))
    return out


def _ident(*names: str) -> sql.Composed:
    return sql.SQL(".").join(sql.Identifier(n) for n in names)


def adopt_as_extension(conn: psycopg.Connection, echo: Echo, manifest: Manifest = MANIFEST) -> None:
    """Our standalone install (of this version) in conn's transaction becomes the extension:
    catalog rows and queue triggers set aside, our objects dropped, CREATE EXTENSION pgmq, rows
    and triggers back. Queue tables stay as they are."""
    schema = manifest.schema
    objects = _objects(_script(install_name(manifest.version, "standalone")), schema)
    for table in objects.tables:
        conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS TABLE {}").format(
            sql.Identifier(f"pgmq_migrate_{table}"), _ident(schema, table)))
    positions = {seq: conn.execute("SELECT pg_catalog.pg_sequence_last_value(%s::regclass)",
                                   (f"{schema}.{seq}",)).fetchone()[0] for seq in objects.sequences}
    triggers = conn.execute(
        """SELECT c.relname, t.tgname, pg_catalog.pg_get_triggerdef(t.oid)
           FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
           JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
           WHERE c.relnamespace = %s::regnamespace AND p.pronamespace = %s::regnamespace
             AND NOT t.tgisinternal AND t.tgparentid = 0 ORDER BY 1, 2""", (schema, schema)).fetchall()
    # grants made on our catalog tables and views (by users; ours come back with the extension)
    grants = conn.execute(
        """SELECT c.relname, CASE WHEN a.grantee <> 0 THEN pg_catalog.pg_get_userbyid(a.grantee) END,
                  a.privilege_type, a.is_grantable
           FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
           WHERE c.relnamespace = %s::regnamespace AND c.relname = ANY (%s) AND a.grantee <> c.relowner
           ORDER BY 1, 2, 3""", (schema, objects.tables + objects.views)).fetchall()
    for table, trigger, _ in triggers:
        conn.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(trigger), _ident(schema, table)))
    # our catalog tables' own triggers come back with the extension; the queues' are put back
    triggers = [t for t in triggers if t[0] not in objects.tables]
    echo(f"  set aside {len(objects.tables)} catalog table(s) and {len(triggers)} queue trigger(s); "
         f"dropping the standalone objects")
    # Our routines use our tables' row types, and our tables' policies and generated columns use
    # our routines: those go with the tables first, then the routines, then the tables.
    conn.execute(sql.SQL("DROP VIEW {}").format(sql.SQL(", ").join(_ident(schema, v) for v in objects.views)))
    uses = conn.execute(
        """SELECT c.relname, pol.polname, a.attname
           FROM pg_catalog.pg_depend d
           JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid AND p.pronamespace = %(s)s::regnamespace
           LEFT JOIN pg_catalog.pg_policy pol ON d.classid = 'pg_catalog.pg_policy'::regclass AND pol.oid = d.objid
           LEFT JOIN pg_catalog.pg_attrdef ad ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND ad.oid = d.objid
           LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
           JOIN pg_catalog.pg_class c ON c.oid = coalesce(pol.polrelid, ad.adrelid)
           WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass AND c.relnamespace = %(s)s::regnamespace
             AND c.relname = ANY (%(t)s)
           ORDER BY 1, 2, 3""", {"s": schema, "t": objects.tables}).fetchall()
    for table, policy, column in dict.fromkeys(uses):
        if policy is not None:
            conn.execute(sql.SQL("DROP POLICY {} ON {}").format(sql.Identifier(policy), _ident(schema, table)))
        else:  # a generated column (its values are in the stash; restored ones are generated again)
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(_ident(schema, table), sql.Identifier(column)))
    # names and types from our own script, quoted by it
    conn.execute("DROP ROUTINE " + ", ".join(r.signature for r in objects.routines))
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.SQL(", ").join(_ident(schema, t) for t in objects.tables)))
    conn.execute(sql.SQL("DROP TYPE {}").format(sql.SQL(", ").join(_ident(schema, t) for t in objects.types)))
    if objects.sequences:
        conn.execute(sql.SQL("DROP SEQUENCE {}").format(sql.SQL(", ").join(_ident(schema, q) for q in objects.sequences)))
    conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS NULL").format(sql.Identifier(schema)))
    echo(f"  CREATE EXTENSION pgmq VERSION '{manifest.version}'")
    conn.execute(sql.SQL("CREATE EXTENSION pgmq VERSION {}").format(sql.Literal(manifest.version)))
    restored = 0
    for table in objects.tables:
        columns = [r[0] for r in conn.execute(
            """SELECT a.attname FROM pg_catalog.pg_attribute a
               WHERE a.attrelid = pg_catalog.format('%%I.%%I', %s::text, %s::text)::regclass
                 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum""",
            (schema, table)).fetchall()]
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        # OVERRIDING SYSTEM VALUE: identity columns keep their values (then their sequence follows)
        cur = conn.execute(sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM {} "
                                   "ON CONFLICT DO NOTHING").format(
            _ident(schema, table), cols, cols, sql.Identifier(f"pgmq_migrate_{table}")))
        restored += cur.rowcount
        for (column,) in conn.execute(
                """SELECT a.attname FROM pg_catalog.pg_attribute a
                   WHERE a.attrelid = pg_catalog.format('%%I.%%I', %s::text, %s::text)::regclass
                     AND a.attidentity <> ''""", (schema, table)).fetchall():
            conn.execute(sql.SQL("SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence({}, {}), m) "
                                 "FROM (SELECT max({}) AS m FROM {}) x WHERE m IS NOT NULL").format(
                sql.Literal(f"{schema}.{table}"), sql.Literal(column), sql.Identifier(column), _ident(schema, table)))
    for seq, value in positions.items():
        if value is not None:
            conn.execute("SELECT pg_catalog.setval(%s::regclass, %s)", (f"{schema}.{seq}", value))
    for _, _, definition in triggers:
        conn.execute(definition)
    for table, grantee, privilege, grantable in grants:
        conn.execute(sql.SQL("GRANT {} ON {} TO {}{}").format(
            sql.SQL(privilege), _ident(schema, table),
            sql.SQL("PUBLIC") if grantee is None else sql.Identifier(grantee),
            sql.SQL(" WITH GRANT OPTION" if grantable else "")))
    echo(f"  put back {restored} catalog row(s) and {len(triggers)} queue trigger(s), re-applied {len(grants)} grant(s)")


def migrate(dsn: str, target: str | None = None, dry_run: bool = False, echo: Echo = print,
            manifest: Manifest = MANIFEST) -> Result:
    """Migrate upstream PGMQ in dsn's database (see the module docstring). ``target``:
    "extension", "standalone" or None (the extension when its files are on the server)."""
    if target not in (None, *TARGETS):
        raise MigrateError(f"unknown target {target!r}; expected one of {TARGETS}")
    with install.connect(dsn) as conn:
        conn.add_notice_handler(lambda d: echo(f"  {d.severity_nonlocalized.lower()}: {d.message_primary}")
                                if d.severity_nonlocalized in ("NOTICE", "WARNING") else None)
        found = inspect(conn, manifest)
        has_files = available_extension(conn, manifest)
        if found.install == "extension":
            if target == "standalone":
                raise MigrateError(f"{found.label} is an extension: it becomes ours as an extension "
                                   "(ALTER EXTENSION pgmq UPDATE); --to standalone needs an SQL-only install")
            target = "extension"
            if not has_files:
                raise MigrateError(f"the files of pgmq {manifest.version} are not installed on the server: "
                                   "run `make install` (or `pgmq-build install`) there first; nothing was changed")
        elif target is None:
            target = "extension" if has_files else "standalone"
        elif target == "extension" and not has_files:
            raise MigrateError(f"--to extension: the files of pgmq {manifest.version} are not installed on the "
                               "server (`make install` there), or use --to standalone; nothing was changed")
        for line in plan(found, target, manifest):
            echo(line)
        if dry_run:
            conn.rollback()
            echo("Dry run: nothing was changed.")
            return Result(found, target, True)
        try:
            if found.install == "extension":
                echo(f"Updating the extension: ALTER EXTENSION pgmq UPDATE TO '{manifest.version}' ...")
                conn.execute(sql.SQL("ALTER EXTENSION pgmq UPDATE TO {}").format(sql.Literal(manifest.version)))
            else:
                name = upstream_step_name("standalone", manifest)
                echo(f"Running {name} ...")
                conn.execute(_script(name))
                if target == "extension":
                    echo("Making the extension own our objects ...")
                    adopt_as_extension(conn, echo, manifest)
            echo("Committing ...")
            conn.commit()
        except psycopg.Error as exc:
            conn.rollback()
            raise MigrateError(f"the migration failed and was rolled back, nothing was changed: "
                               f"{str(exc).strip()}") from exc
    where = "extension pgmq" if target == "extension" else "the standalone install"
    echo(f"Done: schema pgmq is now pgmq {manifest.version} ({where}); every queue and message is kept.")
    return Result(found, target, False)
