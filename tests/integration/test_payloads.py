"""Typed payloads: a queue's payload type (create(queue, type), set_payload_type), the polymorphic
send_payload / read_payload / pop_payload, pgpro_queue's XML API, exact round trips, and the
CHECK constraint that keeps other payloads out of a typed queue."""

from __future__ import annotations

import datetime as dt
import json
import math

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import column, raises_sql, restored_copy, scalar

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def count(conn, queue):
    return scalar(conn, f"SELECT count(*) FROM pgmq.q_{queue}")


def pop_one(conn, queue, sqltype, binary=False):
    """pop_payload the only message of a queue (binary results: no client-side text parsing)."""
    cur = conn.cursor(binary=binary)
    rows = cur.execute(f"SELECT payload FROM pgmq.pop_payload(%s, 10, NULL::{sqltype})", (queue,)).fetchall()
    assert len(rows) == 1
    return rows[0][0]


# ----------------------------------------------------------------------------- the payload type

def test_create_with_a_type_and_payload_type(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.create('b', 'bytea'::regtype)")
    conn.execute("SELECT pgmq.create('j')")
    conn.execute("SELECT pgmq.create('v', 'varchar(10)')")  # regtype drops the typmod
    got = conn.execute("SELECT pgmq.payload_type('t')::text, pgmq.payload_type('b')::text, "
                       "pgmq.payload_type('j')::text, pgmq.payload_type('v')::text").fetchone()
    assert got == ("text", "bytea", "jsonb", "character varying")
    # held by OID (a regtype column: pg_upgrade keeps those)
    assert scalar(conn, """SELECT format_type(atttypid, NULL) FROM pg_attribute
                           WHERE attrelid = 'pgmq.queue_settings'::regclass AND attname = 'payload_type'""") == "regtype"
    # idempotent for the same type, even with messages
    conn.execute("SELECT pgmq.send_payload('t', 'x'::text)")
    conn.execute("SELECT pgmq.create('t', 'text')")
    assert count(conn, "t") == 1


def test_set_payload_type_refuses_a_queue_with_messages(conn):
    conn.execute("SELECT pgmq.create('q')")
    conn.execute("SELECT pgmq.send('q', '{}')")
    with raises_sql("55000", 'queue "q" holds messages: its payload type (jsonb) can change only while it is empty'):
        conn.execute("SELECT pgmq.set_payload_type('q', 'text')")
    with raises_sql("55000"):
        conn.execute("SELECT pgmq.create('q', 'text')")
    assert scalar(conn, "SELECT pgmq.payload_type('q')::text") == "jsonb"
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'pgmq_payload_type'") == 0
    # once empty it can change, and back to jsonb drops the constraint again
    conn.execute("SELECT pgmq.purge_queue('q')")
    conn.execute("SELECT pgmq.set_payload_type('q', 'text')")
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'pgmq.q_q'::regclass "
                        "AND conname = 'pgmq_payload_type'") == 1
    conn.execute("SELECT pgmq.set_payload_type('q', 'jsonb')")
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'pgmq_payload_type'") == 0
    assert scalar(conn, "SELECT payload_type FROM pgmq.queue_settings WHERE queue_name = 'q'") is None
    assert scalar(conn, "SELECT pgmq.send('q', '{\"ok\": 1}')") == 2


