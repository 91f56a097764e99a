"""Nothing privileged work trusts can be forged (issue 29, vectors 5, 6 and 8; docs/concepts/security-model.md).

A hostile queue owner, `mallory`, writes catalog rows directly (row security lets it change the
rows of its own queues and exchanges) and forges dead-letter headers, while a superuser (an
admin, cron's expire_messages, the CLI, the dashboard) does its ordinary work. Nothing may reach
`victimq`, a queue of another role that mallory may not send to. Also here: the headers kinds
upstream accepts round-trip through dead letters and redrive (issue 30, item 4), the exporter's
Host rule and _note_message_limits' callers."""

from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, notices, raises_sql, run_cli, scalar

FORGED = '{"x-pgmq-dead-letter": {"source_queue": "victimq", "reason": "nack", "attempts": 1}}'


@dataclass
class Tenants:
    su: psycopg.Connection
    mallory: psycopg.Connection
    mallory_name: str
    victim: psycopg.Connection
    victim_name: str
    dsn: str

    def victimq(self) -> int:
        return int(scalar(self.su, "SELECT count(*) FROM pgmq.q_victimq"))


@pytest.fixture
def tenants(conn, connect, make_role, dsn) -> Tenants:
    """mallory owns mq and its dead-letter queue mdlq; victim owns victimq, where mallory may
    not send."""
    m_name, v_name = make_role("mallory", login=True), make_role("victim", login=True)
    m, v = connect(user=m_name), connect(user=v_name)
    v.execute("SELECT pgmq.create('victimq')")
    m.execute("SELECT pgmq.create('mq')")
    m.execute("SELECT pgmq.create('mdlq')")
    m.execute("SELECT pgmq.set_retry_policy('mq', 0, dead_letter_queue => 'mdlq')")
    return Tenants(conn, m, m_name, v, v_name, dsn)


def _forge_settings_around_the_checks(su: psycopg.Connection, sql: str, params: object = None) -> None:
    """A catalog row as an owner could write it before 2.9.0: triggers off (superuser only)."""
    with su.transaction():
        su.execute("SET LOCAL session_replication_role = replica")
        su.execute(sql, params)


# -- vector 5: settings rows that steer dead letters -------------------------------------------

def test_owner_cannot_point_its_dead_letters_at_another_queue_by_writing_the_row(tenants):
    t = tenants
    with raises_sql("42501"):
        t.mallory.execute("SELECT pgmq.set_retry_policy('mq', 0, dead_letter_queue => 'victimq')")
    with raises_sql("42501"):
        t.mallory.execute("UPDATE pgmq.queue_settings SET dead_letter_queue = 'victimq', message_ttl = 1 "
                          "WHERE queue_name = 'mq'")
    with raises_sql("42501"):
        t.mallory.execute("DELETE FROM pgmq.queue_settings WHERE queue_name = 'mq'; "
                          "INSERT INTO pgmq.queue_settings (queue_name, retry_policy, max_retries, "
                          "dead_letter_queue, message_ttl) VALUES ('mq', true, 0, 'victimq', 1)")
    # her own settings stay hers to change directly; who set the dead-letter queue is not
    t.mallory.execute("UPDATE pgmq.queue_settings SET message_ttl = 1, dead_letter_set_by = 'postgres' "
                      "WHERE queue_name = 'mq'")
    assert scalar(t.su, "SELECT dead_letter_set_by FROM pgmq.queue_settings WHERE queue_name = 'mq'") == t.mallory_name
    t.mallory.execute("SELECT pgmq.send('mq', '{\"n\": 1}')")
    t.mallory.execute("SELECT pgmq.send('mq', '{\"n\": 2}')")
    t.su.execute("SELECT pg_sleep(1.1)")
    assert scalar(t.su, "SELECT pgmq.expire_messages()") == 2  # cron, as a superuser
    assert t.victimq() == 0
    assert scalar(t.su, "SELECT count(*) FROM pgmq.q_mdlq") == 2
    assert [r[0] for r in t.mallory.execute("SELECT queue_name FROM pgmq.queue_metrics('mq')")] == ["mq"]


