"""Drop-in fidelity with upstream PGMQ 1.13: a team swapping in this extension notices nothing.

1. Errors: where upstream raises, upstream's class (P0001 for its own RAISEs) and exact text.
2. Chatter: upstream's functions print upstream's NOTICEs and WARNINGs and no others.
3. Sessions: no call leaves a setting (search_path, role, any GUC) changed.
4. Relations: upstream's relations keep their kind and shape (differences are in README).

Error and notice cases run in a rolled-back transaction on a database with our extension and,
unless a case is one of our deliberate differences (README, "Differences from upstream PGMQ"),
also on a database with upstream's own 1.13 SQL, from the PyPI `pgmq` package (installed at run
time, never copied here): both must give the expected outcome, so the expectations are checked
against upstream itself.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgmq_build import surface
from pgmq_build.errors import DECLARED
from pgmq_build.lint.sqlast import Signature
from pgmq_build.manifest import MANIFEST
from tests.helpers import NO_PARTMAN, PARTMAN_SQL, scalar
from tests.helpers import partman_available as has_partman

Q = ("SELECT pgmq.create('jobs')",)
MSG = Q + ("SELECT pgmq.send('jobs', '{}')", "SELECT pgmq.send('jobs', '{}', '{\"x-pgmq-group\": \"g\"}'::jsonb)")
BOUND = Q + ("SELECT pgmq.bind_topic('a.*', 'jobs')",)
ANY = object()  # a result that is not compared

INVALID = "queue name contains invalid characters: $, ;, --, or \\'"  # upstream's: backslash, quote
TOO_LONG = "queue name is too long, maximum length is 47 characters"
NULL_IDENT = "null values cannot be formatted as an SQL identifier"
LIMIT = "LIMIT must not be negative"
PARTMAN = "pg_partman is required for partitioned queues"
EXISTS = 'relation "{}" already exists, skipping'
NO_TRIGGER = 'trigger "trigger_notify_queue_insert_listeners" for relation "pgmq.q_jobs" does not exist, skipping'
DROP_WARNING = ("WARNING", "drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. "
                           "Use drop_queue(queue_name) instead")
DETACH_WARNING = ("WARNING", "detach_archive(queue_name) is deprecated and is a no-op. It will be removed in PGMQ "
                             "v2.0. Archive tables are no longer member objects.")


def vt_null(table: str = "q_jobs") -> str:
    return f'null value in column "vt" of relation "{table}" violates not-null constraint'


@dataclass(frozen=True)
class Case:
    call: str
    outcome: tuple            # (SQLSTATE, message) of an error, or ("ok", first value | ANY)
    notices: tuple | None = ()  # exact (severity, message) list; None: not compared
    setup: tuple = Q
    key: str = ""             # the pgmq_build/errors.py entry it exercises
    upstream: bool = True     # upstream gives the same outcome and notices
    partman: bool = False     # pg_partman is installed first

    @property
    def id(self) -> str:
        return re.sub(r"\W+", "_", self.call.removeprefix("SELECT ").removeprefix("* FROM "))[:70]


def err(call, state, message, key="", setup=Q, upstream=True, partman=False, notices=()) -> Case:
    return Case(call, (state, message), notices, setup, key, upstream, partman)


def ok(call, result=ANY, notices=(), setup=Q, upstream=True, partman=False, key="") -> Case:
    return Case(call, ("ok", result), notices, setup, key, upstream, partman)


# ----------------------------------------------------------------------------- 1. errors

# Every upstream function taking a queue name checks it with format_table_name first.
NAMED = [
    "SELECT pgmq.create({q})", "SELECT pgmq.create_non_partitioned({q})", "SELECT pgmq.create_unlogged({q})",
    "SELECT pgmq.drop_queue({q})", "SELECT pgmq.drop_queue({q}, false)", "SELECT pgmq.purge_queue({q})",
    "SELECT pgmq.detach_archive({q})", "SELECT pgmq.format_table_name({q}, 'a')",
    "SELECT * FROM pgmq.send({q}, '{{}}')", "SELECT * FROM pgmq.send({q}, '{{}}', '{{}}'::jsonb)",
    "SELECT * FROM pgmq.send({q}, '{{}}', 1)", "SELECT * FROM pgmq.send({q}, '{{}}', now())",
    "SELECT * FROM pgmq.send({q}, '{{}}', '{{}}'::jsonb, 1)",
    "SELECT * FROM pgmq.send({q}, '{{}}', '{{\"x-pgmq-dedup-id\": \"d\"}}'::jsonb, now())",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb])",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb], ARRAY['{{}}'::jsonb])",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb], 1)",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb], now())",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb], ARRAY['{{}}'::jsonb], 1)",
    "SELECT * FROM pgmq.send_batch({q}, ARRAY['{{}}'::jsonb], ARRAY['{{}}'::jsonb], now())",
    "SELECT * FROM pgmq._send_batch({q}, ARRAY['{{}}'::jsonb], NULL, now())",
    "SELECT * FROM pgmq.read({q}, 30, 1)", "SELECT * FROM pgmq.read_with_poll({q}, 30, 1, 1, 10)",
    "SELECT * FROM pgmq.pop({q})",
    "SELECT * FROM pgmq.read_grouped({q}, 30, 1)", "SELECT * FROM pgmq.read_grouped_with_poll({q}, 30, 1, 1, 10)",
    "SELECT * FROM pgmq.read_grouped_rr({q}, 30, 1)",
    "SELECT * FROM pgmq.read_grouped_rr_with_poll({q}, 30, 1, 1, 10)",
    "SELECT * FROM pgmq.read_grouped_head({q}, 30, 1)",
    "SELECT * FROM pgmq.read_grouped_head_with_poll({q}, 30, 1, 1, 10)",
    "SELECT pgmq.delete({q}, 1::bigint)", "SELECT * FROM pgmq.delete({q}, ARRAY[1::bigint])",
    "SELECT pgmq.archive({q}, 1::bigint)", "SELECT * FROM pgmq.archive({q}, ARRAY[1::bigint])",
    "SELECT * FROM pgmq.set_vt({q}, 1::bigint, 10)", "SELECT * FROM pgmq.set_vt({q}, 1::bigint, now())",
    "SELECT * FROM pgmq.set_vt({q}, ARRAY[1::bigint], 10)", "SELECT * FROM pgmq.set_vt({q}, ARRAY[1::bigint], now())",
    "SELECT * FROM pgmq.metrics({q})", "SELECT pgmq.enable_notify_insert({q})",
    "SELECT pgmq.disable_notify_insert({q})", "SELECT pgmq.create_fifo_index({q})",
    "SELECT pgmq._create_fifo_index_if_not_exists({q})", "SELECT pgmq.convert_archive_partitioned({q})",
    "SELECT pgmq.create_partitioned({q})",
]
# ...and PostgreSQL's format('%I', NULL) fails on a NULL one (upstream's error for most of them)
NULL_NAMED = [c for c in NAMED if not re.search(r"drop_queue|detach_archive|format_table_name|enable_notify|"
                                                r"convert_archive|create_partitioned|_with_poll", c)]

ERRORS: list[Case] = [
    *(err(c.format(q=f"'{bad}'"), "P0001", INVALID, "invalid_characters")
      for c in NAMED for bad in ("a$b", "a''b")),
    *(err(c.format(q=f"'{bad}'"), "P0001", INVALID, "invalid_characters")
      for c in NAMED[8:9] for bad in ("a;b", "a--b", "x''; DROP TABLE pgmq.meta; --")),
    *(err(c.format(q=f"'{'x' * 48}'"), "P0001", TOO_LONG, "name_too_long")
      for c in ("SELECT pgmq.create({q})", "SELECT pgmq.create_non_partitioned({q})",
                "SELECT pgmq.create_unlogged({q})", "SELECT pgmq.validate_queue_name({q})")),
    err(f"SELECT pgmq.create_partitioned('{'x' * 48}')", "P0001", TOO_LONG, "name_too_long", partman=True),
    *(err(c.format(q="NULL"), "22004", NULL_IDENT, "null_identifier") for c in NULL_NAMED),
    # batches
    *(err(f"SELECT * FROM pgmq.{fn}({arg}{msgs})", "P0001", "msgs cannot be NULL or empty", "msgs_empty")
      for fn, arg in (("send_batch", "'jobs', "), ("send_batch_topic", "'a.b', "))
      for msgs in ("NULL", "'{}'::jsonb[]", "ARRAY[]::jsonb[], ARRAY[]::jsonb[], 0")),
    err("SELECT pgmq._validate_batch_params(NULL, NULL)", "P0001", "msgs cannot be NULL or empty", "msgs_empty"),
    *(err(f"SELECT * FROM pgmq.{fn}({arg}ARRAY['{{}}'::jsonb], {hdrs})", "P0001",
          f"headers array length ({n}) must match msgs array length (1)", "headers_length")
      for fn, arg in (("send_batch", "'jobs', "), ("send_batch_topic", "'a.b', "))
      for hdrs, n in (("'{}'::jsonb[]", 0), ("ARRAY['{}'::jsonb, '{}'::jsonb], now()", 2))),
    # reads
    *(err(f"SELECT * FROM pgmq.{fn}('jobs', 30, -1)", "2201W", LIMIT, "limit_negative", setup=MSG)
      for fn in ("read", "read_grouped", "read_grouped_head")),
    err("SELECT * FROM pgmq.read_grouped_head('jobs', 30, -1)", "2201W", LIMIT, "limit_negative"),
    err("SELECT * FROM pgmq.pop('jobs', -1)", "2201W", LIMIT, "limit_negative", setup=MSG),
    *(err(f"SELECT * FROM pgmq.{fn}('nope', 30, 1)", "42P01", 'relation "pgmq.q_nope" does not exist')
      for fn in ("read", "read_grouped", "read_grouped_rr", "read_grouped_head")),
    *(err(f"SELECT * FROM pgmq.{c}", "42P01", 'relation "pgmq.q_nope" does not exist')
      for c in ("send('nope', '{}')", "pop('nope')", "purge_queue('nope')", "metrics('nope')",
                "set_vt('nope', 1::bigint, 10)", "delete('nope', 1::bigint)", "archive('nope', 1::bigint)",
                "create_fifo_index('nope')")),
    # a NULL visibility time meets the table's NOT NULL
    *(err(f"SELECT * FROM pgmq.{c}", "23502", vt_null(), setup=MSG)
      for c in ("send('jobs', '{}', NULL::integer)", "send('jobs', '{}', NULL::timestamptz)",
                "send('jobs', '{}', NULL::jsonb, NULL::integer)", "send_batch('jobs', ARRAY['{}'::jsonb], NULL::integer)",
                "set_vt('jobs', 1::bigint, NULL::timestamptz)", "set_vt('jobs', ARRAY[1::bigint], NULL::integer)")),
    err("SELECT pgmq.send_topic('a.b', '{}', NULL::integer)", "23502", vt_null(), setup=BOUND),
    ok("SELECT count(*) FROM pgmq.set_vt('jobs', 9::bigint, NULL::timestamptz)", 0),
    # notifications
    err("SELECT pgmq.enable_notify_insert('jobs', -1)", "P0001", "throttle_interval_ms must be non-negative",
        "throttle_negative"),
    err("SELECT pgmq.update_notify_insert('jobs', -1)", "P0001", "throttle_interval_ms must be non-negative, got: -1",
        "throttle_negative_got"),
    err("SELECT pgmq.enable_notify_insert('nope')", "P0001",
        'Queue "nope" does not exist. Create it first using pgmq.create()', "notify_queue_missing"),
    err("SELECT pgmq.update_notify_insert('nope', 5)", "P0001",
        'Queue "nope" does not exist. Create the queue first using pgmq.create()', "queue_missing"),
    err("SELECT pgmq.update_notify_insert(NULL, 5)", "P0001",
        'Queue "<NULL>" does not exist. Create the queue first using pgmq.create()', "queue_missing"),
    err("SELECT pgmq.update_notify_insert('jobs', 5)", "P0001",
        'Queue "jobs" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()',
        "notify_not_enabled"),
    err("SELECT pgmq.update_notify_insert('jobs', NULL)", "P0001",
        'Queue "jobs" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()',
        "notify_not_enabled"),
    err("SELECT pgmq.enable_notify_insert('jobs', NULL)", "23502",
        'null value in column "throttle_interval_ms" of relation "notify_insert_throttle" violates not-null '
        "constraint", notices=(("NOTICE", NO_TRIGGER),)),
    # topics
    err("SELECT pgmq.bind_topic('a.b', 'nope')", "P0001",
        'Queue "nope" does not exist. Create the queue first using pgmq.create()', "queue_missing"),
    *(err(f"SELECT pgmq.{fn}('a.b', {q})", "P0001", "queue_name cannot be NULL or empty", "queue_name_empty")
      for fn in ("bind_topic", "unbind_topic") for q in ("NULL", "''")),
    *(err(f"SELECT pgmq.unbind_topic({p}, 'jobs')", "P0001", "pattern cannot be NULL or empty", "pattern_empty")
      for p in ("NULL", "''")),
    *(err(f"SELECT pgmq.send_topic('a.b', NULL{rest})", "P0001", "msg cannot be NULL", "msg_null")
      for rest in ("", ", 0", ", NULL, 0")),
    *(err(f"SELECT pgmq.send_topic('a.b', '{{}}', {rest})", "P0001", "delay cannot be negative, got: -1",
          "delay_negative_got") for rest in ("-1", "NULL, -1")),
    # partitioned queues
    err("SELECT pgmq.create_partitioned('p')", "P0001", PARTMAN, "partman_required"),
    err("SELECT pgmq.create_partitioned('p', premake => 0)", "P0001", PARTMAN, "partman_required"),
    err("SELECT pgmq._ensure_pg_partman_installed()", "P0001", PARTMAN, "partman_required"),
    err("SELECT pgmq.create_partitioned('p', premake => 0)", "P0001", "premake must be at least 1, got 0",
        "premake", partman=True),
    err("SELECT pgmq.create_partitioned('p', '10', '100', -2)", "P0001", "premake must be at least 1, got -2",
        "premake", partman=True),
]

KEYS = [  # routing key, upstream's message, errors.py entry
    (None, "routing_key cannot be NULL or empty", "routing_key_empty"),
    ("", "routing_key cannot be NULL or empty", "routing_key_empty"),
    ("k" * 256, "routing_key length cannot exceed 255 characters, got 256 characters", "routing_key_length"),
    ("a b", "routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are "
            "allowed. Got: a b", "routing_key_chars"),
    ("a.*", "routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are "
            "allowed. Got: a.*", "routing_key_chars"),
    (".a", "routing_key cannot start with a dot. Got: .a", "routing_key_leading_dot"),
    ("a.", "routing_key cannot end with a dot. Got: a.", "routing_key_trailing_dot"),
    ("a..b", "routing_key cannot contain consecutive dots. Got: a..b", "routing_key_double_dot"),
]
PATTERNS = [
    (None, "pattern cannot be NULL or empty", "pattern_empty"),
    ("", "pattern cannot be NULL or empty", "pattern_empty"),
    ("p" * 256, "pattern length cannot exceed 255 characters, got 256 characters", "pattern_length"),
    ("a b", "pattern contains invalid characters. Only alphanumeric, dots, hyphens, underscores, *, and # are "
            "allowed. Got: a b", "pattern_chars"),
    (".a", "pattern cannot start with a dot. Got: .a", "pattern_leading_dot"),
    ("a.", "pattern cannot end with a dot. Got: a.", "pattern_trailing_dot"),
    ("a..b", "pattern cannot contain consecutive dots. Got: a..b", "pattern_double_dot"),
    ("a.**", "pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: a.**",
     "pattern_stars"),
    ("a.##", "pattern cannot contain consecutive hashes (##). A single # already matches zero or more segments. "
             "Got: a.##", "pattern_hashes"),
    ("a.*#", "pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: a.*#",
     "pattern_adjacent"),
    ("a.#*", "pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: a.#*",
     "pattern_adjacent"),
]


def _lit(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


ERRORS += [
    err(call.format(k=_lit(key)), "P0001", message, entry, setup=BOUND)
    for key, message, entry in KEYS
    for call in ("SELECT pgmq.validate_routing_key({k})", "SELECT * FROM pgmq.test_routing({k})",
                 "SELECT pgmq.send_topic({k}, '{{}}')", "SELECT pgmq.send_topic({k}, '{{}}', 0)",
                 "SELECT pgmq.send_topic({k}, '{{}}', NULL, 0)",
                 "SELECT * FROM pgmq.send_batch_topic({k}, ARRAY['{{}}'::jsonb])",
                 "SELECT * FROM pgmq.send_batch_topic({k}, ARRAY['{{}}'::jsonb], NULL, now())")
] + [
    err(call.format(p=_lit(pattern)), "P0001", message, entry)
    for pattern, message, entry in PATTERNS
    for call in ("SELECT pgmq.validate_topic_pattern({p})", "SELECT pgmq.bind_topic({p}, 'jobs')")
]

# Our deliberate differences (README): our SQLSTATE where upstream accepts the input, P0001 with
# our text where upstream fails inside pg_partman. Upstream is not asked.
DIFFERENT: list[Case] = [
    *(err(c.format(q="''"), "42602", "queue name cannot be NULL or empty", "queue_name_empty_refused",
          upstream=False)
      for c in ("SELECT pgmq.create({q})", "SELECT pgmq.create_unlogged({q})", "SELECT pgmq.validate_queue_name({q})",
                "SELECT pgmq.validate_queue_name(NULL)")),
    err("SELECT pgmq.create_partitioned('')", "42602", "queue name cannot be NULL or empty",
        "queue_name_empty_refused", upstream=False, partman=True),
    err("SELECT pgmq.create(repeat(chr(233), 24))", "42622", "queue name is too long, maximum length is 47 bytes",
        "queue_name_bytes_refused", upstream=False),
    *(err(c.format(q=f"'a' || chr({code}) || 'b'"), "42602", "queue name cannot contain control characters",
          "name_control_refused", upstream=False)
      for c in ("SELECT pgmq.create({q})", "SELECT pgmq.create_unlogged({q})", "SELECT pgmq.validate_queue_name({q})")
      for code in (27, 10, 155)),
    err("SELECT pgmq.create_partitioned('a' || chr(13))", "42602", "queue name cannot contain control characters",
        "name_control_refused", upstream=False, partman=True),
    err("SELECT pgmq.create('Jobs')", "42P07", 'queue "Jobs" conflicts with existing queue "jobs"',
        "queue_name_case_clash", upstream=False),
    err("SELECT pgmq.create_partitioned('Jobs')", "42P07", 'queue "Jobs" conflicts with existing queue "jobs"',
        "queue_name_case_clash", upstream=False, setup=Q + ("SELECT pgmq.drop_queue('jobs')",
                                                            "SELECT pgmq.create_partitioned('jobs')"), partman=True),
    *(err(c.format(q="NULL"), "22004", NULL_IDENT, "null_identifier", upstream=False)
      for c in ("SELECT pgmq.drop_queue({q})", "SELECT pgmq.drop_queue({q}, true)", "SELECT pgmq.detach_archive({q})",
                "SELECT pgmq.format_table_name({q}, 'q')", "SELECT pgmq.enable_notify_insert({q})")),
    *(err(f"SELECT * FROM pgmq.{c}", "22023", "delay cannot be negative", "delay_negative_refused", upstream=False)
      for c in ("send('jobs', '{}', -1)", "send('jobs', '{}', NULL, -1)", "send_batch('jobs', ARRAY['{}'::jsonb], -1)",
                "send_batch_topic('a.b', ARRAY['{}'::jsonb], -1)")),
    *(err(f"SELECT * FROM pgmq.{fn}('jobs', 30, NULL)", "22004", "qty cannot be NULL", "qty_null_refused",
          upstream=False) for fn in ("read_grouped", "read_grouped_rr", "read_grouped_head")),
    err("SELECT * FROM pgmq.read_grouped_rr('jobs', 30, -1)", "2201W", LIMIT, "limit_negative", upstream=False,
        setup=MSG),
    *(err(f"SELECT * FROM pgmq.{fn}('jobs', 30, 1, -1, 10)", "22023", "max_poll_seconds must be non-negative",
          "poll_seconds_refused", upstream=False)
      for fn in ("read_with_poll", "read_grouped_with_poll", "read_grouped_rr_with_poll",
                 "read_grouped_head_with_poll")),
    *(err(f"SELECT * FROM pgmq.{fn}('jobs', 30, 1, 0, 0)", "22023", "poll_interval_ms must be positive",
          "poll_interval_refused", upstream=False)
      for fn in ("read_with_poll", "read_grouped_with_poll", "read_grouped_rr_with_poll",
                 "read_grouped_head_with_poll")),
    # stand-ins: upstream fails inside pg_partman, with P0001 too
    err("SELECT pgmq.create_partitioned('a.b')", "P0001", 'partitioned queue names cannot contain "."',
        "partition_name_dot", upstream=False, partman=True),
    err("SELECT pgmq.convert_archive_partitioned('a.b')", "P0001", 'partitioned queue names cannot contain "."',
        "partition_name_dot", upstream=False, partman=True, setup=("SELECT pgmq.create('a.b')",)),
    err("SELECT pgmq.create_partitioned('p', '')", "P0001", "partition_interval cannot be NULL or empty",
        "partition_interval_empty", upstream=False, partman=True),
    err("SELECT pgmq.create_partitioned('p', '0')", "P0001",
        "partition_interval must be a positive number of messages, got 0", "partition_interval_positive",
        upstream=False, partman=True),
    err("SELECT pgmq.create_partitioned('p', 'abc')", "P0001",
        "partition_interval must be a number of messages or a time interval, got abc", "partition_interval_invalid",
        upstream=False, partman=True),
    err("SELECT pgmq.create_partitioned('p', '10000', '7 days')", "P0001",
        "retention_interval must be a number of messages when partition_interval is one, got 7 days",
        "retention_not_number", upstream=False, partman=True),
    err("SELECT pgmq.convert_archive_partitioned('jobs', '1 day', 'a week')", "P0001",
        "retention_interval must be a time interval when partition_interval is one, got a week",
        "retention_not_interval", upstream=False, partman=True),
    err("SELECT pgmq.create_partitioned('jobs')", "P0001", 'queue "jobs" already exists and is not partitioned',
        "not_partitioned", upstream=False, partman=True),
    err("SELECT pgmq.create_partitioned('p', '1 day', '7 days')", "P0001",
        'queue "p" is already partitioned by RANGE (msg_id), not by enqueued_at', "partitioned_differently",
        upstream=False, partman=True, setup=("SELECT pgmq.create_partitioned('p')",)),
    err("SELECT pgmq.create_partitioned('p', premake => NULL)", "P0001", "premake must be at least 1, got <NULL>",
        "premake", upstream=False, partman=True),  # upstream: a syntax error (42601) from its own format()
    err("SELECT pgmq.convert_archive_partitioned('jobs')", "P0001", PARTMAN, "partman_required",
        upstream=False),  # upstream: 22004 from format() without pg_partman's schema
    # what our own functions raise for the same checks: our SQLSTATEs
    err("SELECT pgmq.enable_notify_msg_id('a$b')", "42602", INVALID, "invalid_characters", upstream=False),
    err("CALL pgmq.create_queue('{}')".format("x" * 48), "42622", TOO_LONG, "name_too_long", upstream=False),
    err("SELECT pgmq._validate_routing_key('a..b')", "22023", "routing_key cannot contain consecutive dots. Got: a..b",
        "routing_key_double_dot", upstream=False),
    err("SELECT pgmq._validate_topic_pattern('a.**')", "22023",
        "pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: a.**", "pattern_stars",
        upstream=False),
    err("SELECT pgmq.run_partition_maintenance('jobs')", "42704", PARTMAN, "partman_required", upstream=False),
    err("SELECT * FROM pgmq.publish('pgmq.topic', 'a.b', NULL)", "22004", "msg cannot be NULL", "msg_null",
        upstream=False),
]

# ----------------------------------------------------------------------------- 2. notices

CREATE_AGAIN = tuple(("NOTICE", EXISTS.format(r)) for r in ("q_jobs", "a_jobs", "q_jobs_vt_idx", "archived_at_idx_jobs"))
PART_AGAIN = tuple(("NOTICE", EXISTS.format(r)) for r in ("q_p", "q_p_part_idx", "a_p", "archived_at_idx_p"))

NOTICES: list[Case] = [
    *(ok(f"SELECT pgmq.{fn}('jobs')", notices=CREATE_AGAIN, key="relation_exists_skipping")
      for fn in ("create", "create_non_partitioned", "create_unlogged")),
    *(ok(f"SELECT pgmq.{fn}('fresh')", setup=()) for fn in ("create", "create_non_partitioned", "create_unlogged")),
    ok("SELECT pgmq.drop_queue('nope')", False, (("NOTICE", "pgmq queue `nope` does not exist"),), key="drop_missing"),
    ok("SELECT pgmq.drop_queue('jobs')", True),
    ok("SELECT pgmq.drop_queue('nope', true)", True, (DROP_WARNING, ("NOTICE", "pgmq queue `nope` does not exist")),
       key="drop_deprecated"),
    ok("SELECT pgmq.drop_queue('jobs', false)", True, (DROP_WARNING,), key="drop_deprecated"),
    ok("SELECT pgmq.detach_archive('jobs')", notices=(DETACH_WARNING,), key="detach_deprecated"),
    ok("SELECT pgmq.enable_notify_insert('jobs')", notices=(("NOTICE", NO_TRIGGER),)),
    ok("SELECT pgmq.enable_notify_insert('jobs', 10)", setup=Q + ("SELECT pgmq.enable_notify_insert('jobs')",)),
    ok("SELECT pgmq.disable_notify_insert('jobs')", notices=(("NOTICE", NO_TRIGGER),)),
    ok("SELECT pgmq.update_notify_insert('jobs', 5)", setup=Q + ("SELECT pgmq.enable_notify_insert('jobs')",)),
    ok("SELECT pgmq.create_fifo_index('jobs')"),
    ok("SELECT pgmq.create_fifo_index('jobs')", notices=(("NOTICE", EXISTS.format("q_jobs_fifo_idx")),),
       setup=Q + ("SELECT pgmq.create_fifo_index('jobs')",)),
    ok("SELECT pgmq.create_fifo_indexes_all()", notices=(("NOTICE", EXISTS.format("q_jobs_fifo_idx")),),
       setup=Q + ("SELECT pgmq.create_fifo_indexes_all()",)),
    ok("SELECT pgmq.send_topic('x.y.z', '{}')", 0, setup=BOUND),
    ok("SELECT pgmq.send_topic('a.b', '{}')", 1, setup=BOUND),
    ok("SELECT count(*) FROM pgmq.send_batch_topic('x.y.z', ARRAY['{}'::jsonb])", 0, setup=BOUND),
    ok("SELECT count(*) FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], 0)", 1,
       setup=BOUND),
    ok("SELECT pgmq.bind_topic('a.*', 'jobs')", setup=BOUND),
    ok("SELECT pgmq.unbind_topic('a.*', 'jobs')", True, setup=BOUND),
    ok("SELECT pgmq.create_partitioned('p')", partman=True),
    ok("SELECT pgmq.create_partitioned('p', '1 day', '7 days')", partman=True),
    ok("SELECT pgmq.drop_queue('p')", True, setup=("SELECT pgmq.create_partitioned('p')",), partman=True),
    ok("SELECT pgmq.convert_archive_partitioned('jobs')", partman=True),
    ok("SELECT pgmq.convert_archive_partitioned('nope')", notices=(("NOTICE", "Table a_nopes does not exists"),),
       partman=True, key="archive_missing"),
    ok("SELECT pgmq.convert_archive_partitioned('jobs')", notices=(("NOTICE", "Table a_jobss is already partitioned"),),
       setup=Q + ("SELECT pgmq.convert_archive_partitioned('jobs')",), partman=True, key="archive_partitioned"),
    ok("SELECT pgmq._ensure_pg_partman_installed()", partman=True),
    # our difference: create_partitioned is idempotent (upstream's second call fails in pg_partman),
    # printing upstream's NOTICE for each object upstream makes IF NOT EXISTS
    ok("SELECT pgmq.create_partitioned('p')", notices=PART_AGAIN, setup=("SELECT pgmq.create_partitioned('p')",),
       partman=True, upstream=False),
]

# Every other upstream function, on its happy path: nothing printed, nothing raised.
SILENT = [
    "pgmq.purge_queue('jobs')", "count(*) FROM pgmq.list_queues()", "pgmq.acquire_queue_lock('jobs')",
    "pgmq.validate_queue_name('jobs')", "pgmq.format_table_name('Jobs', 'q')", "pgmq._extension_exists('plpgsql')",
    "pgmq._belongs_to_pgmq('q_jobs')", "pgmq._get_partition_col('1 day')", "pgmq._get_pg_partman_schema()",
    "pgmq._get_pg_partman_major_version()",
    "* FROM pgmq.send('jobs', '{}')", "* FROM pgmq.send('jobs', '{}', '{}'::jsonb)", "* FROM pgmq.send('jobs', '{}', 0)",
    "* FROM pgmq.send('jobs', '{}', now())", "* FROM pgmq.send('jobs', '{}', '{}'::jsonb, 0)",
    "* FROM pgmq.send('jobs', '{}', '{}'::jsonb, now())",
    "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb])",
    "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb])",
    "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], 0)", "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], now())",
    "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], 0)",
    "* FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], now())",
    "pgmq._validate_batch_params(ARRAY['{}'::jsonb], NULL)",
    "* FROM pgmq._send_batch('jobs', ARRAY['{}'::jsonb], NULL, now())",
    "count(*) FROM pgmq.read('jobs', 30, 5)", "count(*) FROM pgmq.read('jobs', 30, 5, '{\"a\": 1}')",
    "count(*) FROM pgmq.read_with_poll('jobs', 30, 5, 1, 10)", "count(*) FROM pgmq.pop('jobs')",
    "count(*) FROM pgmq.pop('jobs', 5)",
    "count(*) FROM pgmq.read_grouped('jobs', 30, 5)", "count(*) FROM pgmq.read_grouped_with_poll('jobs', 30, 5, 1, 10)",
    "count(*) FROM pgmq.read_grouped_rr('jobs', 30, 5)",
    "count(*) FROM pgmq.read_grouped_rr_with_poll('jobs', 30, 5, 1, 10)",
    "count(*) FROM pgmq.read_grouped_head('jobs', 30, 5)",
    "count(*) FROM pgmq.read_grouped_head_with_poll('jobs', 30, 5, 1, 10)",
    "pgmq.delete('jobs', 1::bigint)", "* FROM pgmq.delete('jobs', ARRAY[1::bigint, 9])",
    "pgmq.archive('jobs', 1::bigint)", "* FROM pgmq.archive('jobs', ARRAY[1::bigint, 9])",
    "count(*) FROM pgmq.set_vt('jobs', 1::bigint, 10)", "count(*) FROM pgmq.set_vt('jobs', 1::bigint, now())",
    "count(*) FROM pgmq.set_vt('jobs', ARRAY[1::bigint], 10)", "count(*) FROM pgmq.set_vt('jobs', ARRAY[1::bigint], now())",
    "queue_length FROM pgmq.metrics('jobs')", "count(*) FROM pgmq.metrics_all()",
    "count(*) FROM pgmq.list_notify_insert_throttles()", "pgmq._create_fifo_index_if_not_exists('jobs')",
    "count(*) FROM pgmq.list_topic_bindings()", "count(*) FROM pgmq.list_topic_bindings('jobs')",
    "count(*) FROM pgmq.test_routing('a.b')", "pgmq.validate_routing_key('a.b')", "pgmq.validate_topic_pattern('a.#')",
    "pgmq.send_topic('a.b', '{}', 0)", "pgmq.send_topic('a.b', '{}', '{}', 0)",
    "count(*) FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], 0)",
    "count(*) FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb])",
    "count(*) FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], now())",
    "count(*) FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], now())",
]
NOTICES += [ok("SELECT " + call, setup=BOUND + MSG[1:]) for call in SILENT]


# ----------------------------------------------------------------------------- the runner

def upstream_sql() -> str:
    pgmq = pytest.importorskip("pgmq")  # upstream's Python client ships its SQL
    return (Path(pgmq.__file__).parent / "sql" / "pgmq.sql").read_text()


def _database(pg_cluster, install) -> Iterator[psycopg.Connection]:
    name = f"fidelity_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    conn = psycopg.connect(pg_cluster.dsn(name), autocommit=True)
    try:
        conn.execute(install)
        yield conn
    finally:
        conn.close()
        with psycopg.connect(pg_cluster.dsn(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def ours(pg_cluster):
    yield from _database(pg_cluster, "CREATE EXTENSION pgmq")


@pytest.fixture(scope="module")
def upstream(pg_cluster):
    yield from _database(pg_cluster, upstream_sql())


def run(conn: psycopg.Connection, case: Case) -> tuple[tuple, list]:
    """(outcome, notices) of a case's call, in a transaction that is rolled back."""
    seen: list[tuple[str, str]] = []

    def handler(diag):
        seen.append((diag.severity_nonlocalized, diag.message_primary))

    conn.add_notice_handler(handler)
    try:
        with conn.transaction(force_rollback=True):
            for sql in (PARTMAN_SQL if case.partman else ()) + case.setup:
                conn.execute(sql)
            seen.clear()
            try:
                with conn.transaction():
                    row = conn.execute(case.call).fetchone()
                outcome = ("ok", row[0] if row else None)
            except psycopg.Error as exc:
                outcome = (exc.sqlstate, exc.diag.message_primary)
    finally:
        conn.remove_notice_handler(handler)
    return outcome, seen


