"""The single source of truth: what the extension contains.

Every function the templates create is declared here with its arguments and result exactly as
PostgreSQL prints them (``pg_get_function_arguments`` / ``pg_get_function_result`` with
``search_path = pg_catalog``). The lint checks the rendered SQL against this list in both
directions and the catalog-contract test checks an installed database against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SCHEMA = "pgmq"
# The version being built. Once a version is released (listed in RELEASED below) it can never be
# rendered again: bump VERSION before changing the SQL surface or a table layout.
VERSION = "2.2.0"

# Per-queue object prefixes and the identifier budget (NAMEDATALEN - 1 = 63).
# pg_partman's template table "template_pgmq_q_<name>" is the longest name we cause.
IDENTIFIER_BUDGET = 63
LONGEST_PREFIX = "template_pgmq_q_"
MAX_QUEUE_NAME = IDENTIFIER_BUDGET - len(LONGEST_PREFIX)  # 47, as upstream

MSGS = "SETOF pgmq.message_record"


@dataclass(frozen=True)
class Function:
    """One CREATE FUNCTION / PROCEDURE.

    ``args`` is what ``pg_get_function_arguments`` prints (names, types, defaults);
    ``returns`` is what ``pg_get_function_result`` prints (None for a procedure).
    """

    name: str
    args: str
    returns: str | None
    security_definer: bool = False
    definer_reason: str = ""
    upstream: bool = True  # part of upstream PGMQ 1.13's surface
    # An internal routine only upstream functions call (their work, moved out of them): like an
    # upstream function, it raises only what pgmq_build/errors.py declares (lint PGMQ011).
    upstream_path: bool = False
    # Why this routine does not pin search_path ("" = it does). A procedure that COMMITs cannot
    # (PostgreSQL forbids SET there), and a name given by the caller may need the caller's
    # search_path. Such a routine qualifies every name and operator itself.
    unpinned_reason: str = ""
    commits: bool = False  # a procedure that controls transactions (needs unpinned_reason)
    # GUCs pinned besides search_path, as pg_proc.proconfig prints them ("name=value")
    settings: tuple[str, ...] = ()

    @property
    def upstream_errors(self) -> bool:
        """Whether lint PGMQ011 holds this routine to upstream's declared errors."""
        return self.upstream or self.upstream_path

    @property
    def kind(self) -> str:
        return "procedure" if self.returns is None else "function"

    @property
    def identity_args(self) -> str:
        """The arguments without defaults, as pg_get_function_identity_arguments prints them."""
        return ", ".join(_strip_default(a) for a in split_args(self.args))

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.identity_args)


def split_args(args: str) -> list[str]:
    """Split an argument list on top-level commas (defaults may contain commas in quotes)."""
    out, depth, quote, cur = [], 0, False, []
    for ch in args:
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def strip_in(args: str) -> str:
    """PostgreSQL prints procedure arguments as "IN name type"; the manifest writes "name type"."""
    return ", ".join(a[3:] if a.startswith("IN ") else a for a in split_args(args))


def _strip_default(arg: str) -> str:
    idx = arg.find(" DEFAULT ")
    return arg if idx < 0 else arg[:idx]


@dataclass(frozen=True)
class Release:
    """A released version: its scripts are frozen, byte for byte.

    ``scripts`` maps each file of extension/ that the release shipped to its sha256: the two
    install scripts (``pgmq--V.sql``, ``pgmq-standalone--V.sql``) and, for every release but the
    first, the two upgrade scripts into it from the previous release
    (``pgmq--P--V.sql``, ``pgmq-standalone--P--V.sql``).
    """

    version: str
    scripts: Mapping[str, str] = field(hash=False)


def version_key(version: str) -> tuple[int, ...]:
    """"2.10.0" sorts after "2.9.1"."""
    return tuple(int(part) for part in version.split("."))


