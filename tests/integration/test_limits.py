"""Limits (docs/concepts/delivery-guarantees.md; issue 30 items 1, 2, 3 and 7): no value a message, a header,
a row written around our functions or a setting may carry makes a later statement fail, and a
read hands out a message whose lease ran out in the same call when no retry delay applies.

Integer and float arithmetic on stored values saturates where it is used; the settings
routines refuse what they cannot store with 22023 and change nothing. The sweeps write each
extreme where a user can put it (a header of a row written around send, as upstream's send or a
direct INSERT does; a column of such a row; a setting) and then run every consuming and
housekeeping path over the queue (`exercise`)."""

from __future__ import annotations

import math

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, scalar

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
BIGINT_MAX = 2**63 - 1

# What each reader returns: (msg_id, read_ct); pop returns the read_ct the message had (upstream's).
READERS = {
    "read": "SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, %s)",
    "pop": "SELECT msg_id, read_ct FROM pgmq.pop('jobs', %s)",
    "read_grouped": "SELECT msg_id, read_ct FROM pgmq.read_grouped('jobs', 30, %s)",
    "read_grouped_rr": "SELECT msg_id, read_ct FROM pgmq.read_grouped_rr('jobs', 30, %s)",
    "read_grouped_head": "SELECT msg_id, read_ct FROM pgmq.read_grouped_head('jobs', 30, %s)",
}

# Queues with each kind of delivery rules (named for it): the plain statement, the judged ones
# (a retry policy, or messages with limits of their own), the TTL-only ones; priority order.
KINDS = {
    "plain": [],
    "policy": ["SELECT pgmq.set_retry_policy('policy', 3, 0, 2, 60, 'dlq')"],
    "limits": ["SELECT pgmq._note_message_limits('limits')"],  # what a limit header does at send
    "ttl": ["SELECT pgmq.set_message_ttl('ttl', 3600)"],
    "ranked": ["SELECT pgmq.enable_priorities('ranked')", "SELECT pgmq.set_message_ttl('ranked', 3600)",
               "SELECT pgmq.set_retry_policy('ranked', 3, 0, 2, 60)"],
}


def make_queue(conn, kind=None):
    """Queue 'jobs' (with the rules of `kind`) and 'dlq'."""
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('dlq')")
    for sql in KINDS[kind] if kind else []:
        conn.execute(sql.replace(f"'{kind}'", "'jobs'"))


def make_queues(conn):
    """A queue of each kind, and 'dlq'."""
    conn.execute("SELECT pgmq.create('dlq')")
    for kind, sqls in KINDS.items():
        conn.execute("SELECT pgmq.create(%s)", (kind,))
        for sql in sqls:
            conn.execute(sql)
    return list(KINDS)


def insert_around_send(conn, queue, headers=None, **columns):
    """A row written around send (upstream's send takes any headers; a role with INSERT may
    write any column): returns its msg_id."""
    cols = {"vt": "clock_timestamp()", "message": "'{}'::jsonb", "headers": "%(headers)s::jsonb"}
    cols.update({k: "%(" + k + ")s" for k in columns})
    overriding = " OVERRIDING SYSTEM VALUE" if "msg_id" in columns else ""
    return scalar(conn, f"INSERT INTO pgmq.q_{queue} ({', '.join(cols)}){overriding} VALUES ({', '.join(cols.values())}) "
                        "RETURNING msg_id", {"headers": headers, **columns})


def messages_everywhere(conn, q):
    return scalar(conn, f"SELECT (SELECT count(*) FROM pgmq.q_{q}) + (SELECT count(*) FROM pgmq.a_{q})"
                        " + (SELECT count(*) FROM pgmq.q_dlq) + (SELECT count(*) FROM pgmq.a_dlq)")


