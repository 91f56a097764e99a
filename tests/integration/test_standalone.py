"""The standalone script: pgmq for databases that cannot install extension files."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build import install
from pgmq_build.manifest import MANIFEST
from tests.helpers import column, scalar


@pytest.fixture
def plain_db(conn, dsn):
    conn.execute("CREATE DATABASE standalone_db")
    target = dsn.replace(f"dbname={conn.info.dbname}", "dbname=standalone_db")
    yield target
    conn.execute("DROP DATABASE standalone_db WITH (FORCE)")


def test_standalone_install_and_core_api(plain_db):
    result = install.apply_standalone(plain_db)
    assert result == ("installed", MANIFEST.version, None, (f"pgmq-standalone--{MANIFEST.version}.sql",))
    assert str(result).startswith(f"installed pgmq {MANIFEST.version} with the standalone script")
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert scalar(c, "SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'") == 0
        assert scalar(c, "SELECT obj_description('pgmq'::regnamespace)") == f"pgmq {MANIFEST.version} (standalone)"
        c.execute("SELECT pgmq.create('jobs')")
        c.execute("SELECT pgmq.send('jobs', '{}')")
        assert column(c, "SELECT msg_id FROM pgmq.read('jobs', 10, 1)") == [1]


def test_standalone_a_second_install_changes_nothing(plain_db):
    install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("SELECT pgmq.create('keep')")
    result = install.apply_standalone(plain_db)
    assert result.action == "current" and "nothing was changed" in str(result)
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert column(c, "SELECT queue_name FROM pgmq.meta") == ["keep"]


def test_standalone_refuses_a_schema_it_did_not_make(plain_db):
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("CREATE SCHEMA pgmq")
    with pytest.raises(install.InstallError, match="was not made by the standalone script"):
        install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("COMMENT ON SCHEMA pgmq IS 'pgmq 9.0.0 (standalone)'")
    with pytest.raises(install.InstallError, match="9.0.0, which is newer than this pgmq-build"):
        install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("COMMENT ON SCHEMA pgmq IS 'pgmq 1.9.9 (standalone)'")
    with pytest.raises(install.InstallError, match="1.9.9, which is not a released version"):
        install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert scalar(c, "SELECT obj_description('pgmq'::regnamespace)") == "pgmq 1.9.9 (standalone)"
        assert scalar(c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmq'::regnamespace") == 0


def test_standalone_refuses_an_extension_install(conn, dsn):
    with pytest.raises(install.InstallError, match="installed as an extension"):
        install.apply_standalone(dsn)


def test_standalone_is_atomic_when_it_fails(plain_db):
    # The schema, types and tables get created, then the first PL/pgSQL function fails.
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("CREATE ROLE weak LOGIN")
        c.execute("GRANT CREATE ON DATABASE standalone_db TO weak")
        c.execute("REVOKE USAGE ON LANGUAGE plpgsql FROM PUBLIC")
    weak = plain_db.replace("user=postgres", "user=weak")
    with pytest.raises(install.InstallError, match="rolled back.*plpgsql"):
        install.apply_standalone(weak)
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert scalar(c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmq'") == 0
        assert scalar(c, "SELECT count(*) FROM pg_type WHERE typname = 'message_record'") == 0
