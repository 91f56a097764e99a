"""A queue's life: one queue per table name whatever the spelling (drop under any spelling removes
everything, creates in two spellings give 42P07), catalog rows left without tables (by 2.8.0's
drop) neither break the routines that loop over every queue nor block a new create, and creating
a queue another role holds warns naming that role, superusers included (docs/concepts/security-model.md)."""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.helpers import column, notices, raises_sql, run_threads, scalar, wait_for

# Catalog tables that hold a queue's rows (all reference pgmq.meta).
CATALOG = ("meta", "queue_owners", "queue_settings", "callbacks", "notify_insert_throttle",
           "exchange_bindings")


def catalog_rows(conn: psycopg.Connection) -> dict[str, int]:
    return {t: scalar(conn, f"SELECT count(*) FROM pgmq.{t} WHERE lower(queue_name) = 'jobs'") for t in CATALOG}


def configured(conn: psycopg.Connection, name: str) -> None:
    """A queue `name` with a message, settings, a callback, notifications and a binding."""
    conn.execute("CREATE PROCEDURE public.handle(m jsonb) LANGUAGE sql AS ''")
    conn.execute("SELECT pgmq.create(%s)", (name,))
    conn.execute("SELECT pgmq.send(%s, '{}')", (name,))
    conn.execute("SELECT pgmq.set_retry_policy(%s, 3)", (name,))
    conn.execute("CALL pgmq.register_callback(%s, 'public.handle(jsonb)')", (name,))
    conn.execute("SELECT pgmq.enable_notify_insert(%s, 0)", (name,))
    conn.execute("SELECT pgmq.bind_topic('jobs.*', %s)", (name,))


@pytest.mark.parametrize("drop", ["SELECT pgmq.drop_queue('jobs')", "SELECT pgmq.drop_queue('JOBS')",
                                  "CALL pgmq.drop_queue('jobs'::name)"])
def test_drop_under_another_spelling_removes_everything(conn, drop):
    configured(conn, "Jobs")
    assert all(catalog_rows(conn).values())
    conn.execute(drop)
    assert catalog_rows(conn) == dict.fromkeys(CATALOG, 0)
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == []
    assert scalar(conn, "SELECT to_regclass('pgmq.q_jobs')") is None
    assert scalar(conn, "SELECT pgmq.expire_messages()") == 0
    conn.execute("SELECT pgmq.create('Jobs')")  # made again, afresh
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_owners WHERE queue_name = 'Jobs'") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_settings WHERE queue_name = 'Jobs'") == 0


def test_drop_of_a_queue_without_its_table_removes_the_catalog_row_under_any_spelling(conn):
    conn.execute("SELECT pgmq.create('Jobs')")
    conn.execute("DROP TABLE pgmq.q_jobs, pgmq.a_jobs")  # dropped outside the API
    assert scalar(conn, "SELECT pgmq.drop_queue('JOBS')") is False  # upstream's answer for no table
    assert catalog_rows(conn) == dict.fromkeys(CATALOG, 0)


@pytest.fixture
def orphan(conn):
    """What 2.8.0's drop under another spelling left behind: catalog rows of queue 'Jobs' without
    tables (made here by dropping the tables directly), next to a healthy queue 'work' holding a
    message past its TTL."""
    configured(conn, "Jobs")
    conn.execute("DROP TABLE pgmq.q_jobs, pgmq.a_jobs")
    conn.execute("SELECT pgmq.create('work')")
    conn.execute("SELECT pgmq.send('work', '{}'::jsonb, '{\"x-pgmq-ttl\": 1}'::jsonb)")
    conn.execute("UPDATE pgmq.q_work SET enqueued_at = now() - interval '1 hour'")
    return conn


def test_routines_over_every_queue_skip_a_catalog_row_without_tables(orphan):
    conn = orphan
    assert scalar(conn, "SELECT pgmq.expire_messages()") == 1  # work's message, past its TTL
    assert column(conn, "SELECT queue_name FROM pgmq.metrics_all()") == ["work"]
    assert column(conn, "SELECT queue_name FROM pgmq.queue_metrics()") == ["work"]
    conn.execute("SELECT pgmq.create_fifo_indexes_all()")
    assert scalar(conn, "SELECT to_regclass('pgmq.q_work_fifo_idx')") is not None
    conn.execute("CALL pgmq.dispatch()")  # Jobs' callback: its queue has no table
    conn.execute("SELECT pgmq.run_partition_maintenance()")
    with raises_sql("42P01", 'queue "Jobs" does not exist'):
        conn.execute("SELECT pgmq.set_retry_policy('Jobs', 1)")


