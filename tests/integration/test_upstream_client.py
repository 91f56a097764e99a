"""Upstream's own Python client (PyPI `pgmq`) works unchanged against our extension."""

from __future__ import annotations

import datetime as dt

import pgmq as pgmq_client  # PyPI `pgmq`, upstream's client: a [test] dependency
import pytest


@pytest.fixture
def client(db):
    info = db.info
    c = pgmq_client.PGMQueue(host=info.host, port=str(info.port), database=info.dbname,
                             username=info.user, password="unused", init_extension=False, pool_size=2)
    yield c
    c.close()


def test_queue_lifecycle_and_messages(client):
    client.create_queue("orders")
    client.create_queue("fast", unlogged=True)
    assert sorted(q.queue_name for q in client.list_queues()) == ["fast", "orders"]
    one = client.send("orders", {"n": 1})
    two = client.send("orders", {"n": 2}, headers={"h": 1})
    later = client.send("orders", {"n": 3}, delay=60)
    at = client.send("orders", {"n": 4}, delay=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    assert [one, two] == [1, 2] and later == 3 and at == 4
    batch = client.send_batch("orders", [{"n": 5}, {"n": 6}], headers=[{"a": 1}, {"a": 2}])
    assert batch == [5, 6]
    msg = client.read("orders", vt=30)
    assert msg.msg_id == 1 and msg.message == {"n": 1} and msg.read_ct == 1
    rest = client.read_batch("orders", vt=30, batch_size=10)
    assert [m.msg_id for m in rest] == [2, 5, 6]
    assert client.delete("orders", 1) is True
    assert client.archive("orders", 2) is True
    assert sorted(client.delete_batch("orders", [5, 99])) == [5]
    assert client.archive_batch("orders", [6]) == [6]
    client.set_vt("orders", 3, 0)
    popped = client.pop("orders")
    assert popped.msg_id == 3
    metrics = client.metrics("orders")
    assert metrics.queue_length == 1 and metrics.total_messages == 6
    assert len(client.metrics_all()) == 2
    assert client.purge("orders") == 1
    assert client.drop_queue("orders") is True


def test_read_with_poll_and_conditional(client):
    client.create_queue("jobs")
    client.send("jobs", {"kind": "a"})
    client.send("jobs", {"kind": "b"})
    got = client.read("jobs", vt=30, qty=5, conditional={"kind": "b"})
    assert [m.message for m in got] == [{"kind": "b"}]
    polled = client.read_with_poll("jobs", vt=30, qty=1, max_poll_seconds=1, poll_interval_ms=50)
    assert [m.message for m in polled] == [{"kind": "a"}]


def test_topics_and_notifications(client):
    client.create_queue("errors")
    client.create_queue("everything")
    client.bind_topic("logs.error", "errors")
    client.bind_topic("logs.#", "everything")
    assert client.send_topic("logs.error", {"m": 1}) == 2
    assert client.send_topic("logs.error", {"m": 2}, headers={"h": 1}) == 2
    assert client.validate_routing_key("a.b") is True
    assert {r.queue_name for r in client.test_routing("logs.error")} == {"errors", "everything"}
    client.enable_notify("errors", throttle_interval_ms=100)
    client.update_notify("errors", 10)
    assert [t.throttle_interval_ms for t in client.list_notify_throttles()] == [10]
    client.disable_notify("errors")


def test_fifo_reads(client):
    client.create_queue("fifo")
    client.create_fifo_index("fifo")
    for group, n in [("a", 1), ("b", 2), ("a", 3)]:
        client.send("fifo", {"n": n}, headers={"x-pgmq-group": group})
    got = client.read_grouped("fifo", vt=30, qty=10)
    assert [m.message["n"] for m in got] == [1, 3, 2]