def exercise(conn, q="jobs"):
    """Every consuming and housekeeping path over queue `q` and its messages (up to 100) in each
    state the delivery rules judge (untouched, leased, a lease that ran out, a delivery lost to
    a rollback, nacked, reserved): none may fail, and no message is lost or doubled."""
    def call(sql, *args):
        conn.execute(sql.replace("{q}", q), args or None)

    def all_due():  # every lease runs out (reservations stay)
        call("SELECT count(*) FROM pgmq.set_vt('{q}', (SELECT array_agg(msg_id) FROM pgmq.q_{q} WHERE vt <> 'infinity'), 0)")

    before = messages_everywhere(conn, q)
    call("SELECT count(*) FROM pgmq.read('{q}', 0, 100)")
    call("SELECT count(*) FROM pgmq.read_with_poll('{q}', 0, 100, 0)")
    with conn.transaction(force_rollback=True):  # deliveries lost to a rollback
        call("SELECT count(*) FROM pgmq.pop('{q}', 100)")
    with conn.transaction(force_rollback=True):
        call("SELECT pgmq.read_message('{q}')")
    call("SELECT count(*) FROM pgmq.read('{q}', 30, 100)")  # settles them
    call("SELECT count(*) FROM pgmq.read('{q}', 30, 100)")
    for msg_id in column(conn, f"SELECT msg_id FROM pgmq.q_{q} WHERE vt <> 'infinity'"):
        call("SELECT pgmq.checkpoint('{q}', %s, '{}', 30, 1)", msg_id)
        call("SELECT count(*) FROM pgmq.set_vt('{q}', %s, %s)", msg_id, INT_MAX)
        call("SELECT count(*) FROM pgmq.set_vt('{q}', %s, 0)", msg_id)  # the lease runs out
        call("SELECT pgmq.nack('{q}', %s, 'failed')", msg_id)
    all_due()
    call("SELECT count(*) FROM pgmq.read('{q}', 30, 100)")
    all_due()
    for reader in ("read_grouped", "read_grouped_rr", "read_grouped_head"):
        call(f"SELECT count(*) FROM pgmq.{reader}('{{q}}', 30, 100)")
        all_due()
    call("SELECT pgmq.confirm('{q}', (SELECT array_agg(msg_id) FROM pgmq.q_{q}))")
    reservations = scalar(conn, f"SELECT count(*) FROM pgmq.q_{q} WHERE vt = 'infinity'")
    call("SELECT pgmq.expire_messages(), pgmq.expire_messages('{q}')")
    dropped = reservations - scalar(conn, f"SELECT count(*) FROM pgmq.q_{q} WHERE vt = 'infinity'")
    call("SELECT count(*) FROM pgmq.metrics('{q}')")
    call("SELECT count(*) FROM pgmq.metrics_all()")
    call("SELECT count(*) FROM pgmq.queue_metrics('{q}')")
    call("SELECT count(*) FROM pgmq.queue_metrics()")
    # out of deliveries: dead-lettered (their priority derived from their headers), redriven
    call("SELECT pgmq.set_retry_policy('{q}', 0, 0, 1, NULL, 'dlq')")
    call("SELECT count(*) FROM pgmq.read('{q}', 30, 100)")
    all_due()
    call("SELECT count(*) FROM pgmq.read('{q}', 30, 100)")
    call("SELECT pgmq.redrive('dlq', '{q}')")
    all_due()
    popped = scalar(conn, f"SELECT count(*) FROM pgmq.pop('{q}', 100)")
    call("SELECT count(*) FROM pgmq.read('dlq', 30, 100)")
    assert messages_everywhere(conn, q) + popped + dropped == before


# ----------------------------------------------------------------------------- item 1

@pytest.mark.parametrize("reader", ["read", "pop"])
def test_a_max_retries_header_at_the_integer_maximum_stops_no_consumer(conn, reader):
    make_queue(conn)
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}', %s)", (Jsonb({"x-pgmq-max-retries": INT_MAX}),))
    assert conn.execute(READERS[reader], (1,)).fetchall() == [(msg_id, 0 if reader == "pop" else 1)]


@pytest.mark.parametrize("reader", ["read", "pop", "read_grouped"])
def test_a_max_retries_setting_at_the_integer_maximum_stops_no_consumer(conn, reader):
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', %s)", (INT_MAX,))
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    assert conn.execute(READERS[reader], (1,)).fetchall() == [(msg_id, 0 if reader == "pop" else 1)]


