"""Access control with real roles: the queue's owner (a plain role that created it), a role
granted access, an ungranted role and the superuser. Message routines run with the caller's
rights, so an ungranted role is stopped by PostgreSQL's own privilege checks; the queue's
tables belong to the extension's owner (tests/integration/test_escalation.py says why)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

from tests.helpers import column, raises_sql, scalar


@dataclass
class Roles:
    owner: psycopg.Connection
    granted: psycopg.Connection
    ungranted: psycopg.Connection
    su: psycopg.Connection
    names: dict[str, str]


@pytest.fixture
def roles(conn, connect, make_role) -> Roles:
    names = {k: make_role(k, login=True) for k in ("owner", "granted", "ungranted")}
    r = Roles(owner=connect(user=names["owner"]), granted=connect(user=names["granted"]),
              ungranted=connect(user=names["ungranted"]), su=conn, names=names)
    r.owner.execute("SELECT pgmq.create('orders')")
    r.owner.execute("SELECT pgmq.send('orders', '{\"secret\": 42}')")
    r.owner.execute("CALL pgmq.grant_queue_access('orders', %s)", (names["granted"],))
    return r


# Every path that touches messages; each must fail with 42501 for a role without access.
MESSAGE_PATHS = [
    "SELECT pgmq.send('orders', '{}')",
    "SELECT pgmq.send('orders', '{}', '{\"x-pgmq-dedup-id\": \"d\"}'::jsonb)",
    "SELECT pgmq.send_batch('orders', ARRAY['{}'::jsonb])",
    "SELECT * FROM pgmq.read('orders', 30, 1)",
    "SELECT * FROM pgmq.read_with_poll('orders', 30, 1, 0)",
    "SELECT * FROM pgmq.pop('orders')",
    "SELECT pgmq.delete('orders', 1)",
    "SELECT pgmq.delete('orders', ARRAY[1::bigint])",
    "SELECT pgmq.archive('orders', 1)",
    "SELECT * FROM pgmq.set_vt('orders', 1, 10)",
    "SELECT pgmq.metrics('orders')",
    "SELECT pgmq.purge_queue('orders')",
    "SELECT pgmq.nack('orders', 1)",
    "SELECT pgmq.checkpoint('orders', 1, '{}', 10)",
    "SELECT pgmq.send_reserved('orders', '{}', 30)",
    "SELECT * FROM pgmq.read_grouped('orders', 30, 1)",
    "SELECT pgmq.read_message('orders')",
    "SELECT pgmq.read_message_by_id('orders', 1)",
    "SELECT * FROM pgmq.read_message_any('orders')",
    "CALL pgmq.insert_message('orders', '{}')",
    "SELECT pgmq.get_queue_table('orders')::regclass",
]


@pytest.mark.parametrize("sql", MESSAGE_PATHS)
def test_ungranted_role_is_denied_on_every_message_path(roles, sql):
    if "get_queue_table" in sql:  # an oid is not a message: any role may learn where a queue lives
        assert scalar(roles.ungranted, sql) is not None
        return
    with pytest.raises(psycopg.Error) as info:
        roles.ungranted.execute(sql)
    assert info.value.sqlstate == "42501", info.value
    assert "42" not in str(info.value.diag.message_primary)  # nothing about the message leaks
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.q_orders") == 1
    assert scalar(roles.su, "SELECT message FROM pgmq.q_orders") == {"secret": 42}


def test_granted_role_sends_and_reads_on_every_path(roles):
    g = roles.granted
    mid = scalar(g, "SELECT pgmq.send('orders', '{\"n\": 1}')")
    scalar(g, "SELECT pgmq.send('orders', '{\"n\": 2}', '{\"x-pgmq-dedup-id\": \"k\"}'::jsonb)")
    scalar(g, "SELECT pgmq.send('orders', '{\"n\": 2}', '{\"x-pgmq-dedup-id\": \"k\"}'::jsonb)")  # duplicate
    scalar(g, "SELECT pgmq.send('orders', '{\"n\": 3}', '{\"x-pgmq-ttl\": 3600}'::jsonb)")  # flags the queue
    g.execute("CALL pgmq.insert_message('orders', '{\"n\": 4}', 9)")
    assert scalar(g, "SELECT queue_length FROM pgmq.metrics('orders')") == 5
    assert len(g.execute("SELECT * FROM pgmq.read('orders', 30, 10)").fetchall()) == 5
    assert scalar(g, "SELECT pgmq.archive('orders', %s)", (mid,)) is True
    g.execute("SELECT * FROM pgmq.set_vt('orders', ARRAY(SELECT msg_id FROM pgmq.q_orders), 0)")
    assert scalar(g, "SELECT pgmq.read_message('orders')") == {"secret": 42}
    assert len(g.execute("SELECT * FROM pgmq.pop('orders', 10)").fetchall()) == 3
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.q_orders") == 0
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.a_orders") == 1


def test_grant_revoke_by_name_and_oid_and_reset(roles):
    su, n = roles.su, roles.names
    roles.owner.execute("CALL pgmq.revoke_queue_access('orders', %s)", (n["granted"],))
    with raises_sql("42501"):
        roles.granted.execute("SELECT * FROM pgmq.read('orders', 30, 1)")
    oid = scalar(su, "SELECT oid FROM pg_roles WHERE rolname = %s", (n["ungranted"],))
    roles.owner.execute("CALL pgmq.grant_queue_access('orders', %s::oid)", (oid,))
    assert scalar(roles.ungranted, "SELECT count(*) FROM pgmq.read('orders', 0, 1)") == 1
    roles.owner.execute("CALL pgmq.revoke_queue_access('orders', %s::oid)", (oid,))
    with raises_sql("42501"):
        roles.ungranted.execute("SELECT pgmq.send('orders', '{}')")

    roles.owner.execute("CALL pgmq.grant_queue_access('orders', %s)", (n["granted"],))
    roles.owner.execute("CALL pgmq.grant_queue_access('orders', 'public')")
    assert scalar(roles.ungranted, "SELECT count(*) FROM pgmq.read('orders', 0, 1)") == 1
    roles.owner.execute("CALL pgmq.reset_queue_access('orders')")
    for c in (roles.granted, roles.ungranted):
        with raises_sql("42501"):
            c.execute("SELECT pgmq.send('orders', '{}')")
    assert scalar(roles.owner, "SELECT count(*) FROM pgmq.read('orders', 0, 1)") == 1
    acl = column(su, "SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a "
                     "WHERE c.relname IN ('q_orders', 'a_orders')")
    # the tables' owner (the extension's), the queue's owner, and read-only monitoring
    assert set(acl) == {"postgres", n["owner"], "pg_monitor"}
    with raises_sql("0LP01"):  # the queue's owner keeps its access
        roles.owner.execute("CALL pgmq.revoke_queue_access('orders', %s)", (n["owner"],))


def test_access_procedures_refuse_bad_input_and_non_owners(roles):
    n = roles.names
    with raises_sql("42P01"):
        roles.owner.execute("CALL pgmq.grant_queue_access('nope', %s)", (n["granted"],))
    with raises_sql("42704", 'role "no_such_role" does not exist'):
        roles.owner.execute("CALL pgmq.grant_queue_access('orders', 'no_such_role')")
    with raises_sql("42704"):
        roles.owner.execute("CALL pgmq.grant_queue_access('orders', 4000000000::oid)")
    for c in (roles.granted, roles.ungranted):  # only the owner hands out access
        with raises_sql("42501", 'must be owner of queue "orders"'):
            c.execute("CALL pgmq.grant_queue_access('orders', %s)", (n["ungranted"],))
        with raises_sql("42501"):
            c.execute("CALL pgmq.reset_queue_access('orders')")
    with raises_sql("42501"):
        roles.ungranted.execute("SELECT * FROM pgmq.read('orders', 30, 1)")


def test_only_the_owner_administers_the_queue(roles):
    for c in (roles.granted, roles.ungranted):
        with raises_sql("42501"):
            c.execute("SELECT pgmq.set_retry_policy('orders', 3)")
        with raises_sql("42501"):
            c.execute("SELECT pgmq.drop_queue('orders')")
        with raises_sql("42501"):
            c.execute("SELECT pgmq.enable_notify_insert('orders')")
    roles.ungranted.execute("SELECT pgmq.create('mine')")  # any role creates (and owns) queues
    with raises_sql("42501"):
        roles.granted.execute("SELECT pgmq.send('mine', '{}')")
    with raises_sql("42501", "this routine acts only for callers of pgmq's API"):
        roles.ungranted.execute("SELECT pgmq._create_queue_for('theirs', false)")
    with raises_sql("42501"):  # but only for itself: nobody can prove to be another role
        roles.ungranted.execute("INSERT INTO pgmq.admin_requests VALUES (pg_current_xact_id(), %s)",
                                (roles.names["owner"],))
    roles.owner.execute("SELECT pgmq.set_retry_policy('orders', 3)")
    roles.owner.execute("SELECT pgmq.enable_notify_insert('orders')")
    roles.granted.execute("SELECT pgmq.send('orders', '{}')")  # the notify trigger runs for senders
    assert scalar(roles.su, "SELECT max_retries FROM pgmq.queue_settings WHERE queue_name = 'orders'") == 3
    assert scalar(roles.owner, "SELECT pgmq.drop_queue('orders')") is True


def test_queue_creation_with_and_without_create_on_the_schema(roles, connect):
    su, n = roles.su, roles.names
    owner_of = "SELECT c.relowner::regrole::text FROM pg_class c WHERE c.relname = %s"
    queue_owner = "SELECT owner::text FROM pgmq.queue_owners WHERE queue_name = %s"
    # The tables belong to the extension's owner; the role that asked owns the queue.
    assert {scalar(su, owner_of, (t,)) for t in ("q_orders", "a_orders", "q_orders_msg_id_seq")} == {"postgres"}
    assert scalar(su, queue_owner, ("orders",)) == n["owner"]
    privileges = "SELECT has_table_privilege(%s, 'pgmq.q_orders', %s)"
    for privilege, held in [("SELECT", True), ("INSERT", True), ("UPDATE", True), ("DELETE", True),
                            ("TRUNCATE", True), ("TRIGGER", False), ("REFERENCES", False)]:
        assert scalar(su, privileges, (n["owner"], privilege)) is held, privilege
    assert scalar(su, "SELECT has_schema_privilege(%s, 'pgmq', 'CREATE')", (n["owner"],)) is False
    roles.owner.execute("CALL pgmq.create_queue('pq')")  # pgpro_queue's form, with its retry policy
    assert scalar(su, owner_of, ("q_pq",)) == "postgres"
    assert scalar(su, queue_owner, ("pq",)) == n["owner"]
    assert scalar(su, "SELECT max_retries FROM pgmq.queue_settings WHERE queue_name = 'pq'") == 10
    su.execute(f"GRANT CREATE ON SCHEMA pgmq TO {n['granted']}")  # a trusted role now
    roles.granted.execute("SELECT pgmq.create_unlogged('direct_path')")
    assert scalar(su, owner_of, ("q_direct_path",)) == "postgres"
    assert scalar(su, queue_owner, ("direct_path",)) == n["granted"]
    warned = []
    roles.ungranted.add_notice_handler(lambda d: warned.append(d.message_primary))
    roles.ungranted.execute("SELECT pgmq.create('orders')")  # someone else's: a warning, no change
    assert warned == [f'queue "orders" already exists and belongs to role "{n["owner"]}"']
    assert scalar(su, queue_owner, ("orders",)) == n["owner"]
    roles.owner.execute("CALL pgmq.drop_queue('pq'::name)")
    assert scalar(su, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'pq'") == 0
    assert scalar(su, "SELECT count(*) FROM pgmq.queue_owners WHERE queue_name = 'pq'") == 0


def test_superuser_can_do_everything(roles):
    su = roles.su
    assert scalar(su, "SELECT message FROM pgmq.pop('orders')") == {"secret": 42}
    su.execute("CALL pgmq.grant_queue_access('orders', %s)", (roles.names["ungranted"],))
    roles.ungranted.execute("SELECT pgmq.send('orders', '{}')")
    su.execute("CALL pgmq.reset_queue_access('orders')")
    assert scalar(su, "SELECT pgmq.drop_queue('orders')") is True


# ----------------------------------------------------------------------------- exchanges

def test_publish_access(roles):
    o, g, u, n = roles.owner, roles.granted, roles.ungranted, roles.names
    o.execute("SELECT pgmq.create_exchange('ex', 'direct')")
    o.execute("SELECT pgmq.bind_queue('orders', 'ex', 'k')")
    assert len(g.execute("SELECT * FROM pgmq.publish('ex', 'k', '{}')").fetchall()) == 1
    with raises_sql("42501"):  # the exchange is open, but the queue it routes to is not
        u.execute("SELECT * FROM pgmq.publish('ex', 'k', '{}')")
    o.execute("CALL pgmq.revoke_publish_access('ex', 'public')")
    for c in (g, u):
        with raises_sql("42501", 'permission denied for exchange "ex"'):
            c.execute("SELECT * FROM pgmq.publish('ex', 'k', '{}')")
        with raises_sql("42501"):
            c.execute("CALL pgmq.publish_message('ex', 'k', '{}')")
    o.execute("CALL pgmq.grant_publish_access('ex', %s)", (n["granted"],))
    g.execute("CALL pgmq.publish_message('ex', 'k', '{}')")
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.q_orders") == 3
    for c in (g, u):  # only the exchange owner (or a superuser) opens or closes it
        with raises_sql("42501", 'must be owner of exchange "ex"'):
            c.execute("CALL pgmq.grant_publish_access('ex', %s)", (n["ungranted"],))
        with raises_sql("42501"):
            c.execute("SELECT pgmq.drop_exchange('ex', true)")
        with raises_sql("42501"):
            c.execute("SELECT pgmq.set_unroutable('ex', 'error')")
    with raises_sql("42704"):
        o.execute("CALL pgmq.grant_publish_access('ex', 'no_such_role')")
    with raises_sql("42704"):
        o.execute("CALL pgmq.grant_publish_access('nope', 'public')")
    roles.su.execute("CALL pgmq.revoke_publish_access('ex', %s)", (n["granted"],))
    with raises_sql("42501"):
        g.execute("SELECT * FROM pgmq.publish('ex', 'k', '{}')")


def test_binding_needs_queue_access_and_publish_access(roles):
    o, g, u = roles.owner, roles.granted, roles.ungranted
    o.execute("SELECT pgmq.create_exchange('open_ex')")
    g.execute("SELECT pgmq.bind_queue('orders', 'open_ex', NULL)")  # queue access + open exchange
    with raises_sql("42501"):
        u.execute("SELECT pgmq.bind_queue('orders', 'open_ex', NULL)")
    with raises_sql("42501"):
        u.execute("SELECT pgmq.unbind_queue('orders', 'open_ex', NULL)")
    u.execute("DELETE FROM pgmq.exchange_bindings")  # row security: no row is u's to delete
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.exchange_bindings") == 1
    u.execute("SELECT pgmq.create_exchange('u_ex')")  # anyone may create (and own) an exchange
    u.execute("CALL pgmq.revoke_publish_access('u_ex', 'public')")
    with raises_sql("42501"):  # u owns the exchange, but cannot bind a queue it has no access to
        u.execute("SELECT pgmq.bind_queue('orders', 'u_ex', NULL)")
    with raises_sql("42501"):  # g has the queue, not the closed exchange
        g.execute("SELECT pgmq.bind_queue('orders', 'u_ex', NULL)")
    assert column(roles.su, "SELECT exchange_name FROM pgmq.exchange_bindings") == ["open_ex"]


def test_catalog_rows_cannot_be_forged(roles):
    u = roles.ungranted
    with raises_sql("42501"):
        u.execute("INSERT INTO pgmq.queue_settings (queue_name, max_retries) VALUES ('orders', 0)")
    u.execute("UPDATE pgmq.queue_settings SET max_retries = 0")  # row security: sees nothing to change
    u.execute("DELETE FROM pgmq.meta")
    with raises_sql("42501"):
        u.execute("INSERT INTO pgmq.dedup_keys VALUES ('orders', 'x', 1, now() + interval '1 day')")
    u.execute("UPDATE pgmq.exchanges SET owner = current_user")
    assert scalar(roles.su, "SELECT owner FROM pgmq.exchanges WHERE exchange_name = 'pgmq.topic'") == "postgres"
    assert column(roles.su, "SELECT queue_name FROM pgmq.meta") == ["orders"]
    assert scalar(roles.su, "SELECT count(*) FROM pgmq.queue_settings WHERE max_retries = 0") == 0


def test_metrics_all_lists_only_the_queues_a_role_may_read(roles):
    roles.su.execute("SELECT pgmq.create('secret')")
    assert [r[0] for r in roles.granted.execute("SELECT queue_name FROM pgmq.metrics_all()")] == ["orders"]
    assert roles.ungranted.execute("SELECT queue_name FROM pgmq.metrics_all()").fetchall() == []
    assert column(roles.su, "SELECT queue_name FROM pgmq.metrics_all()") == ["orders", "secret"]
