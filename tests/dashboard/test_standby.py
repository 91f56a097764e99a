"""The dashboard on a hot standby (issue 33: read offload): every page works from the standby,
each says it is read-only, no action is offered even with --allow-actions, and an action posted
anyway is refused with 409 and the reason. The same dashboard on the primary offers them."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build.replication import ReplicaPair

SETUP = """
CALL pgmq.create_queue('dead');
CALL pgmq.create_queue('orders', 'N', 'dead', 1, 0);
SELECT pgmq.send_batch('orders', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT pgmq.send('dead', '{"n": 0}');
"""
BANNER = "Read-only: this server is a standby"


@pytest.fixture(scope="module")
def pair(standby_pair: ReplicaPair) -> ReplicaPair:
    return standby_pair.seeded(SETUP)


def test_every_page_works_read_only_on_the_standby(pair, dashboard):
    d = dashboard(pair.standby.dsn(), allow_actions=True)
    for path, shown in (("/", "orders"), ("/queues/orders", '&#34;n&#34;: 2'),
                        ("/queues/orders?archived=1", "No archived messages"),
                        ("/dead-letters", "dead")):
        reply = d.get(path)
        assert reply.status == 200, (path, reply.body[:500])
        assert shown in reply.body, path
        assert BANNER in reply.body and "read-only: standby" in reply.body, path
        # no action's form (the queue list's filter is a GET form, allowed)
        assert 'method="post"' not in reply.body.lower() and "actions enabled" not in reply.body, path


def test_an_action_posted_to_the_standby_is_refused_with_the_reason(pair, dashboard):
    primary_side = dashboard(pair.primary.dsn(), allow_actions=True)
    page = primary_side.get("/queues/orders")
    assert page.status == 200 and BANNER not in page.body and 'method="post"' in page.body.lower()
    d = dashboard(pair.standby.dsn(), allow_actions=True)
    token = d.app.csrf_token  # as a form of a dashboard with actions would carry it
    reply = d.post("/queues/orders/pause", {"csrf": token})
    assert reply.status == 409, reply.body[:500]
    assert "read-only: this server is a standby (in recovery): actions need the primary." \
        in reply.body
    assert "cannot execute INSERT in a read-only transaction" in reply.body
    reply = d.post("/queues/orders/purge", {"csrf": token, "confirm": "yes"})
    assert reply.status == 409 and "this server is a standby" in reply.body
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as primary:
        assert primary.execute("SELECT count(*) FROM pgmq.q_orders").fetchone()[0] == 2
        assert not primary.execute("SELECT paused FROM pgmq.queue_metrics('orders')"
                                   ).fetchone()[0]
