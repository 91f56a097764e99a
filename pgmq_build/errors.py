"""Every error, warning and notice that upstream's functions may raise, declared once.

Upstream PGMQ raises its errors with a plain ``RAISE EXCEPTION '...'``, so their SQLSTATE is
P0001 (``raise_exception``); clients catch that class (psycopg's ``RaiseException``) and match
the texts, which are reproduced here byte for byte, quirks included. Templates never spell these
RAISE statements: they call ``raise_error(key, *args)`` (a Jinja global, see ``render.py``),
which renders them from this table, and lint rule PGMQ011 fails when the body of an upstream
function (``upstream=True`` in the manifest) raises anything that is not declared here with
the condition declared for it.

Four kinds of entries:

``upstream``  upstream's own message and class (P0001; or a WARNING/NOTICE upstream prints).
              ``ours``: the condition our own functions raise the same text with when they share
              the check (an upstream function and ours render one check in two flavours).
``postgres``  an error PostgreSQL raises inside upstream's function (upstream never checks it);
              we check first, so we raise PostgreSQL's class and text ourselves.
``stand-in``  upstream fails with P0001 from inside pg_partman, with pg_partman's text and
              context; we check before calling it and raise P0001 with our own text.
``refusal``   input upstream accepts and we refuse on purpose, with a specific SQLSTATE
              (README, "Differences from upstream PGMQ", lists them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Condition names used below and their SQLSTATEs (PostgreSQL's errcodes.txt).
CONDITIONS: dict[str, str] = {
    "raise_exception": "P0001",
    "insufficient_privilege": "42501",
    "null_value_not_allowed": "22004",
    "invalid_parameter_value": "22023",
    "invalid_row_count_in_limit_clause": "2201W",
    "invalid_name": "42602",
    "name_too_long": "42622",
    "duplicate_table": "42P07",
    "undefined_object": "42704",
    "feature_not_supported": "0A000",
}

LEVELS = ("EXCEPTION", "WARNING", "NOTICE")


@dataclass(frozen=True)
class Declared:
    text: str                          # RAISE format: each % takes the next argument, %% is a %
    kind: str = "upstream"             # upstream | postgres | stand-in | refusal
    level: str = "EXCEPTION"           # EXCEPTION, WARNING or NOTICE
    condition: str = "raise_exception"  # the condition upstream functions raise it with
    ours: str | None = None            # the condition our own functions raise it with, if shared
    hint: str = ""
    why: str = ""                      # stand-ins and refusals: why we differ from upstream

    @property
    def sqlstate(self) -> str:
        return CONDITIONS[self.condition]

    @property
    def params(self) -> int:
        return len(re.findall(r"%(?!%)", self.text.replace("%%", "")))


def _u(text: str, ours: str | None = None, level: str = "EXCEPTION") -> Declared:
    return Declared(text, "upstream", level, "raise_exception", ours)


_KEY_RULES = "Only alphanumeric, dots, hyphens, and underscores are allowed."
_PATTERN_RULES = "Only alphanumeric, dots, hyphens, underscores, *, and # are allowed."
_INTERVAL_HINT = "Use time intervals for both ('1 day', '7 days') or numbers for both ('10000', '100000')."
_PARTMAN_WHY = "upstream fails inside pg_partman (P0001 with pg_partman's text and context)"

DECLARED: dict[str, Declared] = {
    # ---- queue names (format_table_name, validate_queue_name)
    # Upstream's literal is '... or \''' under standard_conforming_strings: a backslash, a quote.
    "invalid_characters": _u("queue name contains invalid characters: $, ;, --, or \\'", ours="invalid_name"),
    "name_too_long": _u("queue name is too long, maximum length is 47 characters", ours="name_too_long"),
    "null_identifier": Declared(
        "null values cannot be formatted as an SQL identifier", "postgres", condition="null_value_not_allowed",
        why="a NULL queue name: upstream's format('%I', NULL) raises this in most functions; we raise "
            "it in all of them (upstream's drop_queue returns false, detach_archive warns, "
            "format_table_name returns NULL)"),
    "queue_name_empty_refused": Declared(
        "queue name cannot be NULL or empty", "refusal", condition="invalid_name",
        why="upstream creates a queue named '' (tables q_ and a_) and validate_queue_name accepts NULL"),
    "queue_name_bytes_refused": Declared(
        "queue name is too long, maximum length is 47 bytes", "refusal", condition="name_too_long",
        why="identifiers are cut at 63 bytes: upstream lets two long multibyte names share one table"),
    "name_control_refused": Declared(
        "% name cannot contain control characters", "refusal", condition="invalid_name",
        hint="Control characters (U+0001-U+001F, U+007F-U+009F) are printed raw by terminals.",
        why="upstream accepts ESC, CR and LF in a name, which rewrite the rows of a listing an "
            "operator reads in a terminal"),
    "queue_name_case_clash": Declared(
        'queue "%" conflicts with existing queue "%"', "refusal", condition="duplicate_table",
        hint="Queue tables are named in lower case, so names must differ in more than case.",
        why="upstream lets 'Jobs' share the tables of 'jobs'"),
    "not_queue_owner": Declared(
        'must be owner of queue "%"', "refusal", condition="insufficient_privilege",
        why="queue tables belong to the extension's owner (README, Security): the queue's owner is "
            "recorded in pgmq.queue_owners, and PostgreSQL's own ownership check no longer applies"),
    "partitioned_untrusted": Declared(
        "% needs a superuser, the extension's owner or a role with CREATE on schema pgmq", "refusal",
        condition="insufficient_privilege",
        hint="Partitioned queue tables belong to the role that creates them; plain queues (pgmq.create) "
             "can be made by any role.",
        why="pg_partman builds the tables as the caller, who would own them: only trusted roles may "
            "(README, Security)"),
    "queue_of_other_role": Declared(
        'queue "%" already exists and belongs to role "%"', "refusal", level="WARNING",
        why="queues have owners here; creating one another role owns does not complete it"),
    "relation_exists_skipping": Declared(
        'relation "%" already exists, skipping', "postgres", level="NOTICE", condition="duplicate_table",
        why="CREATE INDEX IF NOT EXISTS's NOTICE for an index create finds made: raised without that "
            "statement, whose SHARE lock would last to the end of the caller's transaction"),
    # ---- sending
    "msgs_empty": _u("msgs cannot be NULL or empty", ours="invalid_parameter_value"),
    "headers_length": _u("headers array length (%) must match msgs array length (%)",
                         ours="invalid_parameter_value"),
    "msg_null": _u("msg cannot be NULL", ours="null_value_not_allowed"),
    "delay_negative_got": _u("delay cannot be negative, got: %", ours="invalid_parameter_value"),
    "delay_negative_refused": Declared(
        "delay cannot be negative", "refusal", condition="invalid_parameter_value",
        why="upstream makes a message sent with a negative delay visible at once"),
    # ---- reading
    "limit_negative": Declared(
        "LIMIT must not be negative", "postgres", condition="invalid_row_count_in_limit_clause",
        why="upstream's LIMIT raises this when its statement reaches it; ours check qty first"),
    "qty_null_refused": Declared(
        "qty cannot be NULL", "refusal", condition="null_value_not_allowed",
        why="upstream's grouped reads treat a NULL qty as 'none' or 'no limit'"),
    "poll_seconds_refused": Declared(
        "max_poll_seconds must be non-negative", "refusal", condition="invalid_parameter_value",
        why="upstream returns at once (a NULL never returns while the queue is empty)"),
    "poll_interval_refused": Declared(
        "poll_interval_ms must be positive", "refusal", condition="invalid_parameter_value",
        why="upstream busy-loops without sleeping"),
    # ---- deprecated functions and drop
    "drop_missing": _u("pgmq queue `%` does not exist", level="NOTICE"),
    "drop_deprecated": _u("drop_queue(queue_name, partitioned) is deprecated and will be removed in "
                          "PGMQ v2.0. Use drop_queue(queue_name) instead", level="WARNING"),
    "detach_deprecated": _u("detach_archive(queue_name) is deprecated and is a no-op. It will be removed "
                            "in PGMQ v2.0. Archive tables are no longer member objects.", level="WARNING"),
    # ---- partitioned queues
    "partman_required": _u("pg_partman is required for partitioned queues", ours="undefined_object"),
    "premake": _u("premake must be at least 1, got %"),
    "partman_too_old": Declared(
        "pg_partman % is too old for partitioned queues", "refusal", condition="feature_not_supported",
        hint="Partitioned queues need pg_partman 4 or later: ALTER EXTENSION pg_partman UPDATE;",
        why="pg_partman before 4 has another API"),
    # upstream's NOTICE texts really say "%s" (the value, then an "s") and "does not exists"
    "archive_partitioned": _u("Table %s is already partitioned", level="NOTICE"),
    "archive_missing": _u("Table %s does not exists", level="NOTICE"),
    "partition_name_dot": Declared(
        'partitioned queue names cannot contain "."', "stand-in",
        hint="pg_partman does not support table names containing periods.", why=_PARTMAN_WHY),
    "partition_interval_empty": Declared(
        "partition_interval cannot be NULL or empty", "stand-in", why=_PARTMAN_WHY),
    "partition_interval_positive": Declared(
        "partition_interval must be a positive number of messages, got %", "stand-in", why=_PARTMAN_WHY),
    "partition_interval_invalid": Declared(
        "partition_interval must be a number of messages or a time interval, got %", "stand-in",
        why=_PARTMAN_WHY),
    "retention_not_number": Declared(
        "retention_interval must be a number of messages when partition_interval is one, got %",
        "stand-in", hint=_INTERVAL_HINT, why=_PARTMAN_WHY),
    "retention_not_interval": Declared(
        "retention_interval must be a time interval when partition_interval is one, got %",
        "stand-in", hint=_INTERVAL_HINT, why=_PARTMAN_WHY),
    "not_partitioned": Declared(
        'queue "%" already exists and is not partitioned', "stand-in",
        hint="Drop it first, or use convert_archive_partitioned() for the archive alone.", why=_PARTMAN_WHY),
    "partitioned_differently": Declared(
        'queue "%" is already partitioned by %, not by %', "stand-in",
        why="upstream's second create_partitioned fails inside pg_partman (P0001)"),
    # ---- notifications
    "throttle_negative": _u("throttle_interval_ms must be non-negative"),
    "throttle_negative_got": _u("throttle_interval_ms must be non-negative, got: %"),
    "notify_queue_missing": _u('Queue "%" does not exist. Create it first using pgmq.create()'),
    "notify_not_enabled": _u('Queue "%" does not have notify_insert enabled. Enable it first using '
                             'pgmq.enable_notify_insert()'),
    # ---- topics
    "queue_missing": _u('Queue "%" does not exist. Create the queue first using pgmq.create()'),
    "queue_name_empty": _u("queue_name cannot be NULL or empty"),
    "routing_key_empty": _u("routing_key cannot be NULL or empty", ours="invalid_parameter_value"),
    "routing_key_length": _u("routing_key length cannot exceed 255 characters, got % characters",
                             ours="invalid_parameter_value"),
    "routing_key_chars": _u(f"routing_key contains invalid characters. {_KEY_RULES} Got: %",
                            ours="invalid_parameter_value"),
    "routing_key_leading_dot": _u("routing_key cannot start with a dot. Got: %", ours="invalid_parameter_value"),
    "routing_key_trailing_dot": _u("routing_key cannot end with a dot. Got: %", ours="invalid_parameter_value"),
    "routing_key_double_dot": _u("routing_key cannot contain consecutive dots. Got: %",
                                 ours="invalid_parameter_value"),
    "pattern_empty": _u("pattern cannot be NULL or empty", ours="invalid_parameter_value"),
    "pattern_length": _u("pattern length cannot exceed 255 characters, got % characters",
                         ours="invalid_parameter_value"),
    "pattern_chars": _u(f"pattern contains invalid characters. {_PATTERN_RULES} Got: %",
                        ours="invalid_parameter_value"),
    "pattern_leading_dot": _u("pattern cannot start with a dot. Got: %", ours="invalid_parameter_value"),
    "pattern_trailing_dot": _u("pattern cannot end with a dot. Got: %", ours="invalid_parameter_value"),
    "pattern_double_dot": _u("pattern cannot contain consecutive dots. Got: %", ours="invalid_parameter_value"),
    "pattern_stars": _u("pattern cannot contain consecutive stars (**). Use # for multi-segment matching. "
                        "Got: %", ours="invalid_parameter_value"),
    "pattern_hashes": _u("pattern cannot contain consecutive hashes (##). A single # already matches zero "
                         "or more segments. Got: %", ours="invalid_parameter_value"),
    "pattern_adjacent": _u("pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with "
                           "dots. Got: %", ours="invalid_parameter_value"),
}


class DeclarationError(ValueError):
    """A template asked for an undeclared message, or passed the wrong number of arguments."""


def sql_string(text: str) -> str:
    """A string literal that reads the same whatever standard_conforming_strings is."""
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def raise_error(key: str, *args: str, own: bool = False) -> str:
    """The RAISE statement of a declared message; `args` are SQL expressions, one per %.

    ``own=True``: the flavour of our own functions (the entry's ``ours`` condition)."""
    entry = DECLARED.get(key)
    if entry is None:
        raise DeclarationError(f"undeclared message {key!r} (declare it in pgmq_build/errors.py)")
    if len(args) != entry.params:
        raise DeclarationError(f"message {key!r} takes {entry.params} argument(s), got {len(args)}")
    condition = entry.condition
    if own:
        if entry.ours is None:
            raise DeclarationError(f"message {key!r} declares no condition for our own functions")
        condition = entry.ours
    stmt = f"RAISE {entry.level} {sql_string(entry.text)}" + "".join(f", {a}" for a in args)
    using = []
    if condition != "raise_exception":
        using.append(f"ERRCODE = '{condition}'")
    if entry.hint:
        using.append(f"HINT = {sql_string(entry.hint)}")
    if using:
        stmt += " USING " + ", ".join(using)
    return stmt + ";"


def allowed(level: str, text: str, spelled: Callable[[str], str] = str) -> set[str]:
    """The conditions (names and SQLSTATEs) an upstream function may raise `text` at `level` with.
    `spelled`: how a declared text reads where `text` was taken from (the lint parses bodies
    with the schema renamed)."""
    out: set[str] = set()
    for entry in DECLARED.values():
        if entry.level == level and spelled(entry.text) == text:
            out |= {entry.condition, entry.sqlstate}
    return out