# ----------------------------------------------------------------------------- item 2

def test_a_capped_backoff_keeps_nack_and_reads_working_past_1024_failures(conn):
    """2.8.0 computed power(2, 1024) before the cap: the 1025th failure failed, and from then on
    every read that met the message as a lease that ran out."""
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', NULL, 1, 2, 60)")
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    conn.execute("UPDATE pgmq.q_jobs SET read_ct = 1024")  # as after 1024 failed deliveries
    assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [1025]
    assert scalar(conn, "SELECT pgmq.nack('jobs', %s)", (msg_id,)) is True
    assert scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs") == 60
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))  # due again
    assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [1026]
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))  # the lease runs out: settled
    assert column(conn, "SELECT read_ct FROM pgmq.pop('jobs')") == []
    assert scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs") == 60


def test_a_huge_backoff_factor_is_capped_from_the_second_retry_on(conn):
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', NULL, 1, 1e200, 60)")
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    delays = []
    for n in range(1, 5):  # a delivery, failed
        assert column(conn, "SELECT read_ct FROM pgmq.read('jobs', 30, 1)") == [n]
        assert scalar(conn, "SELECT pgmq.nack('jobs', %s)", (msg_id,)) is True
        delays.append(scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs"))
        conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))  # due again
    assert delays == [1, 60, 60, 60]


@pytest.mark.parametrize("factor", ["NaN", "Infinity"])
def test_the_settings_table_refuses_a_backoff_factor_set_retry_policy_refuses(conn, factor):
    """2.8.0's CHECK (backoff_factor >= 1) admitted both (NaN sorts above every number)."""
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 3)")
    with raises_sql("22023", "backoff_factor must be a finite number >= 1"):
        conn.execute("SELECT pgmq.set_retry_policy('jobs', 3, 1, %s::float8)", (factor,))
    with raises_sql("23514"):
        conn.execute("UPDATE pgmq.queue_settings SET backoff_factor = %s::float8", (factor,))
    assert scalar(conn, "SELECT backoff_factor FROM pgmq.queue_settings") == 1


@pytest.mark.parametrize("attempts,delay,factor,cap,expected", [
    (1, 1, 2.0, None, 1), (2, 1, 2.0, None, 2), (31, 1, 2.0, None, 2**30), (32, 1, 2.0, None, INT_MAX),
    (1025, 1, 2.0, 60, 60), (3, 1, 1e200, 60, 60), (INT_MAX, INT_MAX, 1.7976931348623157e308, None, INT_MAX),
    (3, 0, 1e200, None, 0), (2, -5, 2.0, None, 0), (INT_MIN, 5, 2.0, None, 5), (3, 3, 1.5, None, 7),
    (2, 1, math.nan, 100, 100), (2, 1, math.inf, None, INT_MAX), (5, 7, None, -1, 0),
])
def test_the_retry_delay_saturates(conn, attempts, delay, factor, cap, expected):
    assert scalar(conn, "SELECT pgmq._retry_delay(%s, %s, %s, %s)", (attempts, delay, factor, cap)) == expected


def test_a_failing_callback_on_a_message_at_the_count_maximum_is_counted(conn):
    """dispatch counted a failed callback as read_ct + 1 (22003 at the integer maximum)."""
    conn.execute("CREATE PROCEDURE public.fails(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN RAISE 'no'; END $$")
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', NULL)")
    conn.execute("CALL pgmq.register_callback('jobs', 'public.fails(jsonb)')")
    insert_around_send(conn, "jobs", None, read_ct=INT_MAX)
    conn.execute("CALL pgmq.dispatch('jobs', 1)")
    assert column(conn, "SELECT read_ct FROM pgmq.q_jobs") == [INT_MAX]


# ----------------------------------------------------------------------------- item 3