def test_a_row_written_around_the_checks_is_checked_again_when_used(tenants):
    """A forged row (from before 2.9.0, or any way around the trigger): a superuser's read and
    cron's expire_messages move nothing into a queue the owner may not send to; the messages go
    to the source's archive with a WARNING, and queue_metrics keeps working for the owner."""
    t = tenants
    _forge_settings_around_the_checks(
        t.su, "UPDATE pgmq.queue_settings SET dead_letter_queue = 'victimq', message_ttl = 1 "
              "WHERE queue_name = 'mq'")
    for n in range(3):
        t.mallory.execute("SELECT pgmq.send('mq', %s)", (Jsonb({"n": n}),))
    t.su.execute("SELECT pg_sleep(1.1)")
    seen = notices(t.su)
    assert column(t.su, "SELECT msg_id FROM pgmq.read('mq', 30, 1)") == []  # dead-letters (ttl)
    t.su.execute("SELECT pgmq.expire_messages()")
    assert t.victimq() == 0
    assert scalar(t.su, "SELECT count(*) FROM pgmq.a_mq") == 3
    assert seen and {s for s, _ in seen} == {"WARNING"}
    assert 'dead-letter queue "victimq" of queue "mq", may not send to it' in seen[0][1]
    row = t.mallory.execute("SELECT dead_letter_queue, dead_letter_depth FROM pgmq.queue_metrics('mq')").fetchone()
    assert row == ("victimq", None)  # she may not read victimq: no depth, and no error


def test_an_owner_who_lost_access_to_the_dead_letter_queue(tenants):
    """Set while allowed, then revoked: dead letters go to the archive, metrics still answer."""
    t = tenants
    t.victim.execute(f"CALL pgmq.grant_queue_access('victimq', '{t.mallory_name}')")
    t.mallory.execute("SELECT pgmq.set_retry_policy('mq', 0, dead_letter_queue => 'victimq')")
    t.victim.execute(f"CALL pgmq.revoke_queue_access('victimq', '{t.mallory_name}')")
    (msg_id,) = column(t.mallory, "SELECT pgmq.send('mq', '{}')")
    t.su.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
    seen = notices(t.su)
    assert scalar(t.su, "SELECT pgmq.nack('mq', %s, 'boom')", (msg_id,)) is True
    assert t.victimq() == 0 and [s for s, _ in seen] == ["WARNING"]
    assert column(t.su, "SELECT headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_mq") == ["nack"]
    assert t.mallory.execute("SELECT dead_letter_depth FROM pgmq.queue_metrics('mq')").fetchone() == (None,)
    # set again by a role that may send there (an admin): dead letters go there again
    t.su.execute("SELECT pgmq.set_retry_policy('mq', 0, dead_letter_queue => 'victimq')")
    (msg_id,) = column(t.mallory, "SELECT pgmq.send('mq', '{}')")
    t.su.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
    t.su.execute("SELECT pgmq.nack('mq', %s)", (msg_id,))
    assert t.victimq() == 1


def test_payload_type_is_written_only_by_set_payload_type(tenants):
    t = tenants
    t.su.execute(f"CREATE SCHEMA mallory_types AUTHORIZATION {t.mallory_name}")
    t.mallory.execute("CREATE DOMAIN mallory_types.mood AS text CHECK (VALUE <> 'x')")
    for sql in ("UPDATE pgmq.queue_settings SET payload_type = 'mallory_types.mood' WHERE queue_name = 'mq'",
                "INSERT INTO pgmq.queue_settings (queue_name, payload_type) VALUES ('mdlq', 'mallory_types.mood')"):
        with raises_sql("42501"):
            t.mallory.execute(sql)
    t.mallory.execute("SELECT pgmq.create('mt')")
    t.mallory.execute("SELECT pgmq.set_payload_type('mt', 'text')")  # the routine still may
    assert scalar(t.su, "SELECT pgmq.payload_type('mt')::text") == "text"


def _stream_nack_as_superuser(t: Tenants) -> None:
    """mallory's stream 'ms', one event read by an admin (or a worker) that then nacks it."""
    t.mallory.execute("SELECT pgmq.stream_send('ms', '{\"evil\": 1}')")
    with t.su.transaction():
        batch, ev_id = t.su.execute("SELECT batch_id, ev_id FROM pgmq.stream_read('ms', 'sub')").fetchone()
        t.su.execute("SELECT pgmq.stream_nack('ms', 'sub', %s, ARRAY[%s]::bigint[])", (batch, ev_id))