# Released versions, oldest first. Releasing the current version: add its record here with the
# sha256 of every file it shipped (`sha256sum extension/pgmq--V.sql ...`), then bump VERSION and
# add templates/upgrades/<V>--<new>/ (see README, "Upgrading").
RELEASED: tuple[Release, ...] = (
    Release("2.0.0", {
        "pgmq--2.0.0.sql": "a8cb97be908f70ddb503b7e274d26d06710c986cbddb456a1a8b325c057fad41",
        "pgmq-standalone--2.0.0.sql": "585ced552ca8336cd583c2136fab00222e3673dbaf6cfc981f1c7632216db546",
    }),
    Release("2.1.0", {
        "pgmq--2.1.0.sql": "53a3fd87ee05c10e67f8b450fc2d036b0e7a05c20fcb66a9fd84e53640ed8a8c",
        "pgmq-standalone--2.1.0.sql": "7b888001ee2f2a059ab04e377362fbbfb2e2568b2829cbe9dc7fa82def6976cd",
        "pgmq--2.0.0--2.1.0.sql": "0c95339714d975f4f43645333a307def3f76ede0c250d6085775c111c91c59cc",
        "pgmq-standalone--2.0.0--2.1.0.sql": "9240ef2dbffb9c694f22861b708f9dc4f0e660946fa0b81c0db069f43e2e4161",
        "pgmq--1.13.0--2.1.0.sql": "cbd9fe4b25c5ce41245996be512b97c549ca11a7e08c904eda1e0064b5a10e60",
        "pgmq--1.13.1--2.1.0.sql": "c37af858a79fb8412534eea585f60f0236d29bf7f5ed244a3650871cce18f9f4",
        "pgmq-standalone--1.13.0--2.1.0.sql": "0ba6f13e9a438d8ea9c6805f8b05d9607816fa7ffc6cd0d539b3f9f25f8094e9",
        "pgmq-standalone--1.13.1--2.1.0.sql": "6b13bda3c38a577bdeedefc03ed04eb8015c742c6055731ff3f1f34f0e684800",
    }),
)


# Upstream PGMQ releases that become ours in place, straight to this version: ALTER EXTENSION
# pgmq UPDATE from upstream's extension (extension/pgmq--<upstream>--<VERSION>.sql), `pgmq-build
# migrate` for upstream's SQL-only install (pgmq-standalone--<upstream>--<VERSION>.sql). README,
# "Migrating from PGMQ"; the steps' hand-written parts are templates/upgrades/upstream/.
UPSTREAM_VERSIONS = ("1.13.0", "1.13.1")

# Objects of our install script that upstream 1.13 already has, defined the same way (the catalog
# test compares an upgraded database with a fresh install): an upgrade from upstream keeps
# upstream's, with their rows, instead of creating them. Every other object of the install script
# is created by the upgrade; upstream's routines are dropped first (ours have their identities:
# the manifest's ``upstream=True`` functions) and its topic_bindings table becomes rows of
# exchange_bindings.
UPSTREAM_KEPT: Mapping[str, tuple[str, ...]] = {
    "type": ("message_record", "queue_record", "metrics_result"),
    "table": ("meta", "notify_insert_throttle"),
    "index": ("idx_notify_throttle_active",),
}