@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_qty_at_the_integer_maximum(conn, kind, reader):
    """2.8.0: 22003 on a queue with a retry policy or limit headers (LIMIT 2 * qty + 32)."""
    make_queue(conn, kind)
    sent = column(conn, "SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}', '{}', '{}']::jsonb[], "
                        "ARRAY['{\"x-pgmq-group\": \"a\"}', '{\"x-pgmq-group\": \"b\"}', '{\"x-pgmq-group\": \"c\"}']::jsonb[])")
    assert sorted(column(conn, READERS[reader], (INT_MAX,))) == sent
    if reader != "pop":  # and pop, with the leases still running
        more = column(conn, "SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}', '{}']::jsonb[])")
        assert sorted(column(conn, "SELECT msg_id FROM pgmq.pop('jobs', %s)", (INT_MAX,))) == more


# ----------------------------------------------------------------------------- item 7

LAPSED_READERS = sorted(READERS)


@pytest.mark.parametrize("reader", LAPSED_READERS)
@pytest.mark.parametrize("rules", ["retry policy", "message limits"])
def test_a_lease_that_ran_out_is_handed_out_by_the_read_that_meets_it(conn, reader, rules):
    """With no retry delay the message is visible again as soon as its lease runs out: the read
    that meets it hands it out (2.8.0 settled it and returned nothing; the next read got it)."""
    make_queue(conn)
    if rules == "retry policy":
        conn.execute("SELECT pgmq.set_retry_policy('jobs', 5, 0)")
        headers = None
    else:
        headers = Jsonb({"x-pgmq-max-retries": 5})
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}', %s::jsonb)", (headers,))
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == [msg_id]
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))  # the lease runs out
    assert conn.execute(READERS[reader], (1,)).fetchall() == [(msg_id, 1 if reader == "pop" else 2)]


@pytest.mark.parametrize("vt", [0, 30])
def test_a_read_hands_out_a_message_whose_lease_ran_out_once(conn, vt):
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5, 0)")
    sent = column(conn, "SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}', '{}', '{}']::jsonb[])")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    conn.execute("SELECT pgmq.set_vt('jobs', %s::bigint[], 0)", (sent[:2],))
    got = column(conn, "SELECT msg_id FROM pgmq.read('jobs', %s, 10)", (vt,))
    assert sorted(got) == sent
    assert column(conn, "SELECT read_ct FROM pgmq.q_jobs ORDER BY msg_id") == [2, 2, 1]


def test_with_a_retry_delay_a_lease_that_ran_out_waits_for_it(conn):
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5, 60)")
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == []
    assert scalar(conn, "SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.q_jobs") == 60


def test_a_lease_that_ran_out_with_no_delivery_left_is_dead_lettered(conn):
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 1, 0, 1, NULL, 'dlq')")
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    for expected in ([(msg_id, 1)], [(msg_id, 2)], []):
        assert conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 1)").fetchall() == expected
        conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    record = scalar(conn, "SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_dlq")
    assert (record["reason"], record["attempts"]) == ("expired", 2)


def test_rolled_back_takes_of_a_lease_that_ran_out_are_counted(conn):
    """A take of a lease that ran out, handed out in the same call and then rolled back, leaves
    an aborted xmax on the lease: counted as a lost delivery, so a consumer whose transactions
    keep rolling back gets the message exactly 1 + max_retries times."""
    max_retries = 2
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', %s, 0, 1, NULL, 'dlq')", (max_retries,))
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', '{}')")
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)") == [msg_id]  # delivery 1
    conn.execute("SELECT pgmq.set_vt('jobs', %s, 0)", (msg_id,))
    delivered = 1
    for _ in range(20):
        with conn.transaction() as tx:
            got = column(conn, "SELECT msg_id FROM pgmq.pop('jobs')")
            if got:
                raise psycopg.Rollback(tx)
        delivered += bool(got)
        if scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0:
            break
    assert delivered == 1 + max_retries
    record = scalar(conn, "SELECT headers->'x-pgmq-dead-letter' FROM pgmq.q_dlq")
    assert (record["reason"], record["attempts"]) == ("rollback", 1 + max_retries)


# ----------------------------------------------------------------------------- sweeps

# JSON values a stored header may hold (1e400 is valid JSON: jsonb keeps it as a numeric).
HEADER_VALUES = ["0", "-1", str(INT_MAX), str(BIGINT_MAX), "1e400", "-1e400", "1.5", '"NaN"', '"Infinity"',
                 '"-Infinity"', '"99999999999999999999"', '"soon"', "null", "[1]"]
