"""The standalone script: pgmq for databases that cannot install extension files."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build import install
from tests.helpers import column, scalar


@pytest.fixture
def plain_db(conn, dsn):
    conn.execute("CREATE DATABASE standalone_db")
    target = dsn.replace(f"dbname={conn.info.dbname}", "dbname=standalone_db")
    yield target
    conn.execute("DROP DATABASE standalone_db WITH (FORCE)")


def test_standalone_install_and_core_api(plain_db):
    assert install.apply_standalone(plain_db) == "2.0.0"
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert scalar(c, "SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'") == 0
        assert scalar(c, "SELECT obj_description('pgmq'::regnamespace)") == "pgmq 2.0.0 (standalone)"
        c.execute("SELECT pgmq.create('jobs')")
        c.execute("SELECT pgmq.send('jobs', '{}')")
        assert column(c, "SELECT msg_id FROM pgmq.read('jobs', 10, 1)") == [1]


def test_standalone_refuses_a_second_install_and_changes_nothing(plain_db):
    install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        c.execute("SELECT pgmq.create('keep')")
    with pytest.raises(install.InstallError, match="already exists"):
        install.apply_standalone(plain_db)
    with psycopg.connect(plain_db, autocommit=True) as c:
        assert column(c, "SELECT queue_name FROM pgmq.meta") == ["keep"]


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