@pytest.mark.parametrize("create", ["SELECT pgmq.create('Jobs')", "SELECT pgmq.create('jobs')",
                                    "SELECT pgmq.create_unlogged('JOBS')", "CALL pgmq.create_queue('jobs')",
                                    "SELECT pgmq.create('jobs', 'jsonb'::regtype)"])
def test_create_over_a_catalog_row_without_tables_starts_afresh(orphan, create):
    conn = orphan
    conn.execute(create)
    name = scalar(conn, "SELECT queue_name FROM pgmq.meta WHERE lower(queue_name) = 'jobs'")
    assert name != "Jobs" or create.endswith("('Jobs')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.callbacks") == 0  # nothing of the old rows
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchange_bindings WHERE queue_name = 'Jobs'") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.notify_insert_throttle") == 0
    assert scalar(conn, "SELECT owner FROM pgmq.queue_owners WHERE queue_name = %s", (name,)) == conn.info.user
    assert column(conn, "SELECT * FROM pgmq.send(%s, '{}'::jsonb)", (name,)) == [1]


def test_a_create_waiting_for_a_create_in_another_spelling_gets_42P07(connect):
    """The advisory lock is the table name's: the second create waits for the first and then
    meets its row (2.8.0 locked the name as given: the second failed on pg_type, 23505)."""
    first, second, watch = connect(autocommit=False), connect(), connect()
    first.execute("SELECT pgmq.create('cj')")  # uncommitted: holds the queue's lock
    errors: list[psycopg.Error] = []

    def create() -> None:
        try:
            second.execute("SELECT pgmq.create('CJ')")
        except psycopg.Error as e:
            errors.append(e)

    t = threading.Thread(target=create)
    t.start()
    wait_for(lambda: scalar(watch, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                            (second.info.backend_pid,)) == "Lock", what="the second create to wait")
    first.commit()
    t.join()
    assert [e.sqlstate for e in errors] == ["42P07"], errors
    assert column(watch, "SELECT queue_name FROM pgmq.meta") == ["cj"]


SPELLINGS = ["cj", "CJ", "Cj", "cJ"]


def _create_at(barrier: threading.Barrier, outcomes: list[str | None], c: psycopg.Connection, name: str) -> None:
    barrier.wait()
    try:
        c.execute("SELECT pgmq.create(%s)", (name,))
        outcomes.append(None)
    except psycopg.Error as e:
        outcomes.append(e.sqlstate)


def test_creates_racing_in_several_spellings_make_one_queue(connect):
    conns = [connect() for _ in SPELLINGS]
    for _ in range(5):
        barrier = threading.Barrier(len(conns))
        outcomes: list[str | None] = []
        run_threads([threading.Thread(target=_create_at, args=(barrier, outcomes, c, n))
                     for c, n in zip(conns, SPELLINGS, strict=True)])
        assert sorted(outcomes, key=str) == ["42P07"] * 3 + [None]
        made = column(conns[0], "SELECT queue_name FROM pgmq.meta")
        assert len(made) == 1
        assert scalar(conns[0], "SELECT pgmq.drop_queue(%s)", (made[0].swapcase(),)) is True
        assert column(conns[0], "SELECT queue_name FROM pgmq.meta") == []


# ---- squatting: creating a queue another role holds (issue 29, vector 7)

CREATORS = ["SELECT pgmq.create('orders')", "SELECT pgmq.create_non_partitioned('orders')",
            "SELECT pgmq.create_unlogged('orders')", "SELECT pgmq.create('orders', 'jsonb'::regtype)"]


@pytest.fixture
def squatted(connect, make_role):
    """Queue 'orders' made first by an ordinary role (any role may create queues)."""
    tenant = make_role("tenant", login=True)
    connect(user=tenant).execute("SELECT pgmq.create('orders')")
    return tenant