def test_a_subscriptions_retry_queue_is_checked_when_written_and_when_used(tenants):
    t = tenants
    t.mallory.execute("SELECT pgmq.create_stream('ms')")
    t.mallory.execute("SELECT pgmq.subscribe('ms', 'sub', retry_queue => 'mq')")
    with raises_sql("42501"):
        t.mallory.execute("UPDATE pgmq.stream_subscriptions SET retry_queue = 'victimq' WHERE stream_name = 'ms'")
    with raises_sql("42501"):
        t.mallory.execute("INSERT INTO pgmq.stream_subscriptions (stream_name, subscription_name, position, handed, "
                          "retry_queue) SELECT 'ms', 'sub2', position, handed, 'victimq' "
                          "FROM pgmq.stream_subscriptions WHERE stream_name = 'ms'")
    with raises_sql("42501"):  # the subscription stays the role's that made it
        t.mallory.execute("UPDATE pgmq.stream_subscriptions SET created_by = 'postgres' WHERE stream_name = 'ms'")
    assert scalar(t.su, "SELECT created_by::text FROM pgmq.stream_subscriptions") == t.mallory_name
    _forge_settings_around_the_checks(
        t.su, "UPDATE pgmq.stream_subscriptions SET retry_queue = 'victimq' WHERE stream_name = 'ms'")
    with raises_sql("42501"):
        _stream_nack_as_superuser(t)
    assert t.victimq() == 0


def test_a_retry_queue_whose_setter_lost_access_takes_nothing(tenants):
    t = tenants
    t.victim.execute(f"CALL pgmq.grant_queue_access('victimq', '{t.mallory_name}')")
    t.mallory.execute("SELECT pgmq.create_stream('ms')")
    t.mallory.execute("SELECT pgmq.subscribe('ms', 'sub')")
    t.mallory.execute("UPDATE pgmq.stream_subscriptions SET retry_queue = 'victimq' WHERE stream_name = 'ms'")
    t.victim.execute(f"CALL pgmq.revoke_queue_access('victimq', '{t.mallory_name}')")
    with raises_sql("42501"):
        _stream_nack_as_superuser(t)
    assert t.victimq() == 0


# -- vector 6: redrive trusts only what our code recorded ---------------------------------------

def _forged_dead_letter(t: Tenants) -> int:
    return int(scalar(t.mallory, "SELECT pgmq.send('mdlq', '{\"evil\": 1}', %s::jsonb)", (FORGED,)))


def test_redrive_ignores_a_source_queue_written_in_the_headers(tenants):
    t = tenants
    forged = _forged_dead_letter(t)
    seen = notices(t.su)
    assert scalar(t.su, "SELECT pgmq.redrive('mdlq')") == 0
    assert t.victimq() == 0
    assert column(t.su, "SELECT msg_id FROM pgmq.q_mdlq") == [forged]  # left in place, reported
    assert seen and seen[-1][0] == "NOTICE" and "no recorded source queue" in seen[-1][1]
    # nor can she record the origin herself: only a role that may send to the source can
    with raises_sql("42501"):
        t.mallory.execute("INSERT INTO pgmq.dead_letter_origins VALUES ('mdlq', %s, 'victimq')", (forged,))
    # a real dead letter still goes back to where it came from; the forged one stays
    (real,) = column(t.mallory, "SELECT pgmq.send('mq', '{\"real\": 1}')")
    t.su.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
    t.su.execute("SELECT pgmq.nack('mq', %s)", (real,))
    assert scalar(t.su, "SELECT pgmq.redrive('mdlq')") == 1
    assert column(t.su, "SELECT message->>'real' FROM pgmq.q_mq") == ["1"]
    assert t.victimq() == 0 and column(t.su, "SELECT msg_id FROM pgmq.q_mdlq") == [forged]
    # an explicit target is the caller's own decision
    assert scalar(t.su, "SELECT pgmq.redrive('mdlq', 'mq')") == 1
    assert t.victimq() == 0


def test_redrive_from_the_cli_ignores_forged_headers(tenants):
    t = tenants
    _forged_dead_letter(t)
    result = run_cli("dlq", "redrive", "mdlq", "--yes", "--dsn", t.dsn)
    assert result.exit_code == 0, result.output
    assert t.victimq() == 0
    assert scalar(t.su, "SELECT count(*) FROM pgmq.q_mdlq") == 1