def check(conn, case: Case, who: str) -> None:
    outcome, seen = run(conn, case)
    expected = case.outcome if case.outcome[1] is not ANY else ("ok", outcome[1])
    assert outcome == expected, f"{who}: {case.call}"
    if case.notices is not None:
        assert seen == list(case.notices), f"{who}: {case.call}"


@pytest.fixture(scope="module")
def partman_available(ours) -> bool:
    return has_partman(ours)


@pytest.mark.parametrize("case", ERRORS + DIFFERENT + NOTICES, ids=lambda c: c.id)
def test_same_as_upstream(ours, upstream, partman_available, case):
    if case.partman and not partman_available:
        pytest.skip(NO_PARTMAN)
    check(ours, case, "ours")
    if case.upstream:
        check(upstream, case, "upstream")


def test_every_declared_message_is_exercised():
    exercised = {c.key for c in ERRORS + DIFFERENT + NOTICES}
    # tested elsewhere: need a second role (test_access.py, test_escalation.py), needs pg_partman 3
    elsewhere = {"queue_of_other_role", "not_queue_owner", "partitioned_untrusted", "partman_too_old"}
    assert set(DECLARED) - exercised == elsewhere


def test_upstreams_catalog_is_the_contract(upstream):
    """manifest.UPSTREAM_CONTRACT is what upstream's install holds, as PostgreSQL prints it."""
    with upstream.transaction():
        upstream.execute("SET LOCAL search_path = pg_catalog")
        rows = upstream.execute("""
            SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.prokind
            FROM pg_proc p WHERE p.pronamespace = 'pgmq'::regnamespace""").fetchall()
    got = sorted(Signature("pgmq", name, "function", (), result, arguments=args).line
                 for name, args, result, kind in rows if kind == "f")
    assert len(got) == len(rows) and got == sorted(MANIFEST.contract)