@pytest.mark.parametrize("sql,state", [
    ("SELECT pgmq.set_payload_type('ghost', 'text')", "42P01"),
    ("SELECT pgmq.create('q2', 'anyelement')", "22023"),
    ("SELECT pgmq.set_payload_type('q', 'record')", "22023"),
    ("SELECT pgmq.set_payload_type('q', NULL)", "22004"),
    ("SELECT pgmq.payload_type('ghost')", "42P01"),
    ("SELECT pgmq.send_payload('ghost', 'x'::text)", "42P01"),
    ("SELECT * FROM pgmq.read_payload('ghost', 30, 1, NULL::text)", "42P01"),
    ("SELECT * FROM pgmq.pop_payload('ghost', 1, NULL::text)", "42P01"),
    ("SELECT pgmq.send_payload('q', NULL::text)", "22004"),
    ("SELECT pgmq.send_payload('q', 'x'::text, '[1]')", "22023"),
    ("SELECT pgmq.send_payload('q', 'x'::text, delay => -1)", "22023"),
    ("SELECT pgmq.send_payload('q', 'untyped literal')", "42804"),  # cast it: 'x'::text
])
def test_bad_arguments_change_nothing(conn, sql, state):
    conn.execute("SELECT pgmq.create('q', 'text')")
    with raises_sql(state):
        conn.execute(sql)
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == ["q"]
    assert scalar(conn, "SELECT pgmq.payload_type('q')::text") == "text"
    assert count(conn, "q") == 0


