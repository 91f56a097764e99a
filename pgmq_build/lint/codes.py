"""Why each lint rule exists; printed by `pgmq-build explain CODE`."""

from __future__ import annotations

CODES: dict[str, str] = {
    "PGMQ001": (
        "The script must parse as plain SQL. Nothing else can be checked in a script that does "
        "not parse, so linting stops at the first syntax error. The only psql line allowed is the "
        'extension guard `\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit`, which '
        "CREATE EXTENSION strips and which stops `psql -f` from running the extension script by "
        "hand; any other backslash command would break CREATE EXTENSION or the standalone install."
    ),
    "PGMQ002": (
        "Every CREATE FUNCTION/PROCEDURE names the extension schema explicitly, is created once, "
        "and has a policy entry in the manifest (manifest.ROUTINES, by name); in an install "
        "script every policy entry matches a routine. The signature itself is declared once, in "
        "the template, and listed in docs/api.txt, so an API change shows in review; the policy "
        "entry is where a routine's security decisions live (PGMQ003, PGMQ009, PGMQ011), and a "
        "routine without one, or an entry left behind by a removed routine, would mean a decision "
        "nobody made. Its arguments must print as PostgreSQL prints them (known DEFAULT forms "
        "only). An unqualified name lands in whatever schema is first on the search_path of the "
        "session that installs the script."
    ),
    "PGMQ003": (
        "Every routine pins `SET search_path = pg_catalog, pg_temp`. Without it, an unqualified "
        "function, operator or type inside the body resolves through the caller's search_path, "
        "where anyone with CREATE on a schema can plant a look-alike. pg_temp goes last so a "
        "temporary object can never shadow a catalog one. SECURITY DEFINER runs with the owner's "
        "rights, so it is allowed only where the manifest's policy gives a definer_reason, and "
        "such a routine must be REVOKEd from PUBLIC so only explicitly granted roles can call it. "
        "The exception is a routine whose manifest entry gives an unpinned_reason (a procedure "
        "that commits, where PostgreSQL forbids SET, or one that must resolve a caller-given "
        "name in the caller's search_path): it must not pin and must qualify everything."
    ),
    "PGMQ004": (
        "Every PL/pgSQL body compiles (pglast.parse_plpgsql on the whole CREATE FUNCTION, with "
        "the extension schema read as public because the parser has no catalog) and every SQL "
        "statement or expression inside it parses; LANGUAGE sql bodies parse too. PostgreSQL "
        "only checks PL/pgSQL bodies lightly at CREATE time, so a typo in a rarely taken branch "
        "would otherwise first show up in production."
    ),
    "PGMQ005": (
        "Dynamic SQL (EXECUTE, RETURN QUERY EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR EXECUTE) is "
        "built only with format() over a constant string, or taken from a variable. Identifiers "
        "(queue tables) go through %I (or %n$I), which quotes them; values go through USING, "
        "which never turns data into SQL text. `||` concatenation, %s and %L are how SQL "
        "injection and quoting bugs get in, and a constant template is also what lets PGMQ006 "
        "check the relations that dynamic SQL touches. The one exception: %L is accepted in "
        "utility statements (DDL such as CREATE TRIGGER ... (%L) or COMMENT ... IS %L), which "
        "cannot take USING parameters."
    ),
    "PGMQ006": (
        "Every relation referenced by top-level statements, by static SQL in function bodies and "
        "by the format() templates of dynamic SQL is schema-qualified (pgmq.meta, "
        "pg_catalog.pg_class). With search_path pinned to pg_catalog, pg_temp, a bare name that "
        "is not a catalog relation resolves to pg_temp, where any user can create it, and at top "
        "level a bare name depends on the installing session's search_path."
    ),
    "PGMQ007": (
        "The install script never uses CREATE OR REPLACE or CREATE ... IF NOT EXISTS at top "
        "level. Both silently accept an object that already exists, which lets a user who "
        "created it first (for example in a schema they control) have it adopted by the "
        "extension and run as its owner (CVE-2022-2625; pgspot PS002, PS010 to PS014). Dynamic "
        "SQL inside function bodies, which creates per-queue tables at run time, is exempt."
    ),
    "PGMQ008": (
        "Tables listed in manifest.config_tables hold user configuration, so the extension "
        "script must call pg_catalog.pg_extension_config_dump('<schema>.<table>', ...) after "
        "creating each of them, or pg_dump will lose their rows. The standalone script is not "
        "run by CREATE EXTENSION and must not call it. No script or function body may ALTER "
        "EXTENSION ... ADD an object: per-queue tables are user data, not extension members, "
        "and members cannot be dumped or dropped normally."
    ),
    "PGMQ009": (
        "No transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT) at top level or in bodies: "
        "CREATE EXTENSION runs the script inside one transaction it owns, the standalone script "
        "is applied with `psql -1`, and a COMMIT inside a function breaks callers that expect "
        "atomic calls; only a procedure the manifest marks `commits` may commit (CALL runs it "
        "outside a transaction block). The script is ASCII only so that its meaning does not depend on "
        "client_encoding and the control file needs no `encoding`."
    ),
    "PGMQ010": (
        "Every function declares its volatility (IMMUTABLE, STABLE or VOLATILE) explicitly. The "
        "default, VOLATILE, is right for most queue functions but should be a decision, not an "
        "accident: STABLE and IMMUTABLE let the planner cache and inline calls, and a wrong "
        "IMMUTABLE gives stale results. Procedures have no volatility and are exempt."
    ),
    "PGMQ011": (
        "The body of every upstream function (one of upstream's contract, "
        "manifest.UPSTREAM_CONTRACT, or a routine whose policy says upstream_path: the internal "
        "routine doing an upstream function's work) raises only errors, warnings and notices "
        "declared in pgmq_build/errors.py, each with the condition declared for it: "
        "upstream's own texts with P0001 (a plain RAISE EXCEPTION, as upstream), PostgreSQL's "
        "errors we raise ahead of the statement that would, P0001 stand-ins where upstream fails "
        "inside pg_partman, and our deliberate refusals with their specific SQLSTATEs. Clients "
        "of upstream PGMQ catch P0001 (psycopg's RaiseException) and match upstream's texts, "
        "so an improvised RAISE in one of these functions would break them; templates render "
        "the declared statements with raise_error(key, args...)."
    ),
    "PGMQ012": (
        "A routine with the identity (name and argument types) of one of upstream PGMQ 1.13's "
        "routines keeps upstream's whole signature: argument names, defaults, result columns and "
        "kind, exactly as PostgreSQL prints them, and an install script creates every one of "
        "them. Upstream's clients call with named arguments (queue_name => ...) and read result "
        "columns by name, so a renamed argument or a dropped default breaks them. The contract "
        "is upstream's own list (pgmq_build/upstream-pgmq-1.13.txt, derived from upstream's SQL), "
        "not a restatement of ours."
    ),
}
