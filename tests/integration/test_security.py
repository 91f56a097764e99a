"""Security audit, part 1: injection fuzzing (hypothesis, real server) and the catalog's
security settings.

Every name, routing key, pattern, callback signature and filter argument of every routine is
fed hostile strings (quotes, dollar quotes, comments, format() specifiers, unicode, over-long
and case-twisted names, SQL). The value always travels as a bound parameter, so what is tested
is the extension's own dynamic SQL. Properties of each call:

- it succeeds or fails with an SQLSTATE from the case's allowed list; never 42601
  (syntax_error), XX000, or a message about an object the input named;
- canary objects in schema `canary` are untouched, and no object appears outside schema pgmq
  (save what the call documents, e.g. pg_partman's template table);
- a hostile queue name that is accepted round-trips: send, then read returns the message.

Each example runs in a transaction that is rolled back, so examples do not see each other.

Adding a routine = one line in CASES: the call with `%(h)s` where the fuzzed value goes, the
strategy, and the SQLSTATEs that are acceptable refusals for that argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from pgmq_build import surface
from pgmq_build.lint.sqlast import strip_in
from tests.helpers import install_partman, partman_available, scalar

# ----------------------------------------------------------------------------- hostile values

FRAGMENTS = [
    "'", "''", '"', '""', ";", "--", "/*", "*/", "$$", "$fn$", "$q$", "$1", "\\", "\\'", "E'",
    "%s", "%I", "%L", "%1$s", "%%", "%", "%2$I", "é", "Ⱥ", "日本語", "🙂", "ß", "İ", "K", " ",
    "\t", "\n", "\r", "\u00a0", "\u200b", "DROP TABLE canary.t", "SELECT canary.f()",
    "); SELECT canary.f(); --", "' OR '1'='1", 'x"; DROP TABLE canary.t; --',
    "$$; DROP TABLE canary.t; $$", "$fn$ || canary.f() || $fn$", "pg_catalog.", "public.",
    "canary.t", "jobs", "JOBS", "Jobs", "q_jobs", "pgmq.meta", "NULL", "true", ".", "*", "#",
    "(", ")", "[", "]", "{", "}", ",", "::", "x" * 64, "é" * 32, "Ⱥ" * 24, "a.b", "-", "_",
]
KEYWORDS = ["select", "SELECT", "drop", "table", "user", "current_user", "null", "default",
            "order", "group", "from", "where", "end", "begin", "commit", "all", "public", "pg_temp"]

HOSTILE = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=70),
    st.sampled_from(KEYWORDS),
    st.sampled_from(["", " ", "J" * 47, "é" * 24, "é" * 23 + "x", "Jobs", "JOBS", "jobs "]),
)
# Keys and patterns: hostile, or plausible ones so that acceptance is exercised as well.
WORD = st.from_regex(r"[a-zA-Z0-9_-]{1,8}", fullmatch=True)
ROUTING = st.one_of(HOSTILE, st.lists(WORD, min_size=1, max_size=4).map(".".join))
PATTERN = st.one_of(ROUTING, st.lists(st.one_of(WORD, st.just("*"), st.just("#")),
                                      min_size=1, max_size=4).map(".".join))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), HOSTILE)
JSON_VALUE = st.recursive(
    JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                      st.dictionaries(HOSTILE, kids, max_size=3)),
    max_leaves=8)
FILTER = st.one_of(st.dictionaries(st.one_of(HOSTILE, st.sampled_from(
    ["msg_id", "priority", "read_ct", "a", "x-pgmq-group"])), JSON_VALUE, max_size=4), JSON_VALUE)

# ----------------------------------------------------------------------------- the registry

# Refusals a queue name may get: bad characters or empty (42602), too long (42622), NULL
# (22004), unknown queue (42P01), clash with an existing queue (42P07).
# A value naming an existing queue meets that queue's state: typed payloads (42804, 23514 from
# the pgmq_payload_type constraint), a state that forbids the call (55000).
QUEUE = frozenset({"42602", "42622", "22004", "42P01", "42P07", "42804", "23514", "55000"})
# pgpro_queue names (type name): also unknown queue as undefined_object, as pgpro_queue does.
PGPRO = QUEUE
KEY = frozenset({"22023", "22004"})          # invalid routing key / pattern
UKEY = frozenset({"P0001"})                  # the same, from upstream's functions (upstream's class)
# Exchange names: bad name (42602), unknown exchange (42704), exists (42710), the built-in one
# (22023: cannot be dropped); role names: unknown role (42704).
EXCHANGE = frozenset({"42602", "42704", "42710", "22023", "22P02", "22004"})  # + a key unfit for the type
ROLE = frozenset({"42704"})
FILTERS = frozenset({"22023"})               # a filter that is not a JSON object


@dataclass(frozen=True)
class Case:
    """One fuzzed call: `sql` takes the hostile value as %(h)s."""

    sql: str
    allowed: frozenset[str]
    strategy: st.SearchStrategy = HOSTILE
    roundtrip: bool = False        # an accepted value is a new queue: send + read must work
    needs: str = ""                # "partman": pg_partman must be installed in the database
    in_transaction: bool = True    # False for procedures that COMMIT (dispatch)
    elsewhere: str = ""            # regex of objects outside pgmq the call may create
    wrap_json: bool = False        # pass the value as jsonb

    @property
    def id(self) -> str:
        return re.sub(r"\W+", "_", self.sql.replace("%(h)s", "H")).strip("_")[:60]


# Upstream's functions raise upstream's errors with upstream's class, P0001 (pgmq_build/errors.py).
UPSTREAM = {e.name for e in surface.current() if e.upstream}
OURS_OVERLOAD = re.compile(r"::(name|regtype)\b")  # our overloads of upstream's names


def _q(sql: str, allowed=QUEUE, **kw) -> Case:
    called = re.match(r"(?:SELECT|CALL) (?:\* FROM )?pgmq\.(\w+)\(", sql)
    if sql.startswith("SELECT") and called and called.group(1) in UPSTREAM and not OURS_OVERLOAD.search(sql):
        allowed = frozenset(allowed) | {"P0001"}
    return Case(sql, frozenset(allowed), **kw)


T = "%(h)s::text"
N = "%(h)s::name"
PARTMAN_TEMPLATE = r"^partman\.template_pgmq_[qa]_"
CASES = [
    # queue names: queue management
    _q(f"SELECT pgmq.create({T})", roundtrip=True),
    _q(f"SELECT pgmq.create_non_partitioned({T})", roundtrip=True),
    _q(f"SELECT pgmq.create_unlogged({T})", roundtrip=True),
    _q(f"SELECT pgmq.create_partitioned({T}, '10', '100')", QUEUE, roundtrip=True,
       needs="partman",
       elsewhere=PARTMAN_TEMPLATE),
    _q(f"SELECT pgmq.validate_queue_name({T})"),
    _q(f"SELECT pgmq.format_table_name({T}, 'q')"),
    _q(f"SELECT pgmq.acquire_queue_lock({T})"),
    _q(f"SELECT pgmq.drop_queue({T})"),
    _q(f"SELECT pgmq.drop_queue({T}, false)"),
    _q(f"SELECT pgmq.purge_queue({T})"),
    _q(f"SELECT pgmq.detach_archive({T})"),
    _q(f"SELECT pgmq.convert_archive_partitioned({T})", needs="partman", elsewhere=PARTMAN_TEMPLATE),
    _q(f"SELECT pgmq.run_partition_maintenance({T})", QUEUE | {"42809"}, needs="partman"),  # 42809: an existing queue that is not partitioned
    _q(f"SELECT pgmq.create_fifo_index({T})"),
    # queue names: messages
    _q(f"SELECT pgmq.send({T}, '{{\"a\": 1}}')"),
    _q(f"SELECT pgmq.send({T}, '{{\"a\": 1}}', '{{\"x-pgmq-dedup-id\": \"d\"}}'::jsonb)"),
    _q(f"SELECT pgmq.send({T}, '{{\"a\": 1}}', '{{\"x-pgmq-ttl\": 5}}'::jsonb, 0)"),
    _q(f"SELECT pgmq.send_batch({T}, ARRAY['{{\"a\": 1}}']::jsonb[])"),
    _q(f"SELECT pgmq.send({T}, '{{\"a\": 1}}', '{{\"x-pgmq-priority\": 1}}'::jsonb)"),
    _q(f"SELECT pgmq.enable_priorities({T})"),
    _q(f"SELECT * FROM pgmq.read({T}, 0, 1)"),
    _q(f"SELECT * FROM pgmq.read_with_poll({T}, 0, 1, 0, 10)"),
    _q(f"SELECT * FROM pgmq.read_unordered({T}, 0, 1)"),
    _q(f"SELECT pgmq.ack_ranges({T}, ARRAY[1]::bigint[], ARRAY[2]::bigint[])"),
    _q(f"SELECT * FROM pgmq.pop({T})"),
    _q(f"SELECT * FROM pgmq.read_grouped({T}, 0, 1)"),
    _q(f"SELECT * FROM pgmq.read_grouped_rr({T}, 0, 1)"),
    _q(f"SELECT * FROM pgmq.read_grouped_head({T}, 0, 1)"),
    _q(f"SELECT * FROM pgmq.read_grouped_with_poll({T}, 0, 1, 0, 10)"),
    _q(f"SELECT * FROM pgmq.read_grouped_rr_with_poll({T}, 0, 1, 0, 10)"),
    _q(f"SELECT * FROM pgmq.read_grouped_head_with_poll({T}, 0, 1, 0, 10)"),
    _q(f"SELECT pgmq.delete({T}, 1::bigint)"),
    _q(f"SELECT pgmq.delete({T}, ARRAY[1]::bigint[])"),
    _q(f"SELECT pgmq.archive({T}, 1::bigint)"),
    _q(f"SELECT pgmq.archive({T}, ARRAY[1]::bigint[])"),
    _q(f"SELECT * FROM pgmq.set_vt({T}, 1::bigint, 10)"),
    _q(f"SELECT * FROM pgmq.metrics({T})"),
    # queue names: delivery settings
    _q(f"SELECT pgmq.set_retry_policy({T}, 3)"),
    _q(f"SELECT pgmq.set_retry_policy('jobs', 3, dead_letter_queue => {T})", QUEUE | {"22023"}),  # itself
    _q(f"SELECT pgmq.remove_retry_policy({T})"),
    _q(f"SELECT pgmq.set_dedup_window({T}, 10)"),
    _q(f"SELECT pgmq.set_message_ttl({T}, 10)"),
    _q(f"SELECT pgmq.nack({T}, 1)"),
    _q(f"SELECT pgmq.checkpoint({T}, 1, '{{}}', 10)"),
    _q(f"SELECT pgmq.redrive({T})"),
    _q(f"SELECT pgmq.redrive('dlq', {T})"),
    _q(f"SELECT pgmq.send_reserved({T}, '{{}}', 10)"),
    _q(f"SELECT pgmq.confirm({T}, ARRAY[1]::bigint[])"),
    _q(f"SELECT pgmq.expire_messages({T})"),
    # stream and subscription names
    _q(f"SELECT pgmq.create_stream({T})"),
    _q(f"SELECT pgmq.drop_stream({T})"),
    _q(f"SELECT pgmq.stream_send({T}, '{{}}')"),
    _q(f"SELECT pgmq.stream_send_batch({T}, ARRAY['{{}}']::jsonb[])"),
    _q(f"SELECT pgmq.subscribe({T}, 's')"),
    _q(f"SELECT pgmq.subscribe('st', {T})", QUEUE | {"22023"}),
    _q(f"SELECT pgmq.unsubscribe({T}, 's')"),
    _q(f"SELECT * FROM pgmq.stream_read({T}, 's')"),
    _q(f"SELECT * FROM pgmq.stream_read('st', {T})", QUEUE | {"42704"}),
    _q(f"SELECT pgmq.stream_ack({T}, 's', 1)"),
    _q(f"SELECT pgmq.stream_ack('st', {T}, 1)", QUEUE | {"42704"}),
    _q(f"SELECT pgmq.stream_rewind({T}, 's', 0::bigint)"),
    _q(f"SELECT pgmq.stream_rewind('st', {T}, now())", QUEUE | {"42704"}),
    _q(f"SELECT * FROM pgmq.stream_info({T})"),
    _q(f"SELECT pgmq.stream_tick({T})"),
    _q(f"SELECT pgmq.subscribe('st', 's', 'latest', {T})"),  # the retry queue: a new queue, or refused
    _q(f"SELECT pgmq.stream_nack({T}, 's', 1, ARRAY[1]::bigint[])"),
    _q(f"SELECT pgmq.stream_nack('st', {T}, 1, ARRAY[1]::bigint[])", QUEUE | {"42704"}),
    _q(f"SELECT pgmq.grant_stream_access({T}, 'pg_monitor')"),
    _q(f"SELECT pgmq.grant_stream_access('st', {N})", ROLE),
    _q(f"SELECT pgmq.grant_stream_access('st', 'pg_monitor', {T})", frozenset({"22023"})),
    _q(f"SELECT pgmq.revoke_stream_access({T}, 'pg_monitor', 'read')"),
    _q(f"SELECT pgmq.revoke_stream_access('st', {N}, 'write')", ROLE | {"0LP01"}),
    # streams bound to exchanges: names and keys
    _q(f"SELECT pgmq.bind_stream({T}, 'ex', 'k')"),
    _q(f"SELECT pgmq.bind_stream('st', {T}, 'k')", EXCHANGE),
    _q(f"SELECT pgmq.bind_stream('st', 'ex', {T})", KEY),
    _q(f"SELECT pgmq.bind_stream('st', 'tx', {T})", KEY, strategy=PATTERN),
    _q(f"SELECT pgmq.bind_stream('st', 'hx', {T})", KEY | {"22P02"}),
    _q(f"SELECT pgmq.unbind_stream({T}, 'ex', 'k')"),
    _q(f"SELECT pgmq.unbind_stream('st', {T}, 'k')", EXCHANGE),
    _q(f"SELECT pgmq.unbind_stream('st', 'tx', {T})", KEY),
    # queue names: operations
    _q(f"SELECT pgmq.pause({T})"),
    _q(f"SELECT pgmq.resume({T})"),
    _q(f"SELECT pgmq.set_delivery_counting({T})"),
    _q(f"SELECT * FROM pgmq.queue_metrics({T})"),
    _q(f"SELECT * FROM pgmq.queue_metrics_page({T}, 5)"),
    _q(f"SELECT * FROM pgmq.metrics_history({T})"),
    _q(f"SELECT * FROM pgmq.browse({T})"),
    _q(f"SELECT pgmq.move_messages({T}, 'dlq')", QUEUE | {"22023"}),  # itself
    _q(f"SELECT pgmq.move_messages('dlq', {T})", QUEUE | {"22023"}),  # itself
    # queue names: notifications
    _q(f"SELECT pgmq.enable_notify_insert({T}, 0)"),
    _q(f"SELECT pgmq.disable_notify_insert({T})"),
    _q(f"SELECT pgmq.update_notify_insert({T}, 10)"),  # P0001: not enabled
    _q(f"SELECT pgmq.enable_notify_msg_id({T})"),
    _q(f"SELECT pgmq.disable_notify_msg_id({T})"),
    # queue names: topics
    _q(f"SELECT pgmq.bind_topic('a.b', {T})"),  # upstream: an empty name is P0001
    _q(f"SELECT pgmq.unbind_topic('a.b', {T})"),
    _q(f"SELECT * FROM pgmq.list_topic_bindings({T})"),
    # queue names: pgpro_queue API
    _q(f"CALL pgmq.create_queue({N})", PGPRO, roundtrip=True),
    _q(f"CALL pgmq.create_queue('pq', 'N', {N})", PGPRO | {"22023"}),  # 22023: its own DLQ
    _q(f"CALL pgmq.alter_queue({N}, new_retries => 1)", PGPRO),
    _q(f"CALL pgmq.drop_queue({N})", PGPRO),
    _q(f"SELECT pgmq.get_queue_table({N})", PGPRO),
    _q(f"CALL pgmq.insert_message({N}, '{{}}')", PGPRO),
    _q(f"SELECT pgmq.read_message({N})", PGPRO),
    _q(f"SELECT pgmq.read_message_by_id({N}, 1)", PGPRO),
    _q(f"SELECT * FROM pgmq.read_message_any({N})", PGPRO),
    _q(f"SELECT * FROM pgmq.read_message_by_id_any({N}, 1)", PGPRO),
    # queue names: callbacks
    _q(f"CALL pgmq.register_callback({T}, 'public.cb(jsonb)')"),
    _q(f"CALL pgmq.unregister_callback({T}, 'public.cb(jsonb)')", QUEUE | {"42704"}),
    _q(f"CALL pgmq.dispatch({T})", QUEUE | {"42704"}, in_transaction=False),
    # callback signatures, resolved in the caller's search_path
    _q(f"CALL pgmq.register_callback('jobs', {T})", {"42602", "42883", "42809", "42804", "42710",
                                                     "22004"}),
    _q(f"CALL pgmq.unregister_callback('jobs', {T})", {"42602", "42883", "42704", "22004"}),
    # routing keys and topic patterns
    _q(f"SELECT pgmq.validate_routing_key({T})", UKEY, strategy=ROUTING),
    _q(f"SELECT pgmq.validate_topic_pattern({T})", UKEY, strategy=PATTERN),
    _q(f"SELECT pgmq.bind_topic({T}, 'jobs')", UKEY, strategy=PATTERN),
    _q(f"SELECT pgmq.unbind_topic({T}, 'jobs')", UKEY, strategy=PATTERN),
    _q(f"SELECT * FROM pgmq.test_routing({T})", UKEY, strategy=ROUTING),
    _q(f"SELECT pgmq.send_topic({T}, '{{\"a\": 1}}')", UKEY, strategy=ROUTING),
    _q(f"SELECT * FROM pgmq.send_batch_topic({T}, ARRAY['{{}}']::jsonb[])", UKEY, strategy=ROUTING),
    # exchanges: names, types, keys, unroutable handling
    _q(f"SELECT pgmq.create_exchange({N})", EXCHANGE),
    _q(f"SELECT pgmq.create_exchange('e2', {T})", KEY),
    _q(f"SELECT pgmq.drop_exchange({N}, true)", EXCHANGE),
    _q(f"SELECT pgmq.bind_queue({N}, 'ex', 'k')", PGPRO),
    _q(f"SELECT pgmq.bind_queue('jobs', {N}, 'k')", EXCHANGE),
    _q(f"SELECT pgmq.bind_queue('jobs', 'ex', {T})", KEY),
    _q(f"SELECT pgmq.bind_queue('jobs', 'tx', {T})", KEY, strategy=PATTERN),
    _q(f"SELECT pgmq.bind_queue('jobs', 'hx', {T})", KEY | {"22P02"}),
    _q(f"SELECT pgmq.unbind_queue({N}, 'ex', 'k')", PGPRO),
    _q(f"SELECT pgmq.unbind_queue('jobs', {N}, 'k')", EXCHANGE),
    _q(f"SELECT pgmq.unbind_queue('jobs', 'ex', {T})", KEY),
    _q(f"SELECT * FROM pgmq.publish({T}, 'k', '{{}}')", EXCHANGE),
    _q(f"SELECT * FROM pgmq.publish('ex', {T}, '{{}}')", KEY),
    _q(f"SELECT * FROM pgmq.publish('tx', {T}, '{{}}')", KEY, strategy=ROUTING),
    _q("SELECT * FROM pgmq.publish('hx', NULL, '{}', %(h)s)", FILTERS | {"22P02", "22003"},
       strategy=FILTER, wrap_json=True),
    _q(f"SELECT * FROM pgmq.publish_routed({T}, 'k', '{{}}')", EXCHANGE),
    _q(f"SELECT * FROM pgmq.publish_routed('ex', {T}, '{{}}')", KEY),
    _q(f"SELECT * FROM pgmq.publish_routed('tx', {T}, '{{}}')", KEY, strategy=ROUTING),
    _q(f"CALL pgmq.publish_message({N}, 'k', '{{}}')", EXCHANGE),
    _q(f"CALL pgmq.publish_message('ex', {T}, '{{}}')", KEY),
    _q(f"CALL pgmq.publish_message_xml({N}, 'k', '<a/>')", EXCHANGE),
    _q(f"CALL pgmq.publish_message_xml('ex', {T}, '<a/>')", KEY),
    _q(f"SELECT pgmq.set_unroutable({T}, 'error')", EXCHANGE),
    _q(f"SELECT pgmq.set_unroutable('ex', {T})", KEY),
    _q(f"SELECT pgmq.set_unroutable('ex', 'notice', {T})", EXCHANGE),
    _q(f"SELECT * FROM pgmq.list_exchange_bindings({T})"),
    _q(f"SELECT * FROM pgmq.test_exchange_routing({T}, 'k')", EXCHANGE),
    _q(f"SELECT * FROM pgmq.test_exchange_routing('tx', {T})", KEY, strategy=ROUTING),
    # access control: queue, exchange and role names
    _q(f"CALL pgmq.grant_queue_access({N}, 'postgres')", PGPRO),
    _q(f"CALL pgmq.grant_queue_access('jobs', {N})", ROLE),
    # the SECURITY DEFINER routines behind queue DDL, called directly with a proof (those behind
    # upstream's functions check names with upstream's flavour: P0001)
    _q(f"SELECT pgmq._prove_caller(), pgmq._drop_queue_tables({T})", QUEUE | {"P0001"}),
    _q(f"SELECT pgmq._prove_caller(), pgmq._build_fifo_index({T})", QUEUE | {"P0001"}),
    _q(f"SELECT pgmq._prove_caller(), pgmq._set_notify_trigger({T}, 'insert', true)", QUEUE | {"P0001"}),
    _q(f"SELECT pgmq._prove_caller(), pgmq._set_queue_access({N}, 'postgres', true)", PGPRO),
    _q(f"SELECT pgmq._prove_caller(), pgmq._set_queue_access('jobs', {N}, false)", ROLE | {"0LP01"}),
    _q(f"SELECT pgmq._prove_caller(), pgmq._make_callback_runner({N})", {"42501"}),
    # 0LP01: revoking the queue owner's own access ('postgres' owns the queues made in SETUP)
    _q(f"CALL pgmq.revoke_queue_access({N}, 'postgres')", PGPRO | {"0LP01"}),
    _q(f"CALL pgmq.revoke_queue_access('jobs', {N})", ROLE | {"0LP01"}),
    _q(f"CALL pgmq.reset_queue_access({N})", PGPRO),
    _q(f"CALL pgmq.grant_publish_access({N}, 'postgres')", EXCHANGE),
    _q(f"CALL pgmq.grant_publish_access('ex', {N})", ROLE),
    _q(f"CALL pgmq.revoke_publish_access({N}, 'postgres')", EXCHANGE),
    _q(f"CALL pgmq.revoke_publish_access('ex', {N})", ROLE),
    # typed payloads
    _q(f"SELECT pgmq.create({T}, 'text'::regtype)"),
    _q(f"SELECT pgmq.set_payload_type({T}, 'bytea'::regtype)", QUEUE | {"55000"}),
    _q(f"SELECT pgmq.payload_type({T})"),
    _q(f"SELECT pgmq.send_payload({T}, 'x'::text)", QUEUE | {"42804"}),
    _q(f"SELECT * FROM pgmq.read_payload({T}, 0, 1, NULL::text)", QUEUE | {"42804"}),
    _q(f"SELECT * FROM pgmq.pop_payload({T}, 1, NULL::text)", QUEUE | {"42804"}),
    _q("SELECT pgmq.send_payload('texts', %(h)s::text)", set()),
    _q(f"CALL pgmq.insert_message_xml({N}, '<a/>')", PGPRO | {"42804"}),
    _q(f"SELECT pgmq.read_message_xml({N})", PGPRO | {"42804"}),
    _q(f"SELECT pgmq.read_message_by_id_xml({N}, 1)", PGPRO | {"42804"}),
    # filters and headers (jsonb values)
    _q("SELECT * FROM pgmq.read('jobs', 0, 1, %(h)s)", FILTERS, strategy=FILTER, wrap_json=True),
    _q("SELECT * FROM pgmq.read_with_poll('jobs', 0, 1, 0, 10, %(h)s)", FILTERS, strategy=FILTER,
       wrap_json=True),
    _q("SELECT pgmq.read_message('jobs', %(h)s)", FILTERS, strategy=FILTER, wrap_json=True),
    _q("SELECT pgmq.read_message('jobs', NULL, %(h)s)", FILTERS, strategy=FILTER, wrap_json=True),
    _q("SELECT * FROM pgmq.read_message_any('jobs', %(h)s, %(h)s)", FILTERS, strategy=FILTER,
       wrap_json=True),
    _q("CALL pgmq.insert_message('jobs', '{}', 0, %(h)s)", FILTERS, strategy=FILTER, wrap_json=True),
    _q("SELECT pgmq.send('jobs', %(h)s, %(h)s)", FILTERS | {"22P02", "22003"}, strategy=FILTER,
       wrap_json=True),
]

# ----------------------------------------------------------------------------- the oracle

SETUP = """
CREATE SCHEMA canary;
CREATE TABLE canary.t (x int);
INSERT INTO canary.t VALUES (42);
CREATE FUNCTION canary.f() RETURNS int LANGUAGE sql AS 'SELECT 42';
CREATE PROCEDURE public.cb(msg jsonb) LANGUAGE sql AS '';
SELECT pgmq.create('jobs');
SELECT pgmq.create('dlq');
SELECT pgmq.send('jobs', '{"a": 1}');
CALL pgmq.create_queue('pq');
SELECT pgmq.create('texts', 'text'::regtype);
SELECT pgmq.create_exchange('ex', 'direct');
SELECT pgmq.create_exchange('tx', 'topic');
SELECT pgmq.create_exchange('hx', 'headers');
SELECT pgmq.bind_queue('jobs', 'ex', 'k');
SELECT pgmq.bind_queue('jobs', 'tx', '#');
SELECT pgmq.bind_queue('jobs', 'hx', '{"x-match": "any", "a": 1}');
SELECT pgmq.create_stream('st');
"""

# Every object outside schema pgmq (and the system schemas), and every role.
OUTSIDE = """
SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pgmq', 'pg_catalog', 'information_schema', 'pg_toast')
  AND n.nspname NOT LIKE 'pg\\_temp\\_%%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%%'