@dataclass(frozen=True)
class Feature:
    """A folder of templates under templates/features/<name>, rendered in manifest order."""

    name: str
    templates: tuple[str, ...]
    functions: tuple[Function, ...]
    config_tables: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    version: str
    schema: str
    released: tuple[Release, ...]
    features: tuple[Feature, ...] = field(default_factory=tuple)
    upstream: tuple[str, ...] = ()  # UPSTREAM_VERSIONS: upstream PGMQ versions that upgrade to this one

    @property
    def released_versions(self) -> tuple[str, ...]:
        return tuple(r.version for r in self.released)

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version an install can be at, oldest first: the released ones, then this one."""
        return (*self.released_versions, self.version)

    @property
    def steps(self) -> tuple[tuple[str, str], ...]:
        """(from, to) of every upgrade step: one per consecutive pair of versions."""
        versions = self.versions
        return tuple(zip(versions, versions[1:], strict=False))

    def release(self, version: str) -> Release | None:
        return next((r for r in self.released if r.version == version), None)

    @property
    def functions(self) -> tuple[Function, ...]:
        return tuple(f for feat in self.features for f in feat.functions)

    @property
    def config_tables(self) -> tuple[str, ...]:
        return tuple(t for feat in self.features for t in feat.config_tables)

    def feature(self, name: str) -> Feature:
        for feat in self.features:
            if feat.name == name:
                return feat
        raise KeyError(name)


def _f(name: str, args: str, returns: str | None, **kw: object) -> Function:
    return Function(name, args, returns, **kw)  # type: ignore[arg-type]


TS = "timestamp with time zone"

CORE = Feature(
    name="core",
    templates=(
        "types.sql.j2",
        "tables.sql.j2",
        "ownership.sql.j2",
        "functions/helpers.sql.j2",
        "functions/ownership.sql.j2",
        "functions/queue_admin.sql.j2",
        "functions/send.sql.j2",
        "functions/send_batch.sql.j2",
        "functions/read.sql.j2",
        "functions/delete_archive.sql.j2",
        "functions/set_vt.sql.j2",
        "functions/metrics.sql.j2",
        "grants.sql.j2",
    ),
    config_tables=("meta", "queue_owners"),
    functions=(
        # helpers
        _f("_extension_exists", "extension_name text", "boolean"),
        _f("_belongs_to_pgmq", "table_name text", "boolean"),
        _f("format_table_name", "queue_name text, prefix text", "text"),
        _f("validate_queue_name", "queue_name text", "void"),
        # our functions' flavour of the two checks above (specific SQLSTATEs, pgmq_build/errors.py)
        _f("_format_table_name", "queue_name text, prefix text", "text", upstream=False),
        _f("_validate_queue_name", "queue_name text", "void", upstream=False),
        _f("acquire_queue_lock", "queue_name text", "void"),
        # ownership (templates/_macros/ownership.sql.j2)
        _f("_is_trusted", "role_name name", "boolean", upstream=False),
        _f("_role_owns_queue", "role_name name, queue_name text", "boolean", upstream=False),
        _f("_owns_queue", "queue_name text", "boolean", upstream=False),
        _f("_prove_caller", "", "void", upstream=False),
        _f("_proven_caller", "", "name", upstream=False),
        _f("_queue_objects", "queue_name text", "TABLE(kind text, object_name text)", upstream=False),
        _f("_queue_privilege", "queue_name text, privilege text", "boolean", upstream=False),
        # queue management
        _f("create_non_partitioned", "queue_name text", "void"),
        _f("create_unlogged", "queue_name text", "void"),
        _f("create", "queue_name text", "void"),
        _f("_create_queue_tables", "queue_name text, unlogged boolean", "void", upstream=False,
           upstream_path=True),
        _f("_create_queue_for", "queue_name text, unlogged boolean", "void", upstream=False, upstream_path=True,
           security_definer=True,
           definer_reason="queue tables belong to the extension's owner, so that no queue owner can attach "
           "code to them; it makes a validated queue for the caller proven by _prove_caller, who becomes "
           "its owner in queue_owners with table privileges only"),
        _f("_drop_queue_tables", "queue_name text", "void", upstream=False, security_definer=True,
           definer_reason="drops the tables (the extension owner's) of a queue whose owner is the caller "
           "proven by _prove_caller"),
        _f("drop_queue", "queue_name text", "boolean"),
        _f("drop_queue", "queue_name text, partitioned boolean", "boolean"),
        _f("purge_queue", "queue_name text", "bigint"),
        _f("list_queues", "", "SETOF pgmq.queue_record"),
        _f("detach_archive", "queue_name text", "void"),
        # sending
        _f("send", f"queue_name text, msg jsonb, headers jsonb, delay {TS}", "SETOF bigint"),
        _f("send", "queue_name text, msg jsonb", "SETOF bigint"),
        _f("send", "queue_name text, msg jsonb, headers jsonb", "SETOF bigint"),
        _f("send", "queue_name text, msg jsonb, delay integer", "SETOF bigint"),
        _f("send", f"queue_name text, msg jsonb, delay {TS}", "SETOF bigint"),
        _f("send", "queue_name text, msg jsonb, headers jsonb, delay integer", "SETOF bigint"),
        _f("_validate_batch_params", "msgs jsonb[], headers jsonb[]", "void"),
        _f("_send_batch", f"queue_name text, msgs jsonb[], headers jsonb[], delay {TS}", "SETOF bigint"),
        _f("send_batch", f"queue_name text, msgs jsonb[], headers jsonb[], delay {TS}", "SETOF bigint"),
        _f("send_batch", "queue_name text, msgs jsonb[]", "SETOF bigint"),
        _f("send_batch", "queue_name text, msgs jsonb[], headers jsonb[]", "SETOF bigint"),
        _f("send_batch", "queue_name text, msgs jsonb[], delay integer", "SETOF bigint"),
        _f("send_batch", f"queue_name text, msgs jsonb[], delay {TS}", "SETOF bigint"),
        _f("send_batch", "queue_name text, msgs jsonb[], headers jsonb[], delay integer", "SETOF bigint"),
        _f("_delay_to_vt", "delay integer", TS, upstream=False, upstream_path=True),
        # reading
        _f("read", "queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb", MSGS),
        _f(
            "read_with_poll",
            "queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, "
            "poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb",
            MSGS,
        ),
        _f("pop", "queue_name text, qty integer DEFAULT 1", MSGS),
        # deleting / archiving
        _f("delete", "queue_name text, msg_id bigint", "boolean"),
        _f("delete", "queue_name text, msg_ids bigint[]", "SETOF bigint"),
        _f("archive", "queue_name text, msg_id bigint", "boolean"),
        _f("archive", "queue_name text, msg_ids bigint[]", "SETOF bigint"),
        # visibility timeout
        _f("set_vt", f"queue_name text, msg_ids bigint[], vt {TS}", MSGS),
        _f("set_vt", "queue_name text, msg_ids bigint[], vt integer", MSGS),
        _f("set_vt", f"queue_name text, msg_id bigint, vt {TS}", MSGS),
        _f("set_vt", "queue_name text, msg_id bigint, vt integer", MSGS),
        # metrics
        _f("metrics", "queue_name text", "pgmq.metrics_result"),
        _f("metrics_all", "", "SETOF pgmq.metrics_result"),
    ),
)

POLL = "max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100"
KEEPS_SEARCH_PATH = ("pg_partman sets search_path at session level; this outer function puts the caller's "
                     "value back after its pinned inner function returns")
PART_DEFAULTS = "partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text"

PARTITIONED = Feature(
    name="partitioned",
    requires=("core",),
    templates=("functions/partman.sql.j2", "functions/create_partitioned.sql.j2"),
    functions=(
        _f("_extension_schema", "extension_name text", "text", upstream=False),
        _f("_get_pg_partman_schema", "", "text"),
        _f("_get_pg_partman_major_version", "", "integer"),
        _f("_ensure_pg_partman_installed", "", "void"),
        _f("_get_partition_col", "partition_interval text", "text"),
        # Each routine calling pg_partman is an unpinned outer function that keeps the caller's
        # search_path and a pinned inner one doing the work (create_partitioned.sql.j2).
        _f("create_partitioned", f"queue_name text, {PART_DEFAULTS}, premake integer DEFAULT 4", "void",
           unpinned_reason=KEEPS_SEARCH_PATH),
        _f("_create_partitioned", "queue_name text, partition_interval text, retention_interval text, "
           "premake integer", "void", upstream=False, upstream_path=True),
        _f("convert_archive_partitioned",
           f"table_name text, {PART_DEFAULTS}, leading_partition integer DEFAULT 10", "void",
           unpinned_reason=KEEPS_SEARCH_PATH),
        _f("_convert_archive_partitioned", "table_name text, partition_interval text, "
           "retention_interval text, leading_partition integer", "void", upstream=False, upstream_path=True),
        _f("run_partition_maintenance", "queue_name text DEFAULT NULL::text", "void", upstream=False,
           unpinned_reason=KEEPS_SEARCH_PATH),
        _f("_run_partition_maintenance", "queue_name text", "void", upstream=False),
    ),
)

FIFO = Feature(
    name="fifo",
    requires=("core",),
    templates=("functions/fifo_index.sql.j2", "functions/read_grouped.sql.j2"),
    functions=(
        _f("_create_fifo_index_if_not_exists", "queue_name text", "void"),
        _f("_build_fifo_index", "queue_name text", "void", upstream=False, security_definer=True,
           definer_reason="creates the FIFO index on a table that belongs to the extension's owner, for the "
           "queue's owner proven by _prove_caller; the index definition is fixed"),
        _f("create_fifo_index", "queue_name text", "void"),
        _f("create_fifo_indexes_all", "", "void"),
        _f("read_grouped", "queue_name text, vt integer, qty integer", MSGS),
        _f("read_grouped_with_poll", f"queue_name text, vt integer, qty integer, {POLL}", MSGS),
        _f("read_grouped_rr", "queue_name text, vt integer, qty integer", MSGS),
        _f("read_grouped_rr_with_poll", f"queue_name text, vt integer, qty integer, {POLL}", MSGS),
        _f("read_grouped_head", "queue_name text, vt integer, qty integer", MSGS),
        _f("read_grouped_head_with_poll", f"queue_name text, vt integer, qty integer, {POLL}", MSGS),
    ),
)

ROUTED = "TABLE(queue_name text, msg_id bigint)"

EXCHANGE_ROW = (f"TABLE(exchange_name text, exchange_type text, owner name, on_unroutable text, "
                f"alternate_exchange text, created_at {TS})")

# Exchanges and upstream's topics: one routing engine (_route); topic_bindings is a view of the
# built-in topic exchange 'pgmq.topic'.
ROUTING = Feature(
    name="routing",
    requires=("core",),
    # the generated column of exchange_bindings calls _topic_regex, so validate.sql.j2 comes first
    templates=("functions/validate.sql.j2", "tables.sql.j2", "functions/routing.sql.j2",
               "functions/exchanges.sql.j2", "functions/bindings.sql.j2", "functions/publish.sql.j2",
               "functions/send_topic.sql.j2"),
    config_tables=("exchanges", "exchange_bindings", "exchange_publishers"),
    functions=(
        _f("validate_routing_key", "routing_key text", "boolean"),
        _f("validate_topic_pattern", "pattern text", "boolean"),
        _f("_validate_routing_key", "routing_key text", "boolean", upstream=False),
        _f("_validate_topic_pattern", "pattern text", "boolean", upstream=False),
        _f("_topic_regex", "pattern text", "text", upstream=False),
        # the engine
        _f("_headers_match", "arguments jsonb, headers jsonb", "boolean", upstream=False),
        _f("_headers_arguments", "binding_key text", "jsonb", upstream=False),
        _f("_may_publish", "exchange_name text", "boolean", upstream=False),
        _f("_exchange_for_publish", "exchange_name text, routing_key text", "pgmq.exchanges", upstream=False),
        _f("_route", "exchange_name text, routing_key text, headers jsonb", "SETOF text", upstream=False),
        _f("_unroutable", "exchange_name text, routing_key text, on_unroutable text", "void", upstream=False),
        # exchanges (pgpro_queue's signatures first)
        _f("_owns_role", "role_name name", "boolean", upstream=False),
        _f("create_exchange", "e_name name, e_type text DEFAULT 'fanout'::text", "void", upstream=False),
        _f("drop_exchange", "e_name name, do_cascade boolean", "void", upstream=False),
        _f("set_unroutable", "exchange_name text, on_unroutable text, alternate_exchange text DEFAULT NULL::text",
           "void", upstream=False),
        _f("list_exchanges", "", EXCHANGE_ROW, upstream=False),
        _f("list_exchange_bindings", "exchange_name text DEFAULT NULL::text",
           f"TABLE(exchange_name text, queue_name text, binding_key text, bound_at {TS})", upstream=False),
        _f("_bind", "exchange_name text, queue_name text, binding_key text", "boolean", upstream=False),
        _f("_unbind", "exchange_name text, queue_name text, binding_key text", "bigint", upstream=False),
        _f("bind_queue", "q_name name, e_name name, e_key text", "void", upstream=False),
        _f("unbind_queue", "q_name name, e_name name, e_key text", "void", upstream=False),
        _f("publish", f"exchange_name text, routing_key text, msg jsonb, headers jsonb, delay {TS}", ROUTED,
           upstream=False),
        _f("publish", "exchange_name text, routing_key text, msg jsonb, headers jsonb DEFAULT NULL::jsonb, "
           "delay integer DEFAULT 0", ROUTED, upstream=False),
        _f("test_exchange_routing", "exchange_name text, routing_key text, headers jsonb DEFAULT NULL::jsonb",
           "TABLE(queue_name text)", upstream=False),
        # upstream's topic API
        _f("bind_topic", "pattern text, queue_name text", "void"),
        _f("unbind_topic", "pattern text, queue_name text", "boolean"),
        _f("list_topic_bindings", "",
           f"TABLE(pattern text, queue_name text, bound_at {TS}, compiled_regex text)"),
        _f("list_topic_bindings", "queue_name text",
           f"TABLE(pattern text, queue_name text, bound_at {TS}, compiled_regex text)"),
        _f("test_routing", "routing_key text", "TABLE(pattern text, queue_name text, compiled_regex text)"),
        _f("send_topic", "routing_key text, msg jsonb, headers jsonb, delay integer", "integer"),
        _f("send_topic", "routing_key text, msg jsonb", "integer"),
        _f("send_topic", "routing_key text, msg jsonb, delay integer", "integer"),
        _f("send_topic", "routing_key text, msg jsonb, headers jsonb", "integer", upstream=False),
        _f("send_batch_topic", f"routing_key text, msgs jsonb[], headers jsonb[], delay {TS}", ROUTED),
        _f("send_batch_topic", "routing_key text, msgs jsonb[]", ROUTED),
        _f("send_batch_topic", "routing_key text, msgs jsonb[], headers jsonb[]", ROUTED),
        _f("send_batch_topic", "routing_key text, msgs jsonb[], delay integer", ROUTED),
        _f("send_batch_topic", f"routing_key text, msgs jsonb[], delay {TS}", ROUTED),
        _f("send_batch_topic", "routing_key text, msgs jsonb[], headers jsonb[], delay integer", ROUTED),
    ),
)

NOTIFY = Feature(
    name="notify",
    requires=("core",),
    templates=("tables.sql.j2", "functions/notify_insert.sql.j2", "functions/notify_msg_id.sql.j2"),
    config_tables=("notify_insert_throttle",),
    functions=(
        _f("notify_queue_listeners", "", "trigger", security_definer=True,
           definer_reason="a trigger (cannot be called directly): senders advance the queue's throttle "
           "clock without the right to change its throttle settings; it ignores tables outside the schema"),
        _f("_set_notify_trigger", "queue_name text, kind text, enable boolean", "void", upstream=False,
           security_definer=True,
           definer_reason="creates or drops one of our two fixed notification triggers on a table that belongs "
           "to the extension's owner, for the queue's owner proven by _prove_caller"),
        _f("enable_notify_insert", "queue_name text, throttle_interval_ms integer DEFAULT 250", "void"),
        _f("disable_notify_insert", "queue_name text", "void"),
        _f("update_notify_insert", "queue_name text, throttle_interval_ms integer", "void"),
        _f("list_notify_insert_throttles", "",
           f"TABLE(queue_name text, throttle_interval_ms integer, last_notified_at {TS})"),
        _f("_notify_msg_id", "", "trigger", upstream=False),
        _f("enable_notify_msg_id", "queue_name text", "void", upstream=False),
        _f("disable_notify_msg_id", "queue_name text", "void", upstream=False),
    ),
)

DELIVERY = Feature(
    name="delivery",
    requires=("core",),
    templates=("tables.sql.j2", "functions/policy.sql.j2", "functions/dead_letter.sql.j2",
               "functions/nack.sql.j2", "functions/dedup.sql.j2", "functions/reserve.sql.j2",
               "functions/expire.sql.j2"),
    config_tables=("queue_settings", "dedup_keys"),
    functions=(
        _f("set_retry_policy",
           "queue_name text, max_retries integer, retry_delay integer DEFAULT 0, "
           "backoff_factor double precision DEFAULT 1, max_retry_delay integer DEFAULT NULL::integer, "
           "dead_letter_queue text DEFAULT NULL::text", "void", upstream=False),
        _f("remove_retry_policy", "queue_name text", "void", upstream=False),
        _f("set_dedup_window", "queue_name text, seconds integer", "void", upstream=False),
        _f("set_message_ttl", "queue_name text, seconds integer", "void", upstream=False),
        _f("list_queue_settings", "",
           "TABLE(queue_name text, retry_policy boolean, max_retries integer, retry_delay integer, "
           "backoff_factor double precision, max_retry_delay integer, dead_letter_queue text, "
           "dedup_window integer, message_ttl integer)", upstream=False),
        _f("_note_message_limits", "queue_name text", "void", upstream=False, security_definer=True,
           definer_reason="senders with access to a queue must be able to flag it (it only makes reads "
           "check per-message limits) without the right to change its settings"),
        _f("_retry_delay", "attempts integer, retry_delay integer, backoff_factor double precision, "
           "max_retry_delay integer", "integer", upstream=False),
        _f("_dead_letter", "queue_name text, msg_ids bigint[], reason text, error text DEFAULT NULL::text",
           "bigint", upstream=False),
        _f("redrive", "dead_letter_queue text, target_queue text DEFAULT NULL::text, "
           "max_messages integer DEFAULT NULL::integer", "bigint", upstream=False),
        _f("_record_failure", "queue_name text, msg_id bigint, attempts integer, reason text, "
           "error text DEFAULT NULL::text", "void", upstream=False),
        _f("nack", "queue_name text, msg_id bigint, error text DEFAULT NULL::text", "boolean", upstream=False),
        _f("checkpoint", "queue_name text, msg_id bigint, msg jsonb, vt integer, extra_retries integer DEFAULT 0",
           "boolean", upstream=False),
        _f("_send_dedup", f"queue_name text, msg jsonb, headers jsonb, delay {TS}", "bigint", upstream=False),
        _f("send_reserved", "queue_name text, msg jsonb, confirm_within integer, headers jsonb DEFAULT NULL::jsonb",
           "bigint", upstream=False),
        _f("confirm", "queue_name text, msg_ids bigint[]", "bigint", upstream=False),
        _f("expire_messages", "queue_name text DEFAULT NULL::text", "bigint", upstream=False),
    ),
)

ANY_FILTERS = "q_name name, q_msg_hfilter jsonb DEFAULT NULL::jsonb, q_msg_pfilter jsonb DEFAULT NULL::jsonb"
INSERT_OPTIONS = ("q_msg_priority integer DEFAULT 0, q_msg_properties jsonb DEFAULT '{}'::jsonb, "
                  "q_msg_retries integer DEFAULT NULL::integer, q_msg_retrydelay integer DEFAULT NULL::integer, "
                  f"q_msg_enable_time {TS} DEFAULT NULL::{TS}")

# GUCs the payload conversions pin so that text round trips are exact (templates/_macros/payload.sql.j2).
PAYLOAD_IO = ("DateStyle=ISO, YMD", "IntervalStyle=postgres", "extra_float_digits=1", "bytea_output=hex",
              "xmloption=content", "array_nulls=on", "lc_monetary=C")
TYPED_ROWS = (f"TABLE(msg_id bigint, read_ct integer, enqueued_at {TS}, last_read_at {TS}, visible_at {TS}, "
              "payload anyelement, headers jsonb)")

PAYLOADS = Feature(
    name="payloads",
    requires=("core", "delivery"),
    templates=("functions/types.sql.j2", "functions/messages.sql.j2"),
    functions=(
        _f("_payload_type_of", "queue_name text", "text", upstream=False),
        _f("_encode_payload", "payload anyelement, extra_headers jsonb, OUT message jsonb, OUT headers jsonb",
           "record", upstream=False, settings=PAYLOAD_IO),
        _f("_payload_ok", "payload text, type_name text", "boolean", upstream=False, settings=PAYLOAD_IO),
        _f("_decode_payload", "message jsonb, headers jsonb, payload_type anyelement", "anyelement",
           upstream=False, settings=PAYLOAD_IO),
        _f("_payload_type_untrusted", "payload_type regtype", "text", upstream=False),
        _f("_set_payload_check", "queue_name text, type_name text", "void", upstream=False, security_definer=True,
           definer_reason="adds or drops the fixed payload CHECK constraint on a table that belongs to the "
           "extension's owner, for the queue's owner proven by _prove_caller; trusted types only"),
        _f("set_payload_type", "queue_name text, payload_type regtype", "void", upstream=False),
        _f("create", "queue_name text, payload_type regtype", "void", upstream=False),
        _f("payload_type", "queue_name text", "regtype", upstream=False),
        _f("send_payload", "queue_name text, payload anyelement, headers jsonb DEFAULT NULL::jsonb, "
           "delay integer DEFAULT 0", "bigint", upstream=False),
        _f("read_payload", "queue_name text, vt integer, qty integer, payload_type anyelement", TYPED_ROWS,
           upstream=False),
        _f("pop_payload", "queue_name text, qty integer, payload_type anyelement", TYPED_ROWS, upstream=False),
    ),
)

PGPRO = Feature(
    name="pgpro",
    requires=("core", "delivery", "payloads", "routing"),
    templates=("functions/queues.sql.j2", "functions/messages.sql.j2", "functions/publish.sql.j2"),
    functions=(
        _f("queue_initialize", "", "void", upstream=False),
        _f("queue_deinitialize", "", "void", upstream=False),
        _f("create_queue", "queue_name name, queue_type character DEFAULT 'N'::bpchar, "
           "queue_dlq name DEFAULT NULL::name, queue_retries integer DEFAULT 10, "
           "queue_retry_delay integer DEFAULT 30", None, upstream=False),
        _f("alter_queue", "queue_name name, new_type character DEFAULT NULL::bpchar, "
           "new_dlq name DEFAULT NULL::name, new_retries integer DEFAULT NULL::integer, "
           "new_retrydelay integer DEFAULT NULL::integer", None, upstream=False),
        _f("drop_queue", "queue_name name", None, upstream=False),
        _f("get_queue_table", "queue_name name", "oid", upstream=False),
        _f("_xid_status", "xid32 bigint", "text", upstream=False),
        _f("_claim_message", "queue_name text, hfilter jsonb, pfilter jsonb, only_msg_id bigint, "
           "kinds text[] DEFAULT NULL::text[]", "pgmq.message_record", upstream=False),
        _f("_take_message", "queue_name text, hfilter jsonb, pfilter jsonb, only_msg_id bigint, "
           "kinds text[] DEFAULT NULL::text[]", "pgmq.message_record", upstream=False),
        _f("insert_message", f"q_name name, q_msg_body jsonb, {INSERT_OPTIONS}", None, upstream=False),
        _f("insert_message_xml", f"q_name name, q_msg_body xml, {INSERT_OPTIONS}", None, upstream=False),
        _f("publish_message", f"e_name name, e_routing_key text, q_msg_body jsonb, {INSERT_OPTIONS}", None,
           upstream=False),
        _f("publish_message_xml", f"e_name name, e_routing_key text, q_msg_body xml, {INSERT_OPTIONS}", None,
           upstream=False),
        _f("read_message", ANY_FILTERS, "jsonb", upstream=False),
        _f("read_message_xml", ANY_FILTERS, "xml", upstream=False),
        _f("read_message_by_id", "q_name name, msgid bigint", "jsonb", upstream=False),
        _f("read_message_by_id_xml", "q_name name, msgid bigint", "xml", upstream=False),
        _f("read_message_any", ANY_FILTERS + ", OUT q_jsonb jsonb, OUT q_xml xml", "record", upstream=False),
        _f("read_message_by_id_any", "q_name name, msgid bigint, OUT body jsonb, OUT body_xml xml", "record",
           upstream=False),
    ),
)

CALLBACKS = Feature(
    name="callbacks",
    requires=("core", "delivery", "pgpro"),
    templates=("tables.sql.j2", "functions/callbacks.sql.j2"),
    config_tables=("callbacks",),
    functions=(
        _f("register_callback", "q_name text, callback text", None, upstream=False,
           unpinned_reason="resolves the callback's name in the caller's search_path"),
        _f("unregister_callback", "q_name text, callback text", None, upstream=False,
           unpinned_reason="resolves the callback's name in the caller's search_path"),
        _f("_register_callback", "q_name text, proc regprocedure, callback text, caller_search_path text", None,
           upstream=False),
        _f("_unregister_callback", "q_name text, proc regprocedure, callback text", None, upstream=False),
        _f("_make_callback_runner", "role_name name", "void", upstream=False, security_definer=True,
           definer_reason="creates a role's callback runner (a fixed SECURITY DEFINER function) in the schema "
           "and hands it to that role, for a proven caller that may act as it, so that callbacks run with "
           "their registrant's rights"),
        _f("list_callbacks", "", f"TABLE(queue_name text, callback text, registered_at {TS})", upstream=False),
        _f("_dispatch_one", "queue_name text", "text", upstream=False),
        _f("_callback_queues", "queue_name text", "text[]", upstream=False),
        _f("dispatch", "queue_name text DEFAULT NULL::text, max_messages integer DEFAULT 100", None,
           upstream=False, commits=True,
           unpinned_reason="commits once per message, so one failing callback never undoes another"),
    ),
)

ACCESS = Feature(
    name="access",
    requires=("core", "delivery", "routing", "notify", "callbacks"),
    templates=("functions/access.sql.j2", "policies.sql.j2"),
    functions=(
        _f("_set_queue_access", "queue_name name, role_name name, allow boolean", "void", upstream=False,
           security_definer=True,
           definer_reason="grants and revokes privileges on tables that belong to the extension's owner, for "
           "the queue's owner proven by _prove_caller; only the fixed table privileges of a queue"),
        _f("grant_queue_access", "queue_name name, role_name name", None, upstream=False),
        _f("grant_queue_access", "queue_name name, role_oid oid", None, upstream=False),
        _f("revoke_queue_access", "queue_name name, role_name name", None, upstream=False),
        _f("revoke_queue_access", "queue_name name, role_oid oid", None, upstream=False),
        _f("reset_queue_access", "queue_name name", None, upstream=False),
        _f("grant_publish_access", "exchange_name name, role_name name", None, upstream=False),
        _f("revoke_publish_access", "exchange_name name, role_name name", None, upstream=False),
    ),
)

# Features in render order.
MANIFEST = Manifest(version=VERSION, schema=SCHEMA, released=RELEASED,
                    features=(CORE, DELIVERY, PARTITIONED, FIFO, ROUTING, NOTIFY, PAYLOADS, PGPRO,
                              CALLBACKS, ACCESS),
                    upstream=UPSTREAM_VERSIONS)