def test_wrong_types_are_refused_before_anything_happens(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.create('j')")
    conn.execute("SELECT pgmq.send_payload('t', 'kept'::text)")
    conn.execute("SELECT pgmq.send_payload('j', '{\"kept\": true}'::jsonb)")
    with raises_sql("42804", 'queue "t" holds text payloads, got bytea'):
        conn.execute("SELECT pgmq.send_payload('t', '\\x00'::bytea)")
    with raises_sql("42804", 'queue "t" holds text payloads, got jsonb'):
        conn.execute("SELECT pgmq.send_payload('t', '{}'::jsonb)")
    with raises_sql("42804", 'queue "j" holds jsonb payloads, got text'):
        conn.execute("SELECT pgmq.send_payload('j', 'x'::text)")
    with raises_sql("42804", 'queue "t" holds text payloads, got xml'):
        conn.execute("SELECT * FROM pgmq.read_payload('t', 30, 1, NULL::xml)")
    with raises_sql("42804", 'queue "j" holds jsonb payloads, got text'):
        conn.execute("SELECT * FROM pgmq.pop_payload('j', 1, NULL::text)")
    # nothing was written, and the messages were neither leased nor taken
    assert conn.execute("SELECT read_ct, vt <= clock_timestamp() FROM pgmq.q_t").fetchall() == [(0, True)]
    assert conn.execute("SELECT read_ct, vt <= clock_timestamp() FROM pgmq.q_j").fetchall() == [(0, True)]


def test_upstream_writers_cannot_put_other_payloads_into_a_typed_queue(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    with raises_sql("23514"):
        conn.execute("SELECT pgmq.send('t', '{\"a\": 1}')")
    try:
        conn.execute("SELECT pgmq.send_batch('t', ARRAY['\"a\"', '\"b\"']::jsonb[])")  # strings, no marker
        raise AssertionError("send_batch was accepted")
    except psycopg.errors.CheckViolation as exc:
        assert exc.diag.constraint_name == "pgmq_payload_type"
    # even a JSON string with the marker of another type
    with raises_sql("23514"):
        conn.execute("""SELECT pgmq.send('t', '"x"', '{"x-pgmq-payload": "bytea"}'::jsonb)""")
    conn.execute("SELECT pgmq.bind_topic('t.#', 't')")
    with raises_sql("23514"):
        conn.execute("SELECT pgmq.send_topic('t.x', '{}')")
    assert count(conn, "t") == 0


def test_upstream_functions_see_the_stored_string_and_the_marker(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.create('b', 'bytea')")
    conn.execute("SELECT pgmq.send_payload('t', 'hello'::text, '{\"k\": 1}')")
    conn.execute("SELECT pgmq.send_payload('b', '\\xdeadbeef'::bytea)")
    assert conn.execute("SELECT msg_id, message, headers FROM pgmq.read('t', 30, 5)").fetchall() == [
        (1, "hello", {"k": 1, "x-pgmq-payload": "text"})]
    assert conn.execute("SELECT message, headers FROM pgmq.pop('b')").fetchall() == [
        ("3q2+7w==", {"x-pgmq-payload": "bytea"})]
    # lease bookkeeping, archive and metrics work as on any queue
    assert scalar(conn, "SELECT pgmq.archive('t', 1::bigint)") is True
    assert scalar(conn, "SELECT message FROM pgmq.a_t") == "hello"
    assert scalar(conn, "SELECT total_messages FROM pgmq.metrics('t')") == 1


def test_read_payload_leases_and_pop_payload_deletes(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.send_payload('t', 'low'::text, '{\"x-pgmq-priority\": 5}')")
    conn.execute("SELECT pgmq.send_payload('t', 'high'::text, '{\"x-pgmq-priority\": -1}')")
    conn.execute("SELECT pgmq.send_payload('t', 'later'::text, delay => 3600)")
    rows = conn.execute("SELECT msg_id, read_ct, payload, headers->>'x-pgmq-priority', "
                        "visible_at - last_read_at FROM pgmq.read_payload('t', 30, 10, NULL::text)").fetchall()
    assert rows == [(2, 1, "high", "-1", dt.timedelta(seconds=30)), (1, 1, "low", "5", dt.timedelta(seconds=30))]
    assert conn.execute("SELECT * FROM pgmq.read_payload('t', 30, 10, NULL::text)").fetchall() == []
    conn.execute("SELECT pgmq.set_vt('t', 1::bigint, 0)")
    assert column(conn, "SELECT payload FROM pgmq.pop_payload('t', 10, NULL::text)") == ["low"]
    assert column(conn, "SELECT msg_id FROM pgmq.q_t ORDER BY msg_id") == [2, 3]


def test_jsonb_queues_work_through_the_typed_functions(conn):
    conn.execute("SELECT pgmq.create('j')")
    # a stray marker in the headers of a jsonb payload is dropped, not believed
    conn.execute("""SELECT pgmq.send_payload('j', '{"a": [1, "x"]}'::jsonb, '{"x-pgmq-payload": "xml", "k": 1}')""")
    assert conn.execute("SELECT payload, headers FROM pgmq.read_payload('j', 30, 1, NULL::jsonb)").fetchall() == [
        ({"a": [1, "x"]}, {"k": 1})]
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'pgmq_payload_type'") == 0


def test_encode_payload_is_the_reusable_conversion(conn):
    assert conn.execute("SELECT * FROM pgmq._encode_payload('<a/>'::xml, '{\"k\": 1}')").fetchone() == (
        "<a/>", {"k": 1, "x-pgmq-payload": "xml"})
    assert conn.execute("SELECT * FROM pgmq._encode_payload('\\x00ff'::bytea, NULL)").fetchone() == (
        "AP8=", {"x-pgmq-payload": "bytea"})
    assert conn.execute("SELECT * FROM pgmq._encode_payload('[1]'::jsonb, NULL)").fetchone() == ([1], None)
    assert scalar(conn, "SELECT pgmq._decode_payload('\"AP8=\"', '{\"x-pgmq-payload\": \"bytea\"}', NULL::bytea)") \
        == b"\x00\xff"
    with raises_sql("42804", "message holds a text payload, not bytea"):
        conn.execute("SELECT pgmq._decode_payload('\"x\"', '{\"x-pgmq-payload\": \"text\"}', NULL::bytea)")


# ----------------------------------------------------------------------------- exact round trips

@EXAMPLES
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))
def test_text_round_trips_exactly(conn, value):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.send_payload('t', %s::text)", (value,))
    assert pop_one(conn, "t", "text") == value


@EXAMPLES
@given(st.binary(max_size=400))
def test_bytea_round_trips_exactly(conn, value):
    conn.execute("SELECT pgmq.create('b', 'bytea')")
    conn.execute("SET bytea_output = 'escape'")  # the stored form does not depend on it
    conn.execute("SELECT pgmq.send_payload('b', %s::bytea)", (value,))
    stored = scalar(conn, "SELECT message #>> '{}' FROM pgmq.q_b")
    assert "\n" not in stored
    assert pop_one(conn, "b", "bytea") == value


# XML: characters XML 1.0 allows, markup-significant ones escaped in text
XML_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\ufffe\uffff",
                         min_codepoint=0x20) | st.sampled_from(["\t", "\n", "\r"])
XML_TEXT = st.text(XML_CHAR, max_size=20).map(
    lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True).filter(lambda n: not n.lower().startswith("xml"))
ENTITY = st.sampled_from(["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#233;", "&#x1F600;", "&#10;"])
CDATA = st.text(XML_CHAR, max_size=15).filter(lambda s: "]]>" not in s).map(lambda s: f"<![CDATA[{s}]]>")
COMMENT = st.text(XML_CHAR, max_size=10).filter(lambda s: "--" not in s and not s.endswith("-")).map(
    lambda s: f"<!--{s}-->")
SPACE = st.lists(st.sampled_from([" ", "\t", "\n", "\r\n"]), max_size=3).map("".join)
ATTR = st.tuples(NAME, XML_TEXT.map(lambda s: s.replace('"', "&quot;"))).map(lambda kv: f' {kv[0]}="{kv[1]}"')


def _element(children):
    return st.tuples(NAME, st.lists(ATTR, max_size=2, unique_by=lambda a: a.split("=")[0]), st.lists(children, max_size=4),
                     SPACE).map(lambda t: f"<{t[0]}{''.join(t[1])}{t[3]}>{''.join(t[2])}</{t[0]}>")


NODE = st.recursive(XML_TEXT | ENTITY | CDATA | COMMENT, _element, max_leaves=12)
FRAGMENT = st.lists(NODE, max_size=5).map("".join)
DECL = st.sampled_from(["", '<?xml version="1.0"?>\n', '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'])
DOCTYPE = st.sampled_from(["", '<!DOCTYPE r [<!ENTITY e "ent">]>', "<!DOCTYPE r>"])
DOCUMENT = st.tuples(DECL, DOCTYPE, SPACE, _element(NODE), COMMENT | SPACE).map(
    lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}{t[4]}")


@EXAMPLES
@given(st.one_of(DOCUMENT, FRAGMENT))
def test_xml_round_trips_exactly(conn, value):
    conn.execute("SELECT pgmq.create('x', 'xml')")
    conn.execute("SET xmloption = document")  # a fragment is accepted all the same on the way out
    conn.execute("SELECT pgmq.send_payload('x', xmlparse(content %s))", (value,))
    # the xml value's own text, as stored (its output function would rewrite the declaration)
    got = scalar(conn, "SELECT payload::text FROM pgmq.pop_payload('x', 10, NULL::xml)")
    assert got == value


def test_invalid_xml_is_refused_by_the_xml_type(conn):
    conn.execute("SELECT pgmq.create('x', 'xml')")
    with raises_sql("2200N"):
        conn.execute("SELECT pgmq.send_payload('x', '<a><b></a>'::xml)")
    assert count(conn, "x") == 0


HOSTILE = ["SET DateStyle = 'SQL, DMY'", "SET IntervalStyle = 'sql_standard'", "SET extra_float_digits = -3",
           "SET array_nulls = off", "SET TimeZone = 'Pacific/Chatham'", "SET bytea_output = 'escape'"]


def hostile(conn):
    for sql in HOSTILE:
        conn.execute(sql)


@EXAMPLES
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_round_trips_exactly_whatever_the_session_says(conn, value):
    conn.execute("SELECT pgmq.create('f', 'double precision')")
    hostile(conn)
    conn.cursor(binary=True).execute("SELECT pgmq.send_payload('f', %s::float8)", (value,))
    got = pop_one(conn, "f", "float8", binary=True)
    assert (math.isnan(got) and math.isnan(value)) or (got == value and math.copysign(1, got) == math.copysign(1, value))


@EXAMPLES
@given(st.datetimes(timezones=st.timezones(), min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
       st.timedeltas(min_value=-dt.timedelta(days=10**6), max_value=dt.timedelta(days=10**6)),
       st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_other_types_round_trip_through_their_text_form(conn, when, span, number):
    conn.execute("SELECT pgmq.create('ts', 'timestamptz')")
    conn.execute("SELECT pgmq.create('iv', 'interval')")
    conn.execute("SELECT pgmq.create('num', 'numeric')")
    hostile(conn)
    cur = conn.cursor(binary=True)
    cur.execute("SELECT pgmq.send_payload('ts', %s::timestamptz)", (when,))
    cur.execute("SELECT pgmq.send_payload('iv', %s::interval)", (span,))
    cur.execute("SELECT pgmq.send_payload('num', %s::numeric)", (number,))
    assert pop_one(conn, "ts", "timestamptz", binary=True) == when
    assert pop_one(conn, "iv", "interval", binary=True) == span
    # numeric keeps its scale: compare the text forms
    assert scalar(conn, "SELECT payload::text FROM pgmq.pop_payload('num', 10, NULL::numeric)") == \
        scalar(conn, "SELECT %s::numeric::text", (number,))


def test_arrays_composites_and_padded_chars_round_trip(conn):
    conn.execute("CREATE TYPE pair AS (label text, at timestamptz, data bytea)")
    conn.execute("SELECT pgmq.create('arr', 'text[]')")
    conn.execute("SELECT pgmq.create('pair', 'public.pair')")
    conn.execute("SELECT pgmq.create('ch', 'character')")
    hostile(conn)
    conn.execute("""SELECT pgmq.send_payload('arr', ARRAY['a', NULL, 'NULL', '', ' "q" ', '{}']::text[])""")
    conn.execute("""SELECT pgmq.send_payload('pair', ROW('x,"y"', '2024-02-29 12:00:00.000001+05:45', '\\x00ff')::pair)""")
    conn.execute("SELECT pgmq.send_payload('ch', 'ab  '::char(4))")
    assert pop_one(conn, "arr", "text[]") == ["a", None, "NULL", "", ' "q" ', "{}"]
    assert scalar(conn, """SELECT payload = ROW('x,"y"', '2024-02-29 12:00:00.000001+05:45', '\\x00ff')::pair
                           AND (payload).data = '\\x00ff'::bytea
                           FROM pgmq.pop_payload('pair', 1, NULL::public.pair)""") is True
    assert scalar(conn, "SELECT octet_length(payload) FROM pgmq.pop_payload('ch', 1, NULL::char)") == 4
    assert scalar(conn, "SELECT pgmq.payload_type('pair')::text") == "pair"


def test_domain_payload_types_are_their_own_type(conn):
    conn.execute("CREATE DOMAIN small_text AS text CHECK (length(VALUE) < 5)")
    conn.execute("SELECT pgmq.create('d', 'small_text')")
    with raises_sql("42804", 'queue "d" holds public.small_text payloads, got text'):
        conn.execute("SELECT pgmq.send_payload('d', 'abc'::text)")
    conn.execute("SELECT pgmq.send_payload('d', 'abc'::small_text)")
    row = conn.execute("SELECT payload, pg_typeof(payload)::text FROM pgmq.pop_payload('d', 1, NULL::small_text)")
    assert row.fetchone() == ("abc", "small_text")


# ----------------------------------------------------------------------------- dead letters

def test_dead_letters_keep_type_and_marker(conn):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.create('tdlq', 'text')")
    conn.execute("SELECT pgmq.create('bdlq', 'bytea')")
    conn.execute("SELECT pgmq.create('jdlq')")
    with raises_sql("42804", 'dead-letter queue "bdlq" holds bytea payloads, queue "t" holds text payloads'):
        conn.execute("SELECT pgmq.set_retry_policy('t', 0, dead_letter_queue => 'bdlq')")
    conn.execute("SELECT pgmq.set_retry_policy('t', 0, dead_letter_queue => 'tdlq')")
    conn.execute("SELECT pgmq.send_payload('t', 'poison'::text)")
    conn.execute("SELECT * FROM pgmq.read_payload('t', 30, 1, NULL::text)")
    conn.execute("SELECT pgmq.nack('t', 1)")
    assert column(conn, "SELECT payload FROM pgmq.read_payload('tdlq', 30, 1, NULL::text)") == ["poison"]
    with raises_sql("42804", 'dead-letter queue "tdlq" holds text payloads, queue "t" holds bytea payloads'):
        conn.execute("SELECT pgmq.set_payload_type('t', 'bytea')")  # would not fit its dead-letter queue
    assert scalar(conn, "SELECT pgmq.payload_type('t')::text") == "text"
    # an untyped dead-letter queue takes every kind; it becomes typed only as its sources are
    conn.execute("SELECT pgmq.set_retry_policy('t', 0, dead_letter_queue => 'jdlq')")
    with raises_sql("42804", 'dead-letter queue "jdlq" holds bytea payloads, queue "t" holds text payloads'):
        conn.execute("SELECT pgmq.set_payload_type('jdlq', 'bytea')")
    assert scalar(conn, "SELECT pgmq.payload_type('jdlq')::text") == "jsonb"
    conn.execute("SELECT pgmq.set_payload_type('jdlq', 'text')")


# ----------------------------------------------------------------------------- pgpro_queue XML

@pytest.fixture
def pq(conn):
    """A pgpro_queue-style queue (untyped, so it may mix jsonb and XML) with 2 retries."""
    conn.execute("CALL pgmq.create_queue('work', 'N', NULL, 2, 0)")
    return conn


def test_pgpro_queue_mixes_kinds_and_each_read_takes_its_own(pq):
    pq.execute("CALL pgmq.insert_message_xml('work', '<a>1</a>', 0, '{\"k\": \"v\"}')")
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 2}')")
    pq.execute("CALL pgmq.insert_message_xml('work', 'frag <b/>', 1)")
    pq.execute("CALL pgmq.insert_message('work', '{\"n\": 4}', 2)")
    assert pq.execute("SELECT headers FROM pgmq.q_work ORDER BY msg_id").fetchall() == [
        ({"k": "v", "x-pgmq-payload": "xml"},), ({},), ({"x-pgmq-payload": "xml", "x-pgmq-priority": 1},),
        ({"x-pgmq-priority": 2},)]
    assert scalar(pq, "SELECT pgmq.read_message('work')") == {"n": 2}
    assert scalar(pq, "SELECT pgmq.read_message_xml('work')::text") == "<a>1</a>"
    assert scalar(pq, "SELECT pgmq.read_message_xml('work', q_msg_pfilter => '{\"k\": \"v\"}')") is None
    assert pq.execute("SELECT q_jsonb, q_xml::text FROM pgmq.read_message_any('work')").fetchone() == (
        None, "frag <b/>")
    assert pq.execute("SELECT q_jsonb, q_xml::text FROM pgmq.read_message_any('work')").fetchone() == (
        {"n": 4}, None)
    assert scalar(pq, "SELECT pgmq.read_message_xml('work')") is None
    assert scalar(pq, "SELECT pgmq.read_message('work')") is None
    assert count(pq, "work") == 0


def test_pgpro_by_id_forms(pq):
    pq.execute("CALL pgmq.insert_message_xml('work', '<x/>')")
    pq.execute("CALL pgmq.insert_message('work', '[1]')")
    assert scalar(pq, "SELECT pgmq.read_message_by_id('work', 1)") is None  # an XML message
    assert scalar(pq, "SELECT pgmq.read_message_by_id_xml('work', 2)") is None  # a jsonb message
    assert count(pq, "work") == 2
    assert scalar(pq, "SELECT pgmq.read_message_by_id_xml('work', 1)::text") == "<x/>"
    assert pq.execute("SELECT body, body_xml FROM pgmq.read_message_by_id_any('work', 2)").fetchone() == ([1], None)
    pq.execute("CALL pgmq.insert_message_xml('work', '<y/>')")
    assert pq.execute("SELECT body, body_xml::text FROM pgmq.read_message_by_id_any('work', 3)").fetchone() == (
        None, "<y/>")
    with raises_sql("22004"):
        pq.execute("SELECT pgmq.read_message_by_id_xml('work', NULL)")


def test_pgpro_xml_on_typed_queues(conn):
    conn.execute("SELECT pgmq.create('x', 'xml')")
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("CALL pgmq.insert_message_xml('x', '<ok/>')")
    with raises_sql("42804", 'queue "t" holds text payloads, got xml'):
        conn.execute("CALL pgmq.insert_message_xml('t', '<no/>')")
    with raises_sql("42804", 'queue "x" holds xml payloads, got jsonb'):
        conn.execute("CALL pgmq.insert_message('x', '{}')")
    with raises_sql("42804", 'queue "x" holds xml payloads, not jsonb'):
        conn.execute("SELECT pgmq.read_message('x')")
    with raises_sql("42804", 'queue "t" holds text payloads, not jsonb or xml'):
        conn.execute("SELECT * FROM pgmq.read_message_any('t')")
    with raises_sql("2200N"):
        conn.execute("CALL pgmq.insert_message_xml('x', 'not <xml')")
    assert count(conn, "t") == 0
    assert column(conn, "SELECT message FROM pgmq.q_x") == ["<ok/>"]  # untouched by the refused reads
    # what insert_message_xml wrote, the polymorphic API reads, and the other way round
    conn.execute("SELECT pgmq.send_payload('x', '<second/>'::xml)")
    assert column(conn, "SELECT payload::text FROM pgmq.read_payload('x', 30, 1, NULL::xml)") == ["<ok/>"]
    assert scalar(conn, "SELECT pgmq.read_message_xml('x')::text") == "<second/>"


def test_rolled_back_xml_read_returns_and_counts(pq, connect):
    pq.execute("CALL pgmq.insert_message_xml('work', '<job id=\"1\"/>')")
    for attempt in (1, 2):
        c = connect(autocommit=False)
        assert scalar(c, "SELECT pgmq.read_message_xml('work')::text") == '<job id="1"/>'
        c.rollback()
        # the next reader records the rolled-back attempt (and hands nothing out meanwhile)
        assert scalar(pq, "SELECT pgmq.read_message_xml('work')") is None
        assert scalar(pq, "SELECT read_ct FROM pgmq.q_work") == attempt
    c = connect(autocommit=False)
    assert scalar(c, "SELECT pgmq.read_message_xml('work')::text") == '<job id="1"/>'
    c.rollback()
    assert scalar(pq, "SELECT pgmq.read_message_xml('work')") is None
    # 1 + 2 retries used up: dead-lettered into the archive, still an XML message
    assert count(pq, "work") == 0
    assert pq.execute("SELECT message, headers->>'x-pgmq-payload', headers->'x-pgmq-dead-letter'->>'reason' "
                      "FROM pgmq.a_work").fetchone() == ('<job id="1"/>', "xml", "rollback")


# ----------------------------------------------------------------------------- table kinds

def test_set_payload_type_waits_for_open_senders(conn, connect):
    conn.execute("SELECT pgmq.create('q')")
    sender = connect(autocommit=False)
    sender.execute("SELECT pgmq.send('q', '{\"in\": \"flight\"}')")
    other = connect()
    other.execute("SET lock_timeout = '300ms'")
    with raises_sql("55P03"):  # it cannot check emptiness under an uncommitted send
        other.execute("SELECT pgmq.set_payload_type('q', 'text')")
    sender.commit()
    with raises_sql("55000"):
        other.execute("SELECT pgmq.set_payload_type('q', 'text')")
    assert scalar(conn, "SELECT pgmq.payload_type('q')::text") == "jsonb"


def test_unlogged_typed_queue(conn):
    conn.execute("SELECT pgmq.create_unlogged('u')")
    conn.execute("SELECT pgmq.set_payload_type('u', 'bytea')")
    assert scalar(conn, "SELECT relpersistence FROM pg_class WHERE oid = 'pgmq.q_u'::regclass") == "u"
    conn.execute("SELECT pgmq.send_payload('u', '\\x0102'::bytea)")
    with raises_sql("23514"):
        conn.execute("SELECT pgmq.send('u', '{}')")
    assert pop_one(conn, "u", "bytea") == b"\x01\x02"


def test_partitioned_typed_queue_constrains_every_partition(conn, partman):
    conn.execute("SELECT pgmq.create_partitioned('p', '10', '100', 2)")
    conn.execute("SELECT pgmq.set_payload_type('p', 'text')")

    def unconstrained():
        return column(conn, """SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                               WHERE i.inhparent = 'pgmq.q_p'::regclass AND NOT EXISTS (
                                   SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid
                                   AND k.conname = 'pgmq_payload_type')""")

    assert scalar(conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgmq.q_p'::regclass") >= 3
    assert unconstrained() == []
    for i in range(45):
        conn.execute("SELECT pgmq.send_payload('p', %s::text)", (f"m{i}",))
    conn.execute("SELECT pgmq.run_partition_maintenance('p')")  # makes partitions ahead
    assert unconstrained() == []
    with raises_sql("23514"):
        conn.execute("SELECT pgmq.send('p', '{}')")
    assert column(conn, "SELECT payload FROM pgmq.read_payload('p', 30, 3, NULL::text)") == ["m0", "m1", "m2"]


def test_dump_and_restore_keep_the_payload_type(conn, dsn, tmp_path, pg_cluster):
    conn.execute("SELECT pgmq.create('t', 'text')")
    conn.execute("SELECT pgmq.create('b', 'bytea')")
    conn.execute("SELECT pgmq.send_payload('t', 'kept ✓'::text)")
    conn.execute("SELECT pgmq.send_payload('b', '\\x00ff'::bytea)")
    with restored_copy(conn, dsn, tmp_path) as r:
        assert r.execute("SELECT pgmq.payload_type('t')::text, pgmq.payload_type('b')::text").fetchone() == (
            "text", "bytea")
        assert column(r, "SELECT payload FROM pgmq.pop_payload('t', 5, NULL::text)") == ["kept ✓"]
        assert column(r, "SELECT payload FROM pgmq.pop_payload('b', 5, NULL::bytea)") == [b"\x00\xff"]
        with raises_sql("23514"):
            r.execute("SELECT pgmq.send('t', '{}')")
        with raises_sql("42804"):
            r.execute("SELECT pgmq.send_payload('b', 'x'::text)")


@pytest.mark.parametrize("type_name, bad, good", [
    ("integer", "12x", "12"),
    ("bytea", "not base64!", "AP8="),
    ("xml", "<a>", "<a/>"),
    ("timestamp with time zone", "yesterday-ish", "2024-05-01 12:00:00+00"),
])
def test_a_forged_payload_that_does_not_read_back_is_refused(conn, type_name, bad, good):
    """Upstream's send with a hand-made marker passes the marker check; the constraint also
    checks that the stored text reads back as the queue's type, so read_payload never meets a
    message it cannot decode."""
    conn.execute("SELECT pgmq.create('forged', %s::regtype)", (type_name,))
    hdr = json.dumps({"x-pgmq-payload": type_name})
    with raises_sql("23514"):
        conn.execute("SELECT pgmq.send('forged', to_jsonb(%s::text), %s::jsonb)", (bad, hdr))
    conn.execute("SELECT pgmq.send('forged', to_jsonb(%s::text), %s::jsonb)", (good, hdr))
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_forged") == 1
    assert conn.execute("SELECT count(*) FROM pgmq.read_payload('forged', 0, 5, NULL::" + type_name + ")"
                        ).fetchone()[0] == 1