UNION ALL
SELECT n.nspname || '.' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid)
       || ')' || pg_catalog.md5(p.prosrc)
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pgmq', 'pg_catalog', 'information_schema')
UNION ALL SELECT 'schema ' || nspname FROM pg_catalog.pg_namespace
UNION ALL SELECT 'role ' || rolname FROM pg_catalog.pg_roles
UNION ALL SELECT 'canary row ' || x FROM canary.t
"""


def outside_objects(conn) -> set[str]:
    return {r[0] for r in conn.execute(OUTSIDE)}


def _clip(name: str, limit: int = 63) -> str:
    """An identifier as PostgreSQL truncates it (whole characters, at most `limit` bytes)."""
    out = ""
    for ch in name:
        if len((out + ch).encode()) > limit:
            break
        out += ch
    return out


def echoes(value: str) -> list[str]:
    """Spellings of the input an honest error message may contain."""
    # lower() as the server may do it: fully (ICU / libc locale) or ASCII only (C locale)
    lows = {value.lower(), "".join(c.lower() if c.isascii() else c for c in value)}
    derived = [f"{p}_{x}" for p in ("q", "a") for x in (*lows, value)]
    forms = [value, *lows, _clip(value), *derived, *(_clip(d) for d in derived), *(f"pgmq.{_clip(d)}" for d in derived)]
    return sorted({f for f in forms if f}, key=len, reverse=True)


def check_error(case: Case, value, err: psycopg.Error) -> None:
    state, message = err.sqlstate, err.diag.message_primary or ""
    assert state not in ("42601", "XX000"), f"{state} for {value!r}: {message}"
    assert "format()" not in message, f"the input reached a format string: {message}"
    assert state in case.allowed, f"{state} not allowed for {case.sql} with {value!r}: {message}"
    # Whatever is left once the echoed input is removed must not name an object of the input.
    rest = message
    if isinstance(value, str):
        for form in echoes(value):
            rest = rest.replace(form, "")
    assert "canary" not in rest, f"the error names an object from the input: {message}"


def roundtrip(conn, value: str) -> None:
    """A queue name that was accepted works like any other."""
    if scalar(conn, "SELECT pgmq.payload_type(%s::text)::text", (value,)) != "jsonb":
        return  # an existing typed queue (create is idempotent): jsonb sends are refused there
    body = {"probe": value}
    msg_id = scalar(conn, "SELECT pgmq.send(%s::text, %s)", (value, Jsonb(body)))
    # the queue may exist already (create is idempotent): pick the probe by its content
    got = conn.execute("SELECT msg_id, message FROM pgmq.read(%s::text, 30, 1, %s)",
                       (value, Jsonb(body))).fetchall()
    assert got == [(msg_id, body)]
    assert value in [r[0] for r in conn.execute("SELECT queue_name FROM pgmq.list_queues()")]
    assert scalar(conn, "SELECT queue_length FROM pgmq.metrics(%s::text)", (value,)) >= 1


def run_case(conn, case: Case, value, baseline: set[str]) -> None:
    param = Jsonb(value) if case.wrap_json else value
    accepted = False
    if case.in_transaction:
        tx = conn.transaction(force_rollback=True)
        tx.__enter__()
    try:
        try:
            with conn.transaction():
                conn.execute(case.sql, {"h": param})
            accepted = True
        except psycopg.Error as err:
            check_error(case, value, err)
        created = outside_objects(conn) - baseline
        allowed = {o for o in created if case.elsewhere and re.match(case.elsewhere, o)}
        assert created - allowed == set(), f"{case.sql} with {value!r} created {created - allowed}"
        assert baseline - outside_objects(conn) == set(), f"{case.sql} with {value!r} dropped objects"
        if accepted and case.roundtrip:
            roundtrip(conn, value)
    finally:
        if case.in_transaction:
            tx.__exit__(None, None, None)


@pytest.fixture
def hostile_db(conn):
    if any(c.needs == "partman" for c in CASES):
        if partman_available(conn):
            install_partman(conn)
    conn.execute(SETUP)
    return conn


FUZZ = settings(max_examples=40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fuzz(hostile_db, case):
    conn = hostile_db
    if case.needs == "partman" and not scalar(
            conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pg_partman'"):
        pytest.skip("pg_partman is not installed on the server")
    baseline = outside_objects(conn)

    @FUZZ
    @given(value=case.strategy)
    def fuzz(value):
        run_case(conn, case, value, baseline)

    fuzz()
    assert scalar(conn, "SELECT x FROM canary.t") == 42
    assert scalar(conn, "SELECT canary.f()") == 42


def test_every_routine_with_a_name_argument_is_fuzzed():
    """A new routine that takes a queue name, key, pattern, callback or filter needs a CASES line."""
    fuzzed = {m.group(1) for c in CASES for m in [re.search(r"pgmq\.(\w+)\(", c.sql)] if m}
    name_args = re.compile(r"\b(queue_name|q_name|table_name|routing_key|pattern|callback|"
                           r"dead_letter_queue|target_queue|queue_dlq|conditional|q_msg_\w*filter|exchange_name|e_name|"
                           r"e_key|e_routing_key|e_type|alternate_exchange|role_name|on_unroutable|"
                           r"stream_name|subscription_name)\b")
    want = {e.name for e in surface.current()
            if not e.name.startswith("_") and name_args.search(e.signature.identity)}
    assert sorted(want - fuzzed) == []


# ----------------------------------------------------------------------------- specific findings

def test_case_twins_conflict(conn):
    """Names that differ only in case would share a table: the second one is refused."""
    conn.execute("SELECT pgmq.create('Orders')")
    for twin in ("orders", "ORDERS", "oRDERS"):
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pgmq.create(%s::text)", (twin,))
        assert info.value.sqlstate == "42P07"
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 1


@pytest.mark.parametrize("name", ["é" * 24, "Ⱥ" * 24, "Ⱥ" * 20, "日本語" * 6, "🙂" * 12])
def test_multibyte_names_are_measured_in_bytes(conn, name):
    """An identifier is cut at 63 bytes, not characters: a multibyte name within 47 characters
    but over 47 bytes would share its (truncated) table with another queue. The table's
    spelling is lower(name), which some locales lengthen (U+023A: 2 bytes, its lower case 3)."""
    assert len(name) <= 47
    size = scalar(conn, "SELECT greatest(octet_length(%s::text), octet_length(lower(%s::text)))", (name, name))
    if size > 47:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pgmq.create(%s::text)", (name,))
        assert info.value.sqlstate == "42622"
        assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0
    else:  # e.g. U+023A * 20 under the C locale, where lower() keeps it: 40 bytes
        conn.execute("SELECT pgmq.create(%s::text)", (name,))
        assert scalar(conn, "SELECT to_regclass(format('pgmq.%%I', 'q_' || lower(%s::text))) IS NOT NULL", (name,))


def test_longest_multibyte_name_round_trips(conn):
    name = "é" * 23 + "x"  # 47 bytes: the longest allowed
    conn.execute("SELECT pgmq.create(%s::text)", (name,))
    conn.execute("SELECT pgmq.send(%s::text, '{\"n\": 1}')", (name,))
    assert conn.execute("SELECT message FROM pgmq.read(%s::text, 30, 1)", (name,)).fetchall() == [({"n": 1},)]
    tables = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relname LIKE %s",
                                         ("%" + name.lower() + "%",))}
    assert f"q_{name}" in tables and f"a_{name}" in tables and f"q_{name}_vt_idx" in tables


# ----------------------------------------------------------------------------- catalog settings

def pgmq_routines(conn):
    return conn.execute("""
        SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid), p.prosecdef, p.proconfig
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'pgmq'::regnamespace
           OR p.oid IN (SELECT d.objid FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
                          AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'pgmq'))
    """).fetchall()


def test_security_definer_only_as_declared_with_a_reason(conn):
    definers = {(e.name, e.signature.identity) for e in surface.current() if e.policy.security_definer}
    installed = {(name, strip_in(ident)) for name, ident, secdef, _ in pgmq_routines(conn) if secdef}
    assert sorted(installed - definers) == [], "SECURITY DEFINER without a definer_reason"


def test_search_path_pinned_unless_declared_unpinned(conn):
    declared = {(e.name, e.signature.identity): e.policy for e in surface.current()}
    for name, ident, _, config in pgmq_routines(conn):
        policy = declared.get((name, strip_in(ident)))
        assert policy is not None, f"pgmq.{name}({ident}) is not in docs/api.txt"
        if policy.unpinned_reason.strip():
            assert not any(c.startswith("search_path=") for c in config or ()), name
        else:
            assert "search_path=pg_catalog, pg_temp" in (config or ()), name


def test_standalone_script_leaves_the_installers_search_path(dsn, connect):
    """The scripts pin search_path while they run (SET LOCAL): the installer's is back after."""
    from pgmq_build import install

    conn = connect(autocommit=False)
    conn.execute("SET search_path = public, pg_temp")
    conn.execute("DROP EXTENSION pgmq CASCADE; DROP SCHEMA pgmq")
    conn.execute(install.standalone_script())
    assert scalar(conn, "SHOW search_path") == "pg_catalog, pg_temp"  # inside the transaction
    conn.commit()
    assert scalar(conn, "SHOW search_path") == "public, pg_temp"
    assert scalar(conn, "SELECT pgmq.validate_routing_key('a.b')") is True