def warning(seen: list[tuple[str, str]], owner: str) -> list[str]:
    return [m for s, m in seen if s == "WARNING" and m == f'queue "orders" already exists and belongs to role "{owner}"']


@pytest.mark.parametrize("create", CREATORS + ["CALL pgmq.create_queue('orders')"])
def test_a_superuser_creating_a_queue_another_role_holds_is_warned(conn, squatted, create):
    seen = notices(conn)
    conn.execute(create)
    assert warning(seen, squatted), seen
    # upstream's own notices for an existing queue are still printed as upstream prints them
    if "create_queue" not in create and "regtype" not in create:
        assert ("NOTICE", 'relation "q_orders" already exists, skipping') in seen
    assert scalar(conn, "SELECT owner FROM pgmq.queue_owners WHERE queue_name = 'orders'") == squatted


@pytest.mark.parametrize("create", CREATORS)
def test_an_ordinary_role_creating_a_queue_another_role_holds_is_warned(connect, make_role, squatted, create):
    app = connect(user=make_role("app", login=True))
    seen = notices(app)
    app.execute(create)
    assert warning(seen, squatted), seen
    assert scalar(app, "SELECT owner FROM pgmq.queue_owners WHERE queue_name = 'orders'") == squatted


def test_the_owner_creating_its_own_queue_again_is_not_warned(connect, squatted):
    tenant = connect(user=squatted)
    seen = notices(tenant)
    tenant.execute("SELECT pgmq.create('orders')")
    assert not [m for s, m in seen if s == "WARNING"]


def test_creating_a_partitioned_queue_another_role_holds_warns(conn, partman, make_role):
    """Partitioned queues have trusted creators only (here a role with CREATE on schema pgmq);
    the one made first by one is still said to be its, to a superuser creating it again."""
    maker = make_role("maker")
    for grant in (f"GRANT CREATE ON SCHEMA pgmq TO {maker}", f"GRANT ALL ON SCHEMA partman TO {maker}",
                  f"GRANT ALL ON ALL TABLES IN SCHEMA partman TO {maker}",
                  f"GRANT ALL ON ALL SEQUENCES IN SCHEMA partman TO {maker}",
                  f"GRANT EXECUTE ON ALL ROUTINES IN SCHEMA partman TO {maker}"):
        conn.execute(grant)
    conn.execute(f"SET ROLE {maker}")
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '100')")
    conn.execute("RESET ROLE")
    seen = notices(conn)
    conn.execute("SELECT pgmq.create_partitioned('orders', '10', '100')")
    assert warning(seen, maker), seen


def test_create_of_an_existing_queue_holds_no_lock_a_sender_waits_for(connect):
    """create(q) on an existing queue, then a setting, in one transaction, next to a transaction
    that changes that setting and then sends: both complete (2.8.0's create kept CREATE INDEX IF
    NOT EXISTS's SHARE lock on the table to the end: the sender waited for it while holding the
    settings row the create waited for, 40P01). Upstream's NOTICEs are still printed."""
    first, second, watch = connect(autocommit=False), connect(autocommit=False), connect()
    watch.execute("SELECT pgmq.create('jobs')")
    first.execute("SELECT pgmq.set_retry_policy('jobs', 3)")  # holds the settings row
    seen = notices(second)
    second.execute("SELECT pgmq.create('jobs')")
    assert ("NOTICE", 'relation "q_jobs_vt_idx" already exists, skipping') in seen
    errors: list[psycopg.Error] = []

    def setting() -> None:
        try:
            second.execute("SELECT pgmq.set_retry_policy('jobs', 5)")  # waits for first's row
            second.commit()
        except psycopg.Error as e:
            errors.append(e)

    t = threading.Thread(target=setting)
    t.start()
    wait_for(lambda: scalar(watch, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                            (second.info.backend_pid,)) == "Lock", what="the second setting to wait")
    try:
        first.execute("SELECT pgmq.send('jobs', '{}'::jsonb)")
        first.commit()
    except psycopg.Error as e:
        errors.append(e)
    t.join()
    assert not errors, [(e.sqlstate, str(e).splitlines()[0]) for e in errors]
    assert scalar(watch, "SELECT max_retries FROM pgmq.queue_settings WHERE queue_name = 'jobs'") == 5
