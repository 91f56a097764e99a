from pgmq_build.manifest import MANIFEST


def test_extension_is_installed(conn):
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
    assert row == (MANIFEST.version,)


def test_each_test_gets_a_fresh_database(conn):
    conn.execute("SELECT pgmq.create('only_here')")
    assert conn.execute("SELECT count(*) FROM pgmq.meta").fetchone()[0] == 1
