"""Option parsing for the "pgmq" data source (keys are case-insensitive, values strings).

Kept free of pyspark imports; every spec is a small picklable dataclass handed to executors.
Everything here runs in the driver, before any task: a bad option, an option the direction
does not know (a typo) or a column of the wrong type fails the query with PgmqSparkError and
nothing is read or written.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from psycopg.conninfo import make_conninfo

from ..spark_options import OPTIONS, QUEUE_ONLY, STREAM_ONLY
from .errors import PgmqSparkError
from .publishing import Columns
from .staging import DEFAULT_PROGRESS_TABLE, DEFAULT_STAGING_TABLE

TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}
INT32_MAX = 2**31 - 1  # options that reach SQL as integer (claimVt, claimMax, ...)

# The options of each direction, and those that apply to queues or streams only: declared once,
# with their defaults and docs, in pgmq_build/spark_options.py (docs/reference/spark-options.md).


def stream_target(options: Mapping[str, str], direction: str) -> str | None:
    """The stream named by option stream (None: a queue), after refusing a queue together with
    a stream and the options of the other kind."""
    stream = _get(options, "stream")
    if stream is None:
        for key in STREAM_ONLY:
            if _get(options, key) is not None:
                raise PgmqSparkError(f"option {key!r} applies to streams: give option 'stream' "
                                     "(not 'queue')")
        return None
    if not stream:
        raise PgmqSparkError("option 'stream' must name a stream")
    if _get(options, "queue") is not None:
        raise PgmqSparkError("give option 'queue' or option 'stream', not both")
    for key in QUEUE_ONLY:
        if _get(options, key) is not None:
            raise PgmqSparkError(f"option {key!r} applies to queues, not to stream {stream!r} "
                                 f"({direction})")
    return stream


def check_known(options: Mapping[str, str], direction: str) -> None:
    """Refuse an option this direction does not know: a typo would otherwise be ignored."""
    known = {k.lower(): k for k in OPTIONS[direction]}
    for key in options:
        if key.lower() in known:
            continue
        # Spark hands the keys over lower-cased: name the option as documented
        elsewhere = {d: k for d, keys in OPTIONS.items() for k in keys if k.lower() == key.lower()}
        if elsewhere:
            raise PgmqSparkError(f"option {next(iter(elsewhere.values()))!r} is a "
                                 f"{' / '.join(elsewhere)} option: the pgmq data source does not "
                                 f"use it for {direction}")
        close = difflib.get_close_matches(key.lower(), list(known), n=1, cutoff=0.7)
        hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
        raise PgmqSparkError(f"unknown option {key!r} for {direction}{hint}; known: "
                             f"{', '.join(OPTIONS[direction])}")


def _get(options: Mapping[str, str], key: str, default: str | None = None) -> str | None:
    # CaseInsensitiveDict lower-cases keys; plain dicts (tests, helpers) may not.
    if key in options:
        return options[key]
    low = key.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return default


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    v = _get(options, key)
    if v is None:
        return default
    v = str(v).strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise PgmqSparkError(f"option {key} must be true or false, got {v!r}")


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int = 0,
         maximum: int = INT32_MAX) -> int | None:
    v = _get(options, key)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise PgmqSparkError(f"option {key} must be an integer from {minimum} to {maximum}, "
                             f"got {v!r}") from None
    if not minimum <= n <= maximum:
        raise PgmqSparkError(f"option {key} must be an integer from {minimum} to {maximum}, got {n}")
    return n


def _float(options: Mapping[str, str], key: str, default: float) -> float:
    v = _get(options, key)
    if v is None:
        return default
    try:
        f = float(v)
    except ValueError:
        raise PgmqSparkError(f"option {key} must be a number of seconds, got {v!r}") from None
    if not math.isfinite(f) or f < 0:
        raise PgmqSparkError(f"option {key} must be a finite number >= 0, got {v!r}")
    return f


def _choice(options: Mapping[str, str], key: str, default: str, choices: tuple[str, ...]) -> str:
    v = (_get(options, key) or default).strip().lower()
    if v not in choices:
        raise PgmqSparkError(f"option {key} must be one of {', '.join(choices)}, got {v!r}")
    return v


def dsn_of(options: Mapping[str, str]) -> str:
    """Option dsn, plus options user / password when given (Spark redacts option values whose
    key looks like a password in plans and logs, not a password inside the dsn)."""
    dsn = _get(options, "dsn")
    if not dsn:
        raise PgmqSparkError("option 'dsn' is required (a libpq connection string or URL)")
    extra = {k: v for k in ("user", "password") if (v := _get(options, k))}
    return make_conninfo(dsn, **extra) if extra else dsn


@dataclass(frozen=True)
class ReadSpec:
    dsn: str
    queue: str
    table: str  # queue | archive
    num_partitions: int | None
    claim_vt: int | None  # claim mode (pgmq_build.spark.consume): pgmq.read with this vt
    claim_max: int
    conditional: str | None
    stream: str | None = None  # a stream's events between two positions instead of a queue
    from_position: int | None = None  # None: the earliest kept
    to_position: int | None = None  # None: a position made when the read is planned


INT64_MAX = 2**63 - 1  # positions (tick ids) are bigint


def read_spec(options: Mapping[str, str]) -> ReadSpec:
    check_known(options, "read")
    stream = stream_target(options, "read")
    if stream is not None:
        low = _int(options, "fromPosition", None, 0, INT64_MAX)
        high = _int(options, "toPosition", None, 0, INT64_MAX)
        if low is not None and high is not None and high < low:
            raise PgmqSparkError(f"option toPosition ({high}) is before fromPosition ({low})")
        return ReadSpec(dsn=dsn_of(options), queue="", table="stream",
                        num_partitions=_int(options, "numPartitions", None, 1), claim_vt=None,
                        claim_max=0, conditional=None, stream=stream, from_position=low,
                        to_position=high)
    conditional = _get(options, "conditional")
    if conditional:
        try:
            if not isinstance(json.loads(conditional), dict):
                raise ValueError
        except ValueError:
            raise PgmqSparkError("option conditional must be a JSON object") from None
    return ReadSpec(
        dsn=dsn_of(options), queue=_get(options, "queue") or "",
        table=_choice(options, "table", "queue", ("queue", "archive")),
        num_partitions=_int(options, "numPartitions", None, 1),
        claim_vt=_int(options, "claimVt", None, 0),
        claim_max=_int(options, "claimMax", 1000, 1) or 1000,
        conditional=conditional)


@dataclass(frozen=True)
class WriteSpec:
    dsn: str
    queue: str | None
    exchange: str | None
    routed: bool  # topic (send_topic) or exchange (publish) routing by a routing-key column
    columns: Columns
    write_mode: str  # copy | send
    exactly_once: bool
    idempotency_key: str | None
    create_queue: bool
    allow_unroutable: bool
    staging_table: str
    progress_table: str
    sink_id: str | None
    stream: str | None = None  # events appended to this stream instead of a queue


# Spark types (DataType.simpleString()) each column may have; encode() converts exactly these.
_JSON_TYPES = ("string", "binary", "struct<", "map<", "array<")
_INT_TYPES = ("tinyint", "smallint", "int", "bigint")
COLUMN_TYPES = {
    "message": ("a string (JSON text), binary, struct, map or array", _JSON_TYPES),
    "headers": ("a string (JSON text), binary, struct, map or array", _JSON_TYPES),
    "delay": ("an integer (seconds) or a timestamp", _INT_TYPES + ("timestamp", "timestamp_ntz")),
    "priority": ("an integer", _INT_TYPES),
    "routingKey": ("a string", ("string",)),
}


def _check_type(what: str, option: str, column: str, types: Mapping[str, str]) -> None:
    allowed, prefixes = COLUMN_TYPES[what]
    t = types[column]
    if not any(t == p or (p.endswith("<") and t.startswith(p)) for p in prefixes):
        raise PgmqSparkError(f"the {what} column {column!r} (option {option}) must be {allowed}, "
                             f"not {t}")


def _column_option(options: Mapping[str, str], key: str, default: str | None,
                   names: Sequence[str]) -> str | None:
    """An explicit option wins ('' disables); otherwise the default name if the column exists."""
    v = _get(options, key)
    if v is not None:
        v = v.strip()
        if v and v not in names:
            raise PgmqSparkError(f"option {key}: no column {v!r} in {names}")
        return v or None
    return default if default in names else None


def write_spec(options: Mapping[str, str], names: Sequence[str] | Mapping[str, str], *,
               streaming: bool) -> WriteSpec:
    """``names``: the DataFrame's column names, or a mapping of each to its Spark type
    (``simpleString()``), which is then checked against what each column may be."""
    check_known(options, "write")
    types = names if isinstance(names, Mapping) else None
    names = list(names)
    stream = stream_target(options, "write")
    queue = _get(options, "queue")
    exchange = _get(options, "exchange")
    rk_explicit = _get(options, "routingKeyColumn")
    routed = bool(exchange) or bool(rk_explicit)
    if routed and queue:
        raise PgmqSparkError("give either option queue, or exchange / routingKeyColumn (routing), "
                             "not both")
    if not routed and not queue and not stream:
        raise PgmqSparkError("option 'queue' is required (or 'stream', or exchange + "
                             "routingKeyColumn)")
    message = _get(options, "messageColumn") or "message"
    if message not in names:
        raise PgmqSparkError(f"no message column {message!r} in {names}: name it 'message' or set "
                             "option messageColumn")
    cols = Columns(
        message=message,
        headers=_column_option(options, "headersColumn", "headers", names),
        # a stream's events have no delay or priority: such columns are not picked up
        delay=None if stream else _column_option(options, "delayColumn", "delay", names),
        priority=None if stream else _column_option(options, "priorityColumn", "priority", names),
        routing_key=_column_option(options, "routingKeyColumn", "routing_key", names) if routed else None)
    if routed and not cols.routing_key:
        raise PgmqSparkError(f"routing needs a routing key column ('routing_key' or option "
                             f"routingKeyColumn) in {names}")
    if types is not None:
        for what, column in (("message", cols.message), ("headers", cols.headers),
                             ("delay", cols.delay), ("priority", cols.priority),
                             ("routingKey", cols.routing_key)):
            if column:
                _check_type(what, f"{what}Column", column, types)
    key = _get(options, "idempotencyKey")
    return WriteSpec(
        dsn=dsn_of(options), queue=queue, exchange=exchange or None, routed=routed, columns=cols,
        write_mode=_choice(options, "writeMode", "copy", ("copy", "send")),
        exactly_once=_bool(options, "exactlyOnce", streaming) or bool(key),
        idempotency_key=key or None,
        create_queue=_bool(options, "createQueue", False),
        allow_unroutable=_bool(options, "allowUnroutable", False),
        staging_table=_get(options, "stagingTable") or DEFAULT_STAGING_TABLE,
        progress_table=_get(options, "progressTable") or DEFAULT_PROGRESS_TABLE,
        sink_id=_get(options, "sinkId") or None, stream=stream)


@dataclass(frozen=True)
class StreamSpec:
    dsn: str
    queue: str
    max_rows: int | None
    starting: str  # earliest | latest
    on_commit: str  # archive | delete | none
    ack_on_latest_offset: bool
    safe_offsets: bool
    inflight_wait: float
    num_partitions: int
    respect_visibility: bool
    max_pending: int
    stream: str | None = None  # a stream subscription's events instead of a queue
    subscription: str | None = None


def stream_spec(options: Mapping[str, str]) -> StreamSpec:
    check_known(options, "readStream")
    stream = stream_target(options, "readStream")
    if stream is not None:
        subscription = _get(options, "subscription")
        if not subscription:
            raise PgmqSparkError(f"reading stream {stream!r} as a stream needs option "
                                 "'subscription' (created when missing; the query must be its "
                                 "only consumer)")
        starting = (_get(options, "startingOffsets") or "earliest").strip().lower()
        if starting not in ("earliest", "latest") and not (starting.isdigit() and len(starting) <= 18):
            raise PgmqSparkError(f"option startingOffsets must be earliest, latest or a position "
                                 f"(a tick id), got {starting!r}")
        return StreamSpec(
            dsn=dsn_of(options), queue="", max_rows=_int(options, "maxRowsPerBatch", None, 1),
            starting=starting, on_commit="none",
            ack_on_latest_offset=_bool(options, "ackOnLatestOffset", True), safe_offsets=False,
            inflight_wait=0.0, num_partitions=_int(options, "numPartitions", 2, 1) or 2,
            respect_visibility=False, max_pending=0, stream=stream, subscription=subscription)
    return StreamSpec(
        dsn=dsn_of(options), queue=_get(options, "queue") or "",
        max_rows=_int(options, "maxRowsPerBatch", None, 1),
        starting=_choice(options, "startingOffsets", "earliest", ("earliest", "latest")),
        on_commit=_choice(options, "onCommit", "archive", ("archive", "delete", "none")),
        ack_on_latest_offset=_bool(options, "ackOnLatestOffset", True),
        safe_offsets=_bool(options, "safeOffsets", True),
        inflight_wait=_float(options, "inflightWaitSeconds", 5.0),
        num_partitions=_int(options, "numPartitions", 2, 1) or 2,
        respect_visibility=_bool(options, "respectVisibility", True),
        max_pending=_int(options, "maxPendingMessages", 10_000, 0, 2**62) or 0)


def sink_key(spec: WriteSpec, options: Mapping[str, str]) -> str:
    """The stream sink's stable name from the options alone (executors can compute it too):
    option sinkId, else the checkpoint location as given."""
    if spec.sink_id:
        return spec.sink_id
    ck = _get(options, "checkpointLocation")
    if not ck:
        raise PgmqSparkError("the exactly-once pgmq sink needs option checkpointLocation (set it "
                             "on writeStream with .option('checkpointLocation', ...)) or option "
                             "sinkId (a name unique to this query), or exactlyOnce=false")
    return ck


def sink_id(spec: WriteSpec, key: str) -> str:
    """The key under which the stream sink records committed batch ids (driver side, at commit):
    option sinkId as given; else the checkpoint location plus the query id stored in it, when the
    checkpoint is on a local file system (so a deleted and re-created checkpoint, a new query id,
    does not inherit the old batch ids)."""
    if spec.sink_id:
        return spec.sink_id
    parsed = urlparse(key)
    if parsed.scheme not in ("", "file"):
        return key
    local = Path(parsed.path)
    try:
        query_id = json.loads((local / "metadata").read_text().splitlines()[0]).get("id", "")
    except (OSError, ValueError, IndexError, AttributeError):
        return key
    return f"{os.path.abspath(str(local))}#{query_id}" if query_id else key
