"""SQL functions that accept bad input silently (found by the input survey of issue
"Reliability", item 3). These tests FAIL until the SQL is fixed: the proposed fixes are in
their docstrings. (Python callers are protected already: the client refuses these headers,
pgmq_build/validate.py.)"""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import raises_sql, scalar

SEND = "SELECT pgmq.send('jobs', '{\"n\": 1}'::jsonb, %s::jsonb)"


@pytest.mark.parametrize("header,value", [("x-pgmq-ttl", "soon"), ("x-pgmq-ttl", 1.5),
                                          ("x-pgmq-max-retries", "many"),
                                          ("x-pgmq-retry-delay", {"s": 1})])
def test_a_limit_header_that_is_not_an_integer_is_refused_at_send(conn, queue, header, value):
    """Today pgmq.send accepts {"x-pgmq-ttl": "soon"} (or 1.5, or any non-integer limit header)
    and then EVERY pgmq.read / pgmq.pop of the queue fails with 22P02 (invalid input syntax for
    type integer) while that message is there: one bad producer stops all consumers.
    Proposed fix: where send/send_batch already look at headers.INSERT_RULES (the limit marks),
    refuse a limit header whose jsonb_typeof is not 'number' or whose value is not an integer in
    int4 range: RAISE ... 'header % must be an integer number, got %' USING ERRCODE = '22023'
    (invalid_parameter_value), as our other refusals."""
    conn.execute(SEND, (Jsonb({}),))
    with raises_sql("22023"):
        conn.execute(SEND, (Jsonb({header: value}),))
    # whatever send did, the queue must stay readable
    assert scalar(conn, "SELECT count(*) FROM pgmq.read('jobs', 0, 10)") >= 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.pop('jobs', 10)") >= 1


def test_a_priority_header_that_is_not_an_integer_names_the_header(conn, queue):
    """Today: 22P02 'invalid input syntax for type integer: "high"' (which argument? which
    header?). Proposed fix: send/send_batch check x-pgmq-priority like the limit headers above
    (22023, 'header x-pgmq-priority must be an integer number, got "high"')."""
    with raises_sql("22023"):
        conn.execute(SEND, (Jsonb({"x-pgmq-priority": "high"}),))