def test_every_upstream_function_is_exercised():
    called = set(re.findall(r"pgmq\.(\w+)\(", " ".join(c.call for c in ERRORS + DIFFERENT + NOTICES)))
    upstream = {e.name for e in surface.current() if e.upstream}
    assert upstream - called == {"notify_queue_listeners"}  # a trigger: see test_notify.py


def test_upstream_cases_reach_upstream_functions_only():
    """A case upstream is asked about calls upstream's functions (and no overload of ours)."""
    ours_only = {e.name for e in surface.current() if not e.upstream}
    for case in ERRORS + NOTICES:
        if case.upstream:
            assert not set(re.findall(r"pgmq\.(\w+)\(", case.call)) & (ours_only - {"create", "drop_queue",
                                                                                       "send_topic"}), case.call


# ----------------------------------------------------------------------------- 3. sessions

SETTINGS = "SELECT name, setting FROM pg_catalog.pg_settings ORDER BY name"
CALLER_PATH = 'public, "$user", pg_temp'  # a search_path of the caller's own (not the default)


def settings(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return conn.execute(SETTINGS).fetchall()


# pg_partman 4 sets search_path at session level; these call it (create_partitioned.sql.j2)
PARTMAN_CALLS = [
    ("SELECT pgmq.create_partitioned('{n}')", ()),
    ("SELECT pgmq.create_partitioned('{n}', '1 day', '7 days', 2)", ()),
    ("SELECT pgmq.convert_archive_partitioned('{n}')", ("SELECT pgmq.create('{n}')",)),
    ("SELECT pgmq.convert_archive_partitioned('{n}', '1 day', '7 days')", ("SELECT pgmq.create('{n}')",)),
    ("SELECT pgmq.run_partition_maintenance('{n}')", ("SELECT pgmq.create_partitioned('{n}')",)),
    ("SELECT pgmq.run_partition_maintenance()", ("SELECT pgmq.create_partitioned('{n}')",)),
]


@pytest.mark.parametrize("call,prepare", PARTMAN_CALLS, ids=[c for c, _ in PARTMAN_CALLS])
def test_partitioned_routines_keep_the_callers_search_path(conn, partman, call, prepare):
    conn.execute(f"SET search_path = {CALLER_PATH}")
    before = settings(conn)
    for name in ("auto", "tx"):
        for sql in prepare:
            conn.execute(sql.format(n=name))
        assert settings(conn) == before
        if name == "auto":
            conn.execute(call.format(n=name))
        else:
            with conn.transaction():
                conn.execute(call.format(n=name))
                assert settings(conn) == before, "in the caller's transaction"
        assert settings(conn) == before, "after the call (and its commit)"
    assert scalar(conn, "SHOW search_path") == CALLER_PATH


def test_a_rolled_back_call_leaves_the_search_path(conn, partman):
    conn.execute(f"SET search_path = {CALLER_PATH}")
    before = settings(conn)
    with pytest.raises(psycopg.errors.RaiseException), conn.transaction():
        conn.execute("SELECT pgmq.create_partitioned('rb')")
        conn.execute("SELECT pgmq.create_partitioned('rb', '1 day', '7 days')")  # partitioned by msg_id
    assert settings(conn) == before


def test_set_local_is_kept_as_upstream_keeps_it(conn, partman, pg_cluster):
    """Under SET LOCAL, the caller's value stays in force in the transaction and, as with upstream
    (whose unpinned functions let pg_partman restore the value it found at session level), after
    COMMIT: the session value under a SET LOCAL cannot be read back from SQL."""
    def scenario(c):
        c.execute(f"SET search_path = {CALLER_PATH}")
        with c.transaction():
            c.execute("SET LOCAL search_path = pg_catalog, public")
            c.execute("SELECT pgmq.create_partitioned('loc')")
            inside = scalar(c, "SHOW search_path")
        return inside, scalar(c, "SHOW search_path")

    assert scenario(conn) == ("pg_catalog, public", "pg_catalog, public")
    install = ";".join(PARTMAN_SQL) + ";" + upstream_sql()
    with contextlib.closing(_database(pg_cluster, install)) as databases:
        assert scenario(next(databases)) == ("pg_catalog, public", "pg_catalog, public")


# Every routine a test can call, in an order in which each works. Excluded: the trigger
# functions (fired by the sends after enable_notify_*), and the pinned inner functions of the
# pg_partman callers (_create_partitioned, _convert_archive_partitioned,
# _run_partition_maintenance): they are the outer functions' work, and called directly they
# leave pg_partman's session-level search_path, which the outer functions put back.
NOT_CALLED = {"notify_queue_listeners", "_notify_msg_id", "_create_partitioned", "_convert_archive_partitioned",
              "_run_partition_maintenance", "_queues_changed", "_streams_changed",
              "_forget_dedup_keys", "_check_queue_settings", "_check_exchange", "_lock_queue_config",
              "_guard_stream_subscription"}
SWEEP = """
SELECT pgmq.create('jobs')
SELECT pgmq.create_non_partitioned('cnp')
SELECT pgmq.create_unlogged('fast')
SELECT pgmq.create('dlq')
SELECT pgmq.create('texts', 'text'::regtype)
SELECT pgmq.create_partitioned('part', '10', '100')
SELECT pgmq.create('plain')
SELECT pgmq.convert_archive_partitioned('plain')
SELECT pgmq.run_partition_maintenance()
SELECT pgmq.run_partition_maintenance('part')
SELECT pgmq._prove_caller(), pgmq._advance_read_floor('part')
SELECT pgmq.validate_queue_name('jobs')
SELECT pgmq._validate_queue_name('jobs')
SELECT pgmq.format_table_name('jobs', 'q')
SELECT pgmq._format_table_name('jobs', 'q')
SELECT pgmq.acquire_queue_lock('jobs')
SELECT pgmq._queue_name_of('JOBS')
SELECT pgmq._lock_queue('jobs')
SELECT pgmq._lock_queue('jobs', true)
SELECT pgmq._owns_queue('jobs')
SELECT pgmq._queue_privilege('jobs', 'SELECT')
SELECT pgmq._extension_exists('pgmq')
SELECT pgmq._belongs_to_pgmq('q_jobs')
SELECT pgmq._create_queue_tables('jobs', false)
SELECT pgmq._prove_caller(), pgmq._create_queue_for('jobs2', false)
SELECT pgmq._prove_caller(), pgmq._drop_queue_tables('jobs2')
SELECT pgmq._is_trusted(current_user)
SELECT pgmq._role_owns_queue(current_user, 'jobs')
SELECT pgmq._prove_caller(), pgmq._proven_caller()
SELECT * FROM pgmq.send('jobs', '{}')
SELECT * FROM pgmq.send('jobs', '{}', '{}'::jsonb)
SELECT * FROM pgmq.send('jobs', '{}', 0)
SELECT * FROM pgmq.send('jobs', '{}', now())
SELECT * FROM pgmq.send('jobs', '{}', '{}'::jsonb, 0)
SELECT * FROM pgmq.send('jobs', '{}', '{"x-pgmq-group": "g"}'::jsonb, now())
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb])
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb])
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], 0)
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], now())
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], 0)
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], now())
SELECT pgmq._validate_batch_params(ARRAY['{}'::jsonb], NULL)
SELECT * FROM pgmq._send_batch('jobs', ARRAY['{}'::jsonb], NULL, now())
SELECT pgmq._static_send(now(), '{}', NULL, 'jobs'), pgmq._static_send(now(), '{}', NULL, 'Jobs')
SELECT * FROM pgmq._static_send_batch(now(), ARRAY['{}'::jsonb], NULL, 'jobs')
SELECT pgmq._static_send_dedup(now(), '{}', NULL, 'k1', 'jobs'), pgmq._static_send_dedup(now(), '{}', NULL, 'k2', 'Jobs')
SELECT * FROM pgmq._static_read(1, '1 second', NULL, now(), 'jobs')
SELECT * FROM pgmq._static_read_from(1, '1 second', NULL, now(), 1, 10, 'jobs')
SELECT * FROM pgmq._static_read_head(1, '1 second', NULL, now(), 1, 10, 'jobs')
SELECT * FROM pgmq._static_read_judged(1, '1 second', NULL, now(), NULL, 2, true, 0, 1, 0, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_pop(1, NULL, NULL, NULL, 'jobs')
SELECT * FROM pgmq._static_pop_from(1, NULL, NULL, NULL, 1, 10, 'jobs')
SELECT * FROM pgmq._static_pop_head(1, NULL, NULL, NULL, 1, 10, 'jobs')
SELECT * FROM pgmq._static_pop_judged(1, NULL, NULL, NULL, NULL, 2, true, 0, 1, 0, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_read_ranked(1, '1 second', NULL, now(), 'jobs')
SELECT * FROM pgmq._static_read_judged_ranked(1, '1 second', NULL, now(), NULL, 2, true, 0, 1, 0, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_pop_ranked(1, NULL, NULL, NULL, 'jobs')
SELECT * FROM pgmq._static_read_ttl(1, '1 second', NULL, now(), 60, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_read_ttl_ranked(1, '1 second', NULL, now(), 60, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_pop_ttl(1, NULL, NULL, NULL, 60, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_pop_ttl_ranked(1, NULL, NULL, NULL, 60, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_read_ttl_clean(1, '1 second', NULL, now(), 60, 'jobs')
SELECT * FROM pgmq._static_read_ttl_clean_ranked(1, '1 second', NULL, now(), 60, 'Jobs')
SELECT * FROM pgmq._static_pop_ttl_clean(1, NULL, NULL, NULL, 60, 'jobs')
SELECT * FROM pgmq._static_pop_ttl_clean_ranked(1, NULL, NULL, NULL, 60, 'jobs')
SELECT * FROM pgmq._static_pop_judged_ranked(1, NULL, NULL, NULL, NULL, 2, true, 0, 1, 0, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, reason text, priority integer)
SELECT * FROM pgmq._static_read_clean(1, '1 second', NULL, now(), NULL, 2, true, 'jobs')
SELECT * FROM pgmq._static_read_clean_ranked(1, '1 second', NULL, now(), NULL, 2, true, 'jobs')
SELECT * FROM pgmq._static_pop_clean(1, NULL, NULL, NULL, NULL, 2, true, 'jobs')
SELECT * FROM pgmq._static_pop_clean_ranked(1, NULL, NULL, NULL, NULL, 2, true, 'jobs')
SELECT pgmq._static_peek(NULL, NULL, 'jobs'), pgmq._static_peek('{"a": 1}', now(), 'Jobs')
SELECT pgmq._static_hidden(10, 'jobs'), pgmq._static_hidden(10, 'Jobs')
SELECT * FROM pgmq._static_claim_next('{}', NULL, 'jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, failed text, expired boolean)
SELECT * FROM pgmq._static_claim_next_ranked('{}', 60, 'Jobs') AS t(msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz, vt timestamptz, message jsonb, headers jsonb, failed text, expired boolean)
SELECT * FROM pgmq._static_delete(ARRAY[0::bigint], 'jobs')
SELECT pgmq._static_delete_one(0, 'jobs')
SELECT * FROM pgmq._static_archive(ARRAY[0::bigint], 'jobs')
SELECT * FROM pgmq._static_set_vt(ARRAY[0::bigint], now(), 'jobs')
SELECT pgmq._static_path_tree(ARRAY['a', 'b', 'c', 'd', 'e'], ARRAY['1', '2', '3', '4', '5'], '$1')
SELECT pgmq._rebuild_static_paths(), pgmq._rebuild_static_paths('jobs')
SELECT pgmq._delay_to_vt(0)
SELECT pgmq._check_headers('{"x-pgmq-priority": 1}')
SELECT * FROM pgmq.send('cnp', '{}', '{"x-pgmq-priority": 1}'::jsonb)
SELECT pgmq._note_priorities('cnp')
SELECT pgmq._prove_caller(), pgmq._enable_priorities_for('fast')
SELECT pgmq.enable_priorities('jobs')
SELECT * FROM pgmq.send('part', '{}')
SELECT * FROM pgmq.read('jobs', 0, 1)
SELECT * FROM pgmq.read_with_poll('jobs', 0, 1, 1, 10)
SELECT * FROM pgmq.pop('jobs')
SELECT * FROM pgmq.read_grouped('jobs', 0, 1)
SELECT * FROM pgmq.read_grouped_with_poll('jobs', 0, 1, 1, 10)
SELECT * FROM pgmq.read_grouped_rr('jobs', 0, 1)
SELECT * FROM pgmq.read_grouped_rr_with_poll('jobs', 0, 1, 1, 10)
SELECT * FROM pgmq.read_grouped_head('jobs', 0, 1)
SELECT * FROM pgmq.read_grouped_head_with_poll('jobs', 0, 1, 1, 10)
SELECT pgmq.delete('jobs', 2::bigint)
SELECT * FROM pgmq.delete('jobs', ARRAY[3::bigint])
SELECT pgmq.archive('jobs', 4::bigint)
SELECT * FROM pgmq.archive('jobs', ARRAY[5::bigint])
SELECT * FROM pgmq.set_vt('jobs', 6::bigint, 0)
SELECT * FROM pgmq.set_vt('jobs', 6::bigint, now())
SELECT * FROM pgmq.set_vt('jobs', ARRAY[6::bigint], 0)
SELECT * FROM pgmq.set_vt('jobs', ARRAY[6::bigint], now())
SELECT * FROM pgmq.metrics('jobs')
SELECT * FROM pgmq.metrics_all()
SELECT * FROM pgmq.list_queues()
SELECT pgmq.purge_queue('fast')
SELECT pgmq.detach_archive('jobs')
SELECT pgmq.set_retry_policy('jobs', 3, dead_letter_queue => 'dlq')
SELECT pgmq.set_dedup_window('jobs', 10)
SELECT pgmq.set_message_ttl('jobs', 100)
SELECT * FROM pgmq.list_queue_settings()
SELECT pgmq._note_message_limits('jobs')
SELECT pgmq._prove_caller(), pgmq._flag_message_limits('jobs')
SELECT pgmq._may_send_as(current_user, 'dlq'), pgmq._check_dead_letter_queue('jobs', 'dlq')
SELECT pgmq._dead_letter_written_here('dlq', 1)
SELECT pgmq._retry_delay(1, 1, 1, NULL)
SELECT pgmq._int_header('{"k": "7"}', 'k')
SELECT pgmq._confirm_by('{"x-pgmq-confirm-by": "soon"}')
SELECT pgmq._dead_letter('jobs', ARRAY[7::bigint], 'nack')
SELECT pgmq.redrive('dlq')
SELECT pgmq._record_failure('jobs', 8, 1, 'nack')
SELECT pgmq.nack('jobs', 9)
SELECT pgmq.checkpoint('jobs', 10, '{}', 10)
SELECT pgmq._dedup_msg_id('jobs', 'd')
SELECT pgmq.send_reserved('jobs', '{}', 10)
SELECT pgmq.confirm('jobs', ARRAY[1::bigint])
SELECT pgmq.expire_messages()
SELECT pgmq.remove_retry_policy('jobs')
SELECT pgmq._extension_schema('pg_partman')
SELECT pgmq._get_pg_partman_schema()
SELECT pgmq._get_pg_partman_major_version()
SELECT pgmq._ensure_pg_partman_installed()
SELECT pgmq._get_partition_col('10')
SELECT pgmq._create_fifo_index_if_not_exists('jobs')
SELECT pgmq._prove_caller(), pgmq._build_fifo_index('jobs')
SELECT pgmq.create_fifo_index('jobs')
SELECT pgmq.create_fifo_indexes_all()
SELECT pgmq.validate_routing_key('a.b')
SELECT pgmq.validate_topic_pattern('a.*')
SELECT pgmq._validate_routing_key('a.b')
SELECT pgmq._validate_topic_pattern('a.*')
SELECT pgmq._topic_regex('a.*')
SELECT pgmq._headers_match('{}', '{}')
SELECT pgmq._headers_arguments('{"a": 1}')
SELECT pgmq._may_publish('pgmq.topic')
SELECT pgmq._exchange_for_publish('pgmq.topic', 'a.b')
SELECT * FROM pgmq._route('pgmq.topic', 'a.b', NULL)
SELECT pgmq._unroutable('pgmq.topic', 'a.b', 'notice')
SELECT pgmq._owns_role(current_user)
SELECT pgmq.create_exchange('ex', 'direct')
SELECT pgmq.set_unroutable('ex', 'notice')
SELECT pgmq._check_alternate_exchange('ex', NULL)
SELECT * FROM pgmq.list_exchanges()
SELECT pgmq.bind_queue('jobs', 'ex', 'k')
SELECT pgmq._bind('ex', 'jobs', 'k2')
SELECT * FROM pgmq.list_exchange_bindings()
SELECT * FROM pgmq.publish('ex', 'k', '{}')
SELECT * FROM pgmq.publish('ex', 'k', '{}', NULL, now())
SELECT * FROM pgmq.publish_routed('ex', 'k', '{}')
SELECT * FROM pgmq.publish_routed('ex', 'k', '{}', NULL, now())
SELECT * FROM pgmq.test_exchange_routing('ex', 'k')
SELECT pgmq._unbind('ex', 'jobs', 'k2')
CALL pgmq.publish_message('ex', 'k', '{}')
CALL pgmq.publish_message_xml('ex', 'k', '<a/>')
CALL pgmq.grant_publish_access('ex', current_user)
CALL pgmq.revoke_publish_access('ex', current_user)
SELECT pgmq.unbind_queue('jobs', 'ex', 'k')
SELECT pgmq.drop_exchange('ex', false)
SELECT pgmq.bind_topic('a.*', 'jobs')
SELECT * FROM pgmq.list_topic_bindings()
SELECT * FROM pgmq.list_topic_bindings('jobs')
SELECT * FROM pgmq.test_routing('a.b')
SELECT pgmq.send_topic('a.b', '{}')
SELECT pgmq.send_topic('a.b', '{}', 0)
SELECT pgmq.send_topic('a.b', '{}', '{}'::jsonb)
SELECT pgmq.send_topic('a.b', '{}', '{}'::jsonb, 0)
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb])
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb])
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], 0)
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], now())
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], 0)
SELECT * FROM pgmq.send_batch_topic('a.b', ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], now())
SELECT pgmq.unbind_topic('a.*', 'jobs')
SELECT pgmq.enable_notify_insert('jobs')
SELECT pgmq.update_notify_insert('jobs', 5)
SELECT * FROM pgmq.list_notify_insert_throttles()
SELECT pgmq.enable_notify_msg_id('jobs')
SELECT pgmq._prove_caller(), pgmq._set_notify_trigger('jobs', 'msg_id', false)
SELECT pgmq._prove_caller(), pgmq._set_notify_trigger('jobs', 'msg_id', true)
SELECT * FROM pgmq.send('jobs', '{}')
SELECT pgmq.disable_notify_msg_id('jobs')
SELECT pgmq.disable_notify_insert('jobs')
SELECT pgmq._payload_type_of('texts')
SELECT pgmq._payload_type_untrusted('text'::regtype)
SELECT pgmq._prove_caller(), pgmq._set_payload_check('texts', 'text')
SELECT * FROM pgmq._encode_payload('x'::text, NULL)
SELECT pgmq._payload_ok('x', 'text')
SELECT pgmq._encode_payload_io(now()), pgmq._payload_ok('<a/>', 'xml'), pgmq._payload_ok('1 day', 'interval')
SELECT pgmq._decode_payload(e.message, e.headers, NULL::text) FROM pgmq._encode_payload('x'::text, NULL) e
SELECT pgmq.set_payload_type('dlq', 'jsonb')
SELECT pgmq.payload_type('texts')
SELECT pgmq.send_payload('texts', 'x'::text)
SELECT * FROM pgmq.read_payload('texts', 0, 1, NULL::text)
SELECT * FROM pgmq.pop_payload('texts', 1, NULL::text)
SELECT pgmq.queue_initialize()
CALL pgmq.create_queue('pq')
CALL pgmq.alter_queue('pq', new_retries => 2)
SELECT pgmq.get_queue_table('pq')
SELECT pgmq._xid_status(1)
CALL pgmq.insert_message('pq', '{}')
CALL pgmq.insert_message_xml('pq', '<a/>')
SELECT * FROM pgmq._claim_message('pq', NULL, NULL, NULL)
SELECT * FROM pgmq._take_message('pq', NULL, NULL, NULL)
CALL pgmq.insert_message('pq', '{}')
SELECT pgmq.read_message('pq')
SELECT pgmq.read_message_xml('pq')
SELECT pgmq.read_message_by_id('pq', 1)
SELECT pgmq.read_message_by_id_xml('pq', 2)
SELECT * FROM pgmq.read_message_any('pq')
SELECT * FROM pgmq.read_message_by_id_any('pq', 3)
CALL pgmq.drop_queue('pq'::name)
CALL pgmq.register_callback('jobs', 'public.cb(jsonb)')
SELECT * FROM pgmq.list_callbacks()
SELECT pgmq._prove_caller(), pgmq._make_callback_runner(current_user)
SELECT pgmq._callback_queues(NULL)
SELECT pgmq._dispatch_one('jobs')
SELECT * FROM pgmq._dispatch_one_detail('jobs')
CALL pgmq.unregister_callback('jobs', 'public.cb(jsonb)')
CALL pgmq._register_callback('jobs', 'public.cb(jsonb)'::regprocedure, 'public.cb(jsonb)', 'public')
CALL pgmq._unregister_callback('jobs', 'public.cb(jsonb)'::regprocedure, 'public.cb(jsonb)')
CALL pgmq.register_callback('jobs', 'public.cb(jsonb)')
* CALL pgmq.dispatch('jobs')
SELECT pgmq.pause('jobs'), pgmq.resume('jobs')
SELECT pgmq.set_delivery_counting('jobs')
SELECT * FROM pgmq.read('jobs', 0, 1)
SELECT pgmq._first_deliveries('jobs', 1, 0)
SELECT pgmq.set_delivery_counting('jobs', false)
SELECT * FROM pgmq._sample_messages('pgmq.q_jobs')
SELECT * FROM pgmq._count_rows('q_jobs')
SELECT * FROM pgmq._count_rows('q_jobs', 1000, 5)
SELECT * FROM pgmq._count_messages('jobs', now(), 1, 5)
SELECT * FROM pgmq._count_messages('jobs', now(), 1000, 5, 1, 10, 1)
SELECT * FROM pgmq._queue_metrics_of('jobs')
SELECT * FROM pgmq.queue_metrics()
SELECT * FROM pgmq.queue_metrics_page(NULL, 10)
SELECT pgmq.sample_metrics()
SELECT * FROM pgmq.metrics_history('jobs')
SELECT * FROM pgmq.browse('jobs')
SELECT * FROM pgmq.read_unordered('jobs', 0, 1)
SELECT * FROM pgmq._static_read_unordered(1, '1 second', NULL, now(), 'jobs')
SELECT pgmq.ack_ranges('jobs', ARRAY[1]::bigint[], ARRAY[2]::bigint[], NULL, true)
SELECT pgmq.move_messages('jobs', 'dlq', 1)
SELECT * FROM pgmq._queue_objects('jobs')
SELECT pgmq._prove_caller(), pgmq._set_queue_access('jobs', current_user, true)
CALL pgmq.grant_queue_access('jobs', current_user)
CALL pgmq.grant_queue_access('jobs', 10::oid)
CALL pgmq.revoke_queue_access('jobs', 'pg_monitor')
CALL pgmq.revoke_queue_access('jobs', 'pg_monitor'::regrole::oid)
CALL pgmq.reset_queue_access('jobs')
SELECT pgmq.create_stream('st', retention => '0', rotation_period => '1 second')
SELECT pgmq._prove_caller(), pgmq._create_stream_for('st2', '1 day', '1 hour', NULL, false)
SELECT * FROM pgmq.list_streams()
SELECT pgmq._stream_privilege('st', 'SELECT')
SELECT pgmq.subscribe('st', 's1', 'earliest'), pgmq.subscribe('st', 's2')
SELECT pgmq.stream_send('st', '{}')
SELECT * FROM pgmq.stream_send_batch('st', ARRAY['{}']::jsonb[])
SELECT * FROM pgmq._stream_append('st', ARRAY['{}']::jsonb[], ARRAY[NULL]::jsonb[])
SELECT pgmq._rebuild_stream_paths(), pgmq._heal_stream_paths('st')
SELECT pgmq._stream_tick('st'), pgmq._stream_news('st', 0)
SELECT * FROM pgmq.stream_read('st', 's1')
SELECT * FROM pgmq._stream_events('st', 0, pg_current_snapshot(), pg_current_snapshot())
SELECT pgmq._stream_settle('st', 's1', 0)
SELECT pgmq.subscribe('st', 's1', retry_queue => 'st_retry')
SELECT pgmq.stream_nack('st', 's1', (SELECT max(batch_id) FROM pgmq.stream_batches), (SELECT array_agg(ev_id) FROM pgmq.s_st))
SELECT pgmq.stream_ack('st', 's1', (SELECT max(batch_id) FROM pgmq.stream_batches))
SELECT pgmq.stream_rewind('st', 's1', 0::bigint), pgmq.stream_rewind('st', 's1', now())
SELECT * FROM pgmq.stream_info(), pgmq._stream_last_ev_id('st')
SELECT pgmq._stream_count_unseen('s_st$0', pg_current_snapshot())
SELECT pgmq.stream_tick(), pgmq._stream_maintain('st')
SELECT pgmq.unsubscribe('st', 's2')
SELECT pgmq.grant_stream_access('st', 'pg_monitor', 'write'), pgmq.revoke_stream_access('st', 'pg_monitor', 'write')
SELECT pgmq._stream_acl('SEQUENCE', 's_st$seq', 'SELECT', 'pg_monitor', true), pgmq._copy_stream_acl('st', 's_st$0')
SELECT pgmq._stream_holds('s_st', 'pg_monitor', 'SELECT'), pgmq._prove_caller(), pgmq._set_stream_access('st', 'pg_monitor', 'read', false)
SELECT pgmq.create_exchange('sx', 'topic'), pgmq.bind_stream('st', 'sx', 'a.*')
SELECT * FROM pgmq.publish('sx', 'a.b', '{}'), pgmq.unbind_stream('st', 'sx', 'a.*')
SELECT pgmq.drop_exchange('sx', false)
SELECT pgmq._prove_caller(), pgmq._drop_stream_for('st2')
SELECT pgmq.drop_stream('st')
SELECT pgmq.drop_queue('cnp')
SELECT pgmq.drop_queue('fast', true)
SELECT pgmq.queue_deinitialize()
"""


def test_no_routine_leaves_a_setting_changed(conn, partman):
    """pg_settings in the caller's session is the same before each call, during its transaction
    and after the commit (a procedure that commits: before and after)."""
    conn.execute("CREATE PROCEDURE public.cb(msg jsonb) LANGUAGE sql AS ''")
    conn.execute(f"SET search_path = {CALLER_PATH}")
    before = settings(conn)
    for line in SWEEP.strip().splitlines():
        commits, sql = line.startswith("* "), line.removeprefix("* ")
        if commits:
            conn.execute(sql)
        else:
            with conn.transaction():
                conn.execute(sql)
                assert settings(conn) == before, f"in the transaction of {sql}"
        assert settings(conn) == before, f"after {sql}"
    called = set(re.findall(r"pgmq\.(\w+)\(", SWEEP))
    assert {e.name for e in surface.current()} - called == NOT_CALLED


# ----------------------------------------------------------------------------- 4. relations

SHAPES = [
    "SELECT pgmq.create('jobs')", "SELECT pgmq.create_unlogged('fast')", "SELECT pgmq.create('MixedCase')",
    "SELECT pgmq.create_partitioned('part')", "SELECT pgmq.create_partitioned('tpart', '1 day', '7 days')",
    "SELECT pgmq.create('conv')", "SELECT pgmq.convert_archive_partitioned('conv')",
    "SELECT pgmq.enable_notify_insert('jobs')", "SELECT pgmq.bind_topic('a.*', 'jobs')",
    "SELECT pgmq.create_fifo_index('fast')",
]
# What a client could see of upstream's relations (partitions left out: pg_partman's).
CATALOG = {
    "relation": """SELECT c.relname, c.relkind, c.relpersistence FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'pgmq' AND NOT c.relispartition AND c.relkind NOT IN ('i', 'I')""",
    "column": """SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                        pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated
                 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                 WHERE n.nspname = 'pgmq' AND a.attnum > 0 AND NOT a.attisdropped AND NOT c.relispartition
                   AND c.relkind IN ('r', 'p', 'v', 'c')""",
    "constraint": """SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k
                     JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'pgmq' AND NOT c.relispartition AND k.contype <> 't'""",
    "index": """SELECT c.relname, i.relname, pg_get_indexdef(i.oid) FROM pg_index x
                JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgmq' AND NOT c.relispartition""",
    "trigger": """SELECT c.relname, t.tgname, t.tgdeferrable, t.tginitdeferred FROM pg_trigger t
                  JOIN pg_class c ON c.oid = t.tgrelid
                  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgmq' AND NOT t.tgisinternal""",
}
TOPIC_REGEX = ("(('^'::text || replace(replace(regexp_replace(pattern, '([.+?{}()|\\[\\]\\\\^$])'::text, "
               "'\\\\\\1'::text, 'g'::text), '*'::text, '[^.]+'::text), '#'::text, '.*'::text)) || '$'::text)")
# Everything of upstream's that ours does not have as upstream has it; README ("Differences from
# upstream PGMQ", relations) says why and what a client that touched it must do.
NOT_AS_UPSTREAM = {
    # topic_bindings is a view of the built-in topic exchange's bindings: same columns, but a view
    ("relation", ("topic_bindings", "r", "p")),
    ("column", ("topic_bindings", 1, "pattern", "text", True, None, "", "")),
    ("column", ("topic_bindings", 2, "queue_name", "text", True, None, "", "")),
    ("column", ("topic_bindings", 3, "bound_at", "timestamp with time zone", True, "now()", "", "")),
    ("column", ("topic_bindings", 4, "compiled_regex", "text", False, TOPIC_REGEX, "", "s")),
    ("constraint", ("topic_bindings", "topic_bindings_meta_queue_name_fk",
                    "FOREIGN KEY (queue_name) REFERENCES pgmq.meta(queue_name) ON DELETE CASCADE")),
    ("constraint", ("topic_bindings", "topic_bindings_unique_pattern_queue", "UNIQUE (pattern, queue_name)")),
    ("index", ("topic_bindings", "idx_topic_bindings_covering", "CREATE INDEX idx_topic_bindings_covering ON "
               "pgmq.topic_bindings USING btree (pattern) INCLUDE (queue_name, compiled_regex)")),
    ("index", ("topic_bindings", "topic_bindings_unique_pattern_queue", "CREATE UNIQUE INDEX "
               "topic_bindings_unique_pattern_queue ON pgmq.topic_bindings USING btree (pattern, queue_name)")),
    # the FIFO index is a btree on (group, msg_id), not a GIN on headers
    ("index", ("q_fast", "q_fast_fifo_idx", "CREATE INDEX q_fast_fifo_idx ON pgmq.q_fast USING gin (headers)")),
    # convert_archive_partitioned: the new archive's key is a_<q>_pkey (the old table's is renamed
    # a_<q>_old_pkey), and the archived_at index is not copied a second time by LIKE
    ("constraint", ("a_conv", "a_conv_pkey1", "PRIMARY KEY (msg_id)")),
    ("constraint", ("a_conv_old", "a_conv_pkey", "PRIMARY KEY (msg_id)")),
    ("index", ("a_conv", "a_conv_pkey1", "CREATE UNIQUE INDEX a_conv_pkey1 ON ONLY pgmq.a_conv USING btree (msg_id)")),
    ("index", ("a_conv", "a_conv_archived_at_idx",
               "CREATE INDEX a_conv_archived_at_idx ON ONLY pgmq.a_conv USING btree (archived_at)")),
    ("index", ("a_conv_old", "a_conv_pkey", "CREATE UNIQUE INDEX a_conv_pkey ON pgmq.a_conv_old USING btree (msg_id)")),
    # the notify trigger is INITIALLY DEFERRED: it runs at commit (upstream's: at the end of the
    # statement unless the client defers it)
    ("trigger", ("q_jobs", "trigger_notify_queue_insert_listeners", True, False)),
}


def catalog(conn) -> set[tuple[str, tuple]]:
    with conn.transaction(force_rollback=True):
        for sql in PARTMAN_SQL + tuple(SHAPES):
            conn.execute(sql)
        return {(kind, tuple(row)) for kind, sql in CATALOG.items() for row in conn.execute(sql)}


def test_upstreams_relations_keep_their_kind_and_shape(ours, upstream, partman_available):
    if not partman_available:
        pytest.skip(NO_PARTMAN)
    theirs, mine = catalog(upstream), catalog(ours)
    assert theirs - mine == NOT_AS_UPSTREAM
    # our additions to upstream's relations come after upstream's columns
    added = {(row[0], row[1]) for kind, row in mine - theirs if kind == "column"}
    upstream_width = {}
    for kind, row in theirs:
        if kind == "column":
            upstream_width[row[0]] = max(upstream_width.get(row[0], 0), row[1])
    assert all(num > upstream_width[rel] for rel, num in added if rel in upstream_width and rel != "topic_bindings")