def test_redrive_from_the_dashboard_ignores_forged_headers(tenants):
    from pgmq_build.dashboard import Dashboard

    t = tenants
    _forged_dead_letter(t)
    app = Dashboard(t.dsn, allow_actions=True, sample_interval=0.2, refresh=0, pool_timeout=2.0)
    server, url = app.serve_in_thread()
    try:
        host = url.split("//", 1)[1]
        client = http.client.HTTPConnection(host, timeout=20)
        client.request("POST", "/dead-letters/mdlq/redrive", body=urlencode({"csrf": app.csrf_token}),
                       headers={"Origin": url, "Content-Type": "application/x-www-form-urlencoded"})
        reply = client.getresponse()
        reply.read()
        client.close()
    finally:
        server.shutdown()
        app.close()
    assert reply.status == 303, reply.status
    assert t.victimq() == 0
    assert scalar(t.su, "SELECT count(*) FROM pgmq.q_mdlq") == 1


def test_origins_go_with_their_queues(tenants):
    t = tenants
    for n in range(2):
        (msg_id,) = column(t.mallory, "SELECT pgmq.send('mq', %s)", (Jsonb({"n": n}),))
        t.mallory.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
        t.mallory.execute("SELECT pgmq.nack('mq', %s)", (msg_id,))
    assert scalar(t.su, "SELECT count(*) FROM pgmq.dead_letter_origins WHERE source_queue = 'mq'") == 2
    assert scalar(t.mallory, "SELECT pgmq.redrive('mdlq', max_messages => 1)") == 1  # its record goes
    assert scalar(t.su, "SELECT count(*) FROM pgmq.dead_letter_origins") == 1
    t.mallory.execute("SELECT pgmq.purge_queue('mdlq')")
    t.su.execute("SELECT pgmq.expire_messages()")  # records of dead letters consumed since go
    assert scalar(t.su, "SELECT count(*) FROM pgmq.dead_letter_origins") == 0
    (msg_id,) = column(t.mallory, "SELECT pgmq.send('mq', '{}')")
    t.mallory.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
    t.mallory.execute("SELECT pgmq.nack('mq', %s)", (msg_id,))
    t.mallory.execute("SELECT pgmq.drop_queue('mq')")
    assert scalar(t.su, "SELECT count(*) FROM pgmq.dead_letter_origins") == 0


def test_a_consumer_that_may_not_send_to_the_source_records_no_origin(tenants, make_role, connect):
    """Dead-lettering never fails for want of the right to record: the origin stays unknown."""
    t = tenants
    reader = make_role("reader", login=True)
    t.su.execute(f"GRANT SELECT, UPDATE, DELETE ON pgmq.q_mq TO {reader}")
    t.su.execute(f"GRANT SELECT, INSERT ON pgmq.q_mdlq TO {reader}")
    t.su.execute(f"GRANT USAGE ON SEQUENCE pgmq.q_mdlq_msg_id_seq TO {reader}")
    r = connect(user=reader)
    (msg_id,) = column(t.mallory, "SELECT pgmq.send('mq', '{}')")
    r.execute("SELECT * FROM pgmq.read('mq', 30, 1)")
    assert scalar(r, "SELECT pgmq.nack('mq', %s)", (msg_id,)) is True
    assert column(t.su, "SELECT source_queue FROM pgmq.dead_letter_origins") == [None]
    assert scalar(t.su, "SELECT pgmq.redrive('mdlq')") == 0