HEADERS = ["x-pgmq-priority", "x-pgmq-ttl", "x-pgmq-max-retries", "x-pgmq-retry-delay", "x-pgmq-group",
           "x-pgmq-confirm-by"]


@pytest.mark.parametrize("header", HEADERS)
def test_no_stored_header_value_stops_a_queue(conn, header):
    """Each kind of queue, holding for each extreme value a message written around send with
    the header holding it and a reservation with it, and a message sent normally, keeps every
    path working."""
    for q in make_queues(conn):
        conn.execute("SELECT pgmq.send(%s, '{}')", (q,))
        for value in HEADER_VALUES:
            insert_around_send(conn, q, f'{{"{header}": {value}}}')
            insert_around_send(conn, q, f'{{"{header}": {value}}}', vt="infinity")
        exercise(conn, q)


@pytest.mark.parametrize("headers", ["5", '"x-pgmq-ttl"', '["x-pgmq-max-retries", "x-pgmq-ttl"]', "null",
                                     '[{"x-pgmq-ttl": 1}]', "1e400"])
def test_headers_that_are_no_object_stop_no_queue(conn, headers):
    for q in make_queues(conn):
        insert_around_send(conn, q, headers)
        insert_around_send(conn, q, headers, vt="infinity")
        exercise(conn, q)


ROW_VALUES = {
    "read_ct": [INT_MAX, INT_MIN],
    "enqueued_at": ["infinity", "-infinity", "4713-01-01 00:00:00+00 BC", "294276-12-31 23:59:59+00"],
    "vt": ["-infinity", "4713-01-01 00:00:00+00 BC"],
    "last_read_at": ["infinity", "-infinity"],
    "msg_id": [BIGINT_MAX, -BIGINT_MAX - 1],
    "priority": [INT_MIN, INT_MAX],
}


@pytest.mark.parametrize("col", sorted(ROW_VALUES))
def test_no_stored_column_value_stops_a_queue(conn, col):
    """A row written around send may hold any value in any column."""
    for q in make_queues(conn):
        conn.execute("SELECT pgmq.send(%s, '{}')", (q,))
        for value in ROW_VALUES[col]:
            insert_around_send(conn, q, '{"x-pgmq-max-retries": 1000}', **{col: value})
        exercise(conn, q)


def settings(conn):
    return conn.execute("SELECT * FROM pgmq.list_queue_settings() WHERE queue_name = 'jobs'").fetchall()


SETTINGS = [
    *[("set_retry_policy('jobs', %s)", v) for v in (0, -1, INT_MAX, INT_MIN, None)],
    *[("set_retry_policy('jobs', NULL, %s)", v) for v in (0, -1, INT_MAX, None)],
    *[("set_retry_policy('jobs', 1000, 1, %s::float8)", v)
      for v in (1, 0, -1, 1.5, 1e200, 1.7976931348623157e308, math.nan, math.inf, -math.inf, None)],
    *[("set_retry_policy('jobs', NULL, 1, 2, %s)", v) for v in (0, -1, INT_MAX, None)],
    *[("set_message_ttl('jobs', %s)", v) for v in (0, -1, 1, INT_MAX, INT_MIN, None)],
    *[("set_dedup_window('jobs', %s)", v) for v in (0, -1, 1, INT_MAX, None)],
]


@pytest.mark.parametrize("call,value", SETTINGS, ids=[c.replace("%s", repr(v)) for c, v in SETTINGS])
def test_every_setting_is_refused_or_stops_no_queue(conn, call, value):
    """A settings routine refuses a value with 22023 and changes nothing, or every path keeps
    working with it (messages with many deliveries behind them included)."""
    make_queue(conn)
    conn.execute("SELECT pgmq.send('jobs', '{}', %s)", (Jsonb({"x-pgmq-dedup-id": "k"}),))
    insert_around_send(conn, "jobs", None, read_ct=INT_MAX - 1)
    insert_around_send(conn, "jobs", '{"x-pgmq-retry-delay": 2147483647}', read_ct=1000)
    before = settings(conn)
    try:
        conn.execute(f"SELECT pgmq.{call}", (value,))
    except psycopg.Error as e:
        assert e.sqlstate == "22023", e
        assert settings(conn) == before
        return
    exercise(conn)
    conn.execute("SELECT pgmq.send('jobs', '{}', %s)", (Jsonb({"x-pgmq-dedup-id": "k2"}),))


