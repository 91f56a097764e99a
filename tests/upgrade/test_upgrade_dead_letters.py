"""Upgrading from 2.8.0, where dead letters carried their source only in a header and a queue's
owner could write its settings row directly (issue 29, vectors 5 and 6): the origin of an
existing dead letter is recorded only where a redrive into that source writes nothing a role
able to send to the dead-letter queue could not have sent there itself, and a dead-letter queue
an owner wrote around set_retry_policy's check gets nothing (docs/concepts/security-model.md)."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import column, scalar
from tests.upgrade.scenario import connected

pytestmark = pytest.mark.slow

FROM = "2.8.0"


def test_upgrade_records_only_plausible_origins_and_checks_forged_settings(dbs, make_role):
    alice, bob, victim = make_role("alice", login=True), make_role("bob", login=True), make_role("victim", login=True)
    db = dbs.create("dead_letters")
    with connected(db) as su:
        su.execute(f"CREATE EXTENSION pgmq VERSION '{FROM}'")
        with psycopg.connect(db + f" user={victim}", autocommit=True) as v:
            v.execute("SELECT pgmq.create('vq')")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            for q in ("aq", "adlq", "sq", "sdlq", "fq"):
                a.execute("SELECT pgmq.create(%s)", (q,))
            a.execute("SELECT pgmq.set_retry_policy('aq', 0, dead_letter_queue => 'adlq')")
            a.execute("SELECT pgmq.set_retry_policy('sq', 0, dead_letter_queue => 'sdlq')")
            a.execute(f"CALL pgmq.grant_queue_access('sdlq', '{bob}')")  # bob may not send to sq
            for q in ("aq", "sq"):
                (msg_id,) = column(a, "SELECT pgmq.send(%s, '{\"real\": 1}')", (q,))
                a.execute("SELECT * FROM pgmq.read(%s, 30, 1)", (q,))
                a.execute("SELECT pgmq.nack(%s, %s)", (q, msg_id))
            a.execute("SELECT pgmq.send('adlq', '{\"forged\": 1}', "
                      "'{\"x-pgmq-dead-letter\": {\"source_queue\": \"vq\"}}'::jsonb)")
            # 2.8.0's row security let her write this; set_retry_policy refused it
            a.execute("SELECT pgmq.send('fq', '{}')")
            a.execute("INSERT INTO pgmq.queue_settings (queue_name, retry_policy, max_retries, "
                      "dead_letter_queue, message_ttl) VALUES ('fq', true, 0, 'vq', 1)")

        su.execute("ALTER EXTENSION pgmq UPDATE")

        assert column(su, "SELECT queue_name || ':' || source_queue FROM pgmq.dead_letter_origins "
                          "ORDER BY 1") == ["adlq:aq"]
        assert dict(su.execute("SELECT queue_name, dead_letter_set_by::text FROM pgmq.queue_settings "
                               "WHERE dead_letter_queue IS NOT NULL").fetchall()) == \
            {"aq": alice, "sq": alice, "fq": alice}
        su.execute("SELECT pg_sleep(1.1)")
        warnings: list[str] = []
        su.add_notice_handler(lambda d: warnings.append(d.severity_nonlocalized))
        su.execute("SELECT pgmq.expire_messages()")  # cron: fq's message is past its TTL
        assert scalar(su, "SELECT count(*) FROM pgmq.q_vq") == 0
        assert scalar(su, "SELECT count(*) FROM pgmq.a_fq") == 1 and warnings == ["WARNING"]
        assert scalar(su, "SELECT pgmq.redrive('adlq')") == 1  # the real one, to aq
        assert column(su, "SELECT message->>'real' FROM pgmq.q_aq") == ["1"]
        assert column(su, "SELECT message->>'forged' FROM pgmq.q_adlq") == ["1"]
        assert scalar(su, "SELECT pgmq.redrive('sdlq')") == 0  # bob could have forged it
        assert scalar(su, "SELECT count(*) FROM pgmq.q_vq") == 0
        assert scalar(su, "SELECT pgmq.redrive('sdlq', 'sq')") == 1  # an admin's explicit choice


def test_upgrade_vouches_only_for_retry_queues_their_subscriber_owns(dbs, make_role):
    """2.8.0's subscribe set a retry queue of the subscriber's own; any reader of the stream
    could write another one into the row. After the upgrade stream_nack copies only into a
    queue the subscription's role may send to; the other is refused until subscribe sets it
    again."""
    alice, victim = make_role("alice", login=True), make_role("victim", login=True)
    db = dbs.create("retry_queues")
    with connected(db) as su:
        su.execute(f"CREATE EXTENSION pgmq VERSION '{FROM}'")
        with psycopg.connect(db + f" user={victim}", autocommit=True) as v:
            v.execute("SELECT pgmq.create('vq')")
        with psycopg.connect(db + f" user={alice}", autocommit=True) as a:
            a.execute("SELECT pgmq.create_stream('s')")
            a.execute("SELECT pgmq.subscribe('s', 'good', retry_queue => 'aretry')")
            a.execute("SELECT pgmq.subscribe('s', 'bad')")
            a.execute("UPDATE pgmq.stream_subscriptions SET retry_queue = 'vq' WHERE subscription_name = 'bad'")
            a.execute("SELECT pgmq.stream_send('s', '{}')")

        su.execute("ALTER EXTENSION pgmq UPDATE")

        for sub, refused in (("good", False), ("bad", True)):
            su.execute("BEGIN")
            rows = su.execute("SELECT batch_id, ev_id FROM pgmq.stream_read('s', %s)", (sub,)).fetchall()
            try:
                su.execute("SELECT pgmq.stream_nack('s', %s, %s, %s)", (sub, rows[0][0], [rows[0][1]]))
                su.execute("COMMIT")
                assert not refused
            except psycopg.errors.InsufficientPrivilege:
                su.execute("ROLLBACK")
                assert refused
        assert scalar(su, "SELECT count(*) FROM pgmq.q_aretry") == 1
        assert scalar(su, "SELECT count(*) FROM pgmq.q_vq") == 0
