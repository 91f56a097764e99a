"""What the escalation tests plant as a hostile role: code that, when run, logs who ran it and
tries to make its author a superuser (which succeeds only if a superuser runs it)."""

from __future__ import annotations

import psycopg


def evil_body(author: str, schema: str, value: str) -> str:
    """A PL/pgSQL body returning `value`: logs current_user into <schema>.log, tries
    `ALTER ROLE <author> SUPERUSER`."""
    return f"""
BEGIN
    INSERT INTO {schema}.log (who) VALUES (current_user);
    BEGIN
        EXECUTE 'ALTER ROLE {author} SUPERUSER';
    EXCEPTION WHEN insufficient_privilege THEN NULL;
    END;
    RETURN {value};
END"""


def make_log(conn: psycopg.Connection, schema: str) -> None:
    """<schema>.log, writable and readable by every role (whoever runs the planted code)."""
    conn.execute(f"CREATE TABLE {schema}.log (id bigserial PRIMARY KEY, who text)")
    conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC")
    conn.execute(f"GRANT INSERT, SELECT ON {schema}.log TO PUBLIC")
    conn.execute(f"GRANT USAGE ON SEQUENCE {schema}.log_id_seq TO PUBLIC")