SETTING_ROWS = [("max_retries", INT_MAX), ("max_retries", 0), ("retry_delay", INT_MAX), ("max_retry_delay", INT_MAX),
                ("backoff_factor", 1.7976931348623157e308), ("message_ttl", INT_MAX), ("dedup_window", INT_MAX)]


@pytest.mark.parametrize("col,value", SETTING_ROWS, ids=[f"{c}={v}" for c, v in SETTING_ROWS])
def test_settings_rows_at_their_checks_extremes_stop_no_queue(conn, col, value):
    """What the settings table admits, written around the settings routines."""
    make_queue(conn)
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5, 1, 2, 60, 'dlq')")
    conn.execute(f"UPDATE pgmq.queue_settings SET {col} = %s WHERE queue_name = 'jobs'", (value,))
    conn.execute("SELECT pgmq.send('jobs', '{}')")
    insert_around_send(conn, "jobs", None, read_ct=INT_MAX - 1)
    exercise(conn)


INT_EXTREMES = (0, -1, INT_MAX, INT_MIN)
DOOR = [
    *[("SELECT pgmq.send('jobs', '{}', %s::integer)", v) for v in INT_EXTREMES],
    *[("SELECT pgmq.send_batch('jobs', ARRAY['{}'::jsonb], %s::integer)", v) for v in INT_EXTREMES],
    *[("SELECT pgmq.send('jobs', '{}', %s::timestamptz)", v) for v in ("infinity", "-infinity")],
    *[(f"SELECT pgmq.send('jobs', '{{}}', jsonb_build_object('{h}', %s::bigint))", v)
      for h in ("x-pgmq-priority", "x-pgmq-ttl", "x-pgmq-max-retries", "x-pgmq-retry-delay")
      for v in (*INT_EXTREMES, INT_MAX + 1)],
    *[("SELECT count(*) FROM pgmq.read('jobs', %s, 10)", v) for v in INT_EXTREMES],
    *[("SELECT count(*) FROM pgmq.read_with_poll('jobs', %s, 10, 0)", v) for v in INT_EXTREMES],
    *[("SELECT count(*) FROM pgmq.set_vt('jobs', (SELECT array_agg(msg_id) FROM pgmq.q_jobs), %s::integer)", v)
      for v in INT_EXTREMES],
    *[("SELECT pgmq.checkpoint('jobs', (SELECT min(msg_id) FROM pgmq.q_jobs), '{}', 30, %s)", v) for v in INT_EXTREMES],
    *[("SELECT pgmq.checkpoint('jobs', (SELECT min(msg_id) FROM pgmq.q_jobs), '{}', %s, 1)", v) for v in INT_EXTREMES],
    *[("SELECT pgmq.send_reserved('jobs', '{}', %s)", v) for v in INT_EXTREMES],
]


@pytest.mark.parametrize("call,value", DOOR, ids=[c.replace("%s", repr(v)) for c, v in DOOR])
@pytest.mark.parametrize("policy", [True, False], ids=["policy", "no policy"])
def test_every_integer_argument_is_refused_or_stops_no_queue(conn, policy, call, value):
    """What a producer or consumer can pass at its type's extremes is refused at the door
    (22023; a negative LIMIT as upstream: 2201W) or leaves every path working."""
    make_queue(conn)
    if policy:
        conn.execute("SELECT pgmq.set_retry_policy('jobs', 1000, 1, 2, 60, 'dlq')")
    conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}', '{}']::jsonb[])")
    conn.execute("SELECT count(*) FROM pgmq.read('jobs', 30, 1)")  # one leased, one not
    try:
        conn.execute(call, (value,))
    except psycopg.Error as e:
        assert e.sqlstate in ("22023", "2201W"), e
    exercise(conn)