def test_a_sender_to_a_dead_letter_queue_cannot_redirect_others_dead_letters(tenants):
    """mallory may only send to victim's dead-letter queue (as a consumer of a source that
    dead-letters there would): she can neither rewrite where victim's dead letters came from
    nor record an origin for a message she did not move there, so victim's redrive never
    sends them into a queue she reads."""
    t = tenants
    t.victim.execute("SELECT pgmq.create('vsrc')")
    t.victim.execute("SELECT pgmq.create('vdlq')")
    t.victim.execute("SELECT pgmq.set_retry_policy('vsrc', 0, dead_letter_queue => 'vdlq')")
    t.su.execute(f"GRANT INSERT, SELECT (msg_id) ON pgmq.q_vdlq TO {t.mallory_name}")  # send, not read
    t.su.execute(f"GRANT USAGE ON SEQUENCE pgmq.q_vdlq_msg_id_seq TO {t.mallory_name}")
    (msg_id,) = column(t.victim, "SELECT pgmq.send('vsrc', '{\"secret\": 1}')")
    t.victim.execute("SELECT * FROM pgmq.read('vsrc', 30, 1)")
    t.victim.execute("SELECT pgmq.nack('vsrc', %s)", (msg_id,))
    (direct,) = column(t.victim, "SELECT pgmq.send('vdlq', '{\"secret\": 2}')")
    with raises_sql("42501"):
        t.mallory.execute("UPDATE pgmq.dead_letter_origins SET source_queue = 'mq' WHERE queue_name = 'vdlq'")
    with raises_sql("42501"):
        t.mallory.execute("INSERT INTO pgmq.dead_letter_origins VALUES ('vdlq', %s, 'mq')", (direct,))
    with raises_sql("42501"):  # nor ahead of a message to come
        t.mallory.execute("INSERT INTO pgmq.dead_letter_origins VALUES ('vdlq', %s, 'mq')", (direct + 1,))
    # what she sends herself she may record (a redrive writes only what she could have sent)
    with t.mallory.transaction():
        (own,) = column(t.mallory, "SELECT pgmq.send('vdlq', '{\"own\": 1}')")
        t.mallory.execute("INSERT INTO pgmq.dead_letter_origins VALUES ('vdlq', %s, 'mq')", (own,))
    seen = notices(t.victim)
    assert scalar(t.victim, "SELECT pgmq.redrive('vdlq')") == 1  # hers; not into mq, where she may not send
    assert column(t.victim, "SELECT message->>'secret' FROM pgmq.q_vsrc") == ["1"]
    assert seen and "2 message(s)" in seen[-1][1]
    assert scalar(t.su, "SELECT pgmq.redrive('vdlq')") == 1  # an admin's redrive: mallory's own message
    assert column(t.su, "SELECT message::text FROM pgmq.q_mq") == ['{"own": 1}']
    assert column(t.su, "SELECT message->>'secret' FROM pgmq.q_vdlq") == ["2"]


# -- issue 30 item 4: every headers value upstream accepts survives dead letters ----------------

HEADERS_KINDS = [None, "null", "[1, {\"a\": 2}]", "\"text\"", "42", "{}", "{\"a\": 1, \"x-pgmq-priority\": 3}"]


@pytest.mark.parametrize("headers", HEADERS_KINDS, ids=["sql-null", "json-null", "array", "string",
                                                        "number", "empty-object", "object"])
def test_headers_round_trip_through_nack_dead_letter_and_redrive(conn, headers):
    conn.execute("SELECT pgmq.create('src')")
    conn.execute("SELECT pgmq.create('src_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('src', 1, dead_letter_queue => 'src_dlq')")
    (msg_id,) = column(conn, "SELECT pgmq.send('src', '{\"n\": 1}', %s::jsonb)", (headers,))
    for _ in range(2):  # a failure that is retried, then the last one
        assert column(conn, "SELECT msg_id FROM pgmq.read('src', 30, 1)") == [msg_id]
        conn.execute("SELECT pgmq.nack('src', %s, 'boom')", (msg_id,))
    record = scalar(conn, "SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_src_dlq")
    assert record["source_queue"] == "src" and record["last_error"] == "boom" and record["attempts"] == 2
    assert scalar(conn, "SELECT pgmq.redrive('src_dlq')") == 1
    back = conn.execute("SELECT headers::text, headers IS NULL, read_ct FROM pgmq.q_src").fetchone()
    expected = conn.execute("SELECT %s::jsonb::text, %s::jsonb IS NULL", (headers, headers)).fetchone()
    assert back[:2] == expected and back[2] == 0


# -- vector 8: the alternate exchange needs publish rights on it -------------------------------

