"""Headers the reads use as integers are checked when a message is sent (found by the input
survey of issue "Reliability", item 3: a non-integer x-pgmq-ttl used to make every later read of
the queue fail). The client refuses them too (pgmq_build/validate.py)."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import raises_sql, scalar

SEND = "SELECT pgmq.send('jobs', '{\"n\": 1}'::jsonb, %s::jsonb)"


@pytest.mark.parametrize("header,value", [("x-pgmq-ttl", "soon"), ("x-pgmq-ttl", 1.5),
                                          ("x-pgmq-max-retries", "many"),
                                          ("x-pgmq-retry-delay", {"s": 1})])
def test_a_limit_header_that_is_not_an_integer_is_refused_at_send(conn, queue, header, value):
    """A non-integer limit header is refused (22023), and the queue stays readable."""
    conn.execute(SEND, (Jsonb({}),))
    with raises_sql("22023"):
        conn.execute(SEND, (Jsonb({header: value}),))
    # whatever send did, the queue must stay readable
    assert scalar(conn, "SELECT count(*) FROM pgmq.read('jobs', 0, 10)") >= 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.pop('jobs', 10)") >= 1


def test_a_priority_header_that_is_not_an_integer_names_the_header(conn, queue):
    """The error names the header and the value."""
    with raises_sql("22023"):
        conn.execute(SEND, (Jsonb({"x-pgmq-priority": "high"}),))


def test_send_batch_and_send_reserved_check_every_message_s_headers(conn, queue):
    """One bad element refuses the whole batch; send_reserved checks as send does."""
    with raises_sql("22023", "header x-pgmq-max-retries must be an integer number, got 2.5"):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}', '{}']::jsonb[], "
                     "ARRAY['{\"x-pgmq-ttl\": 5}', '{\"x-pgmq-max-retries\": 2.5}']::jsonb[])")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.send_reserved('jobs', '{}', 60, '{\"x-pgmq-ttl\": 99999999999}')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    # a string of digits is an integer to the reads, as it always was
    conn.execute("SELECT pgmq.send('jobs', '{}', '{\"x-pgmq-priority\": \" 7\"}'::jsonb)")
    assert scalar(conn, "SELECT priority FROM pgmq.q_jobs") == 7
    conn.execute("SELECT pgmq.purge_queue('jobs')")
    # headers that are not an object are stored as upstream stores them
    conn.execute("SELECT pgmq.send('jobs', '{}', '[\"x-pgmq-ttl\"]'::jsonb)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.read('jobs', 0, 10)") == 1