@pytest.fixture
def exchanges(tenants) -> Tenants:
    """victim's exchange appx routes to appq, which mallory may send to; only victim may
    publish to appx. mallory owns lowx, bound to nothing."""
    t = tenants
    t.victim.execute("SELECT pgmq.create('appq')")
    t.victim.execute(f"CALL pgmq.grant_queue_access('appq', '{t.mallory_name}')")
    t.victim.execute("SELECT pgmq.create_exchange('appx', 'fanout')")
    t.victim.execute("SELECT pgmq.bind_queue('appq', 'appx', NULL)")
    t.victim.execute("CALL pgmq.revoke_publish_access('appx', 'public')")
    t.mallory.execute("SELECT pgmq.create_exchange('lowx', 'fanout')")
    with raises_sql("42501"):
        t.mallory.execute("SELECT * FROM pgmq.publish('appx', NULL, '{}')")
    return t


def test_alternate_exchange_needs_publish_rights_when_set(exchanges):
    t = exchanges
    with raises_sql("42501"):
        t.mallory.execute("SELECT pgmq.set_unroutable('lowx', 'notice', 'appx')")
    with raises_sql("42501"):
        t.mallory.execute("UPDATE pgmq.exchanges SET alternate_exchange = 'appx' WHERE exchange_name = 'lowx'")
    with raises_sql("42501"):
        t.mallory.execute("INSERT INTO pgmq.exchanges (exchange_name, alternate_exchange) VALUES ('lowx2', 'appx')")
    t.mallory.execute("SELECT * FROM pgmq.publish('lowx', NULL, '{}')")
    assert scalar(t.su, "SELECT count(*) FROM pgmq.q_appq") == 0


def test_alternate_exchange_needs_publish_rights_when_used(exchanges):
    t = exchanges
    _forge_settings_around_the_checks(
        t.su, "UPDATE pgmq.exchanges SET alternate_exchange = 'appx' WHERE exchange_name = 'lowx'")
    assert t.mallory.execute("SELECT * FROM pgmq.publish('lowx', NULL, '{}')").fetchall() == []
    assert t.mallory.execute("SELECT * FROM pgmq.test_exchange_routing('lowx', NULL)").fetchall() == []
    t.mallory.execute("CALL pgmq.publish_message('lowx', NULL, '{}')")
    assert scalar(t.su, "SELECT count(*) FROM pgmq.q_appq") == 0
    # a publisher allowed on appx is routed there
    t.victim.execute(f"CALL pgmq.grant_publish_access('appx', '{t.mallory_name}')")
    assert column(t.mallory, "SELECT queue_name FROM pgmq.publish('lowx', NULL, '{}')") == ["appq"]
    t.mallory.execute("SELECT pgmq.set_unroutable('lowx', 'error', 'appx')")  # and may set it


# -- also seen: the exporter's Host header, _note_message_limits' callers ----------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_exporter_refuses_a_foreign_host_header(conn, dsn):
    from pgmq_build.ops.metrics import QueueCollector, QueueMetricsSource, registry_for, serve

    conn.execute("SELECT pgmq.create('secret_queue')")
    port = _free_port()
    source = QueueMetricsSource(dsn)
    server = serve(registry_for(QueueCollector(source.read)), f"127.0.0.1:{port}")
    try:
        def get(host: str) -> tuple[int, str]:
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            client.request("GET", "/metrics", headers={"Host": host})
            reply = client.getresponse()
            body = reply.read().decode()
            client.close()
            return reply.status, body

        status, body = get("evil.example:80")  # a DNS-rebinding page's own name
        assert status == 400 and "secret_queue" not in body
        status, body = get(f"127.0.0.1:{port}")
        assert status == 200 and "secret_queue" in body
        assert get(f"localhost:{port}")[0] == 200
    finally:
        server.shutdown()
        source.close()


def test_note_message_limits_is_for_senders_only(tenants, make_role, connect):
    t = tenants
    stranger = connect(user=make_role("stranger", login=True))
    with raises_sql("42501"):
        stranger.execute("SELECT pgmq._note_message_limits('victimq')")
    with raises_sql("42501"):
        stranger.execute("SELECT pgmq._flag_message_limits('victimq')")
    assert scalar(t.su, "SELECT count(*) FROM pgmq.queue_settings WHERE queue_name = 'victimq' "
                        "AND message_limits") == 0
    # a sender's message with its own limits still flags its queue
    t.victim.execute("SELECT pgmq.send('victimq', '{}', '{\"x-pgmq-ttl\": 60}'::jsonb)")
    assert scalar(t.su, "SELECT message_limits FROM pgmq.queue_settings WHERE queue_name = 'victimq'") is True
