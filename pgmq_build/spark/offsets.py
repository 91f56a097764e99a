"""The stream reader's offsets (psycopg, no pyspark import): a stream position (msg_id plus the
ids held back as not yet visible), the safe high-water mark (no transaction that may still
commit a lower msg_id is running), the planning of the next batch, its split into partitions
(read by snapshot.read_range) and the ack of what a committed batch delivered."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from . import ranges
from .connections import QueueInfo
from .errors import PgmqSparkError


@dataclass
class Offset:
    """A stream position: every message with msg_id <= ``msg_id`` has been planned into a batch,
    except ``pending``: ids <= msg_id that were not yet visible (delayed, leased, reserved) when
    planned, delivered in a later batch once they are."""

    msg_id: int = 0
    pending: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"msg_id": self.msg_id, "pending": sorted(self.pending)}

    @classmethod
    def from_json(cls, d: dict | None) -> Offset:
        if not d:
            return cls()
        return cls(int(d.get("msg_id", 0)), sorted(int(x) for x in d.get("pending", [])))


def last_msg_id(conn: psycopg.Connection, info: QueueInfo) -> int:
    """The queue sequence's last value (0 before the first message)."""
    row = conn.execute(
        "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(%s, 'msg_id')::regclass), 0), "
        "(SELECT s.seqcache FROM pg_sequence s "
        " WHERE s.seqrelid = pg_get_serial_sequence(%s, 'msg_id')::regclass)",
        (info.qname, info.qname)).fetchone()
    if row[1] is not None and row[1] > 1:
        raise PgmqSparkError(f"the msg_id sequence of {info.qtable} has CACHE {row[1]}; the stream's "
                             "safe offsets need CACHE 1 (ALTER SEQUENCE ... CACHE 1), or set "
                             "option safeOffsets=false")
    return int(row[0])


_WRITERS = ("SELECT DISTINCT l.virtualtransaction FROM pg_locks l "
            "WHERE l.locktype = 'relation' AND l.relation = %s::regclass AND l.granted "
            "AND l.mode = 'RowExclusiveLock' AND l.pid IS DISTINCT FROM pg_backend_pid() "
            "AND l.pid <> ALL(%s::integer[]) "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")
_STILL = ("SELECT DISTINCT l.virtualtransaction FROM pg_locks l "
          "WHERE l.locktype = 'relation' AND l.relation = %s::regclass "
          "AND l.virtualtransaction = ANY(%s::text[])")


def safe_high_water_mark(conn: psycopg.Connection, info: QueueInfo, wait_seconds: float,
                         poll: float = 0.02, ignore: Sequence[int] = ()) -> tuple[int, bool]:
    """(L, settled): L is the sequence's last value read *before* looking at the writers; it is
    safe (every transaction that may hold an id <= L has ended, so all such rows that will ever
    exist are visible) once settled is True. A transaction must hold RowExclusiveLock on the
    queue table before it can draw an id, so the writers holding it right after L was read are
    the only ones that may still commit an id <= L; we wait (up to ``wait_seconds``) until each
    of them has ended. ``ignore``: backends known to draw no id (the reader's own acks, which
    only delete). Needs an autocommit connection (fresh snapshots)."""
    high = last_msg_id(conn, info)
    writers = [r[0] for r in conn.execute(_WRITERS, (info.qname, list(ignore))).fetchall()]
    deadline = time.monotonic() + wait_seconds
    while writers:
        writers = [r[0] for r in conn.execute(_STILL, (info.qname, writers)).fetchall()]
        if not writers:
            break
        if time.monotonic() >= deadline:
            return high, False
        time.sleep(poll)
    return high, True


def plan_batch(conn: psycopg.Connection, info: QueueInfo, start: Offset, high: int,
               max_rows: int | None, honor_vt: bool, max_pending: int) -> Offset:
    """The end offset of the next batch after ``start`` with ids up to ``high``: at most
    ``max_rows`` visible messages (pending ones first); messages not yet visible (vt in the
    future) are remembered as pending instead (at most ``max_pending``; beyond that the batch
    stops before the next invisible message). Returns ``start`` when there is nothing new."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        budget = max_rows if max_rows is not None else None
        pending: list[int] = []
        if start.pending:
            rows = conn.execute(sql.SQL(
                "SELECT msg_id, vt <= %s FROM {} WHERE msg_id = ANY(%s::bigint[]) ORDER BY msg_id")
                .format(info.q), (now, start.pending)).fetchall()
            for mid, due in rows:  # ids that are gone (finished by someone, expired) drop out
                if (due or not honor_vt) and (budget is None or budget > 0):
                    if budget is not None:
                        budget -= 1
                else:
                    pending.append(int(mid))
        end = start.msg_id
        if high > start.msg_id and (budget is None or budget > 0):
            end = high
            if budget is not None:
                row = conn.execute(sql.SQL(
                    "SELECT msg_id FROM {} WHERE msg_id > %s AND msg_id <= %s {} "
                    "ORDER BY msg_id OFFSET %s LIMIT 1").format(
                        info.q, sql.SQL("AND vt <= %s") if honor_vt else sql.SQL("")),
                    [start.msg_id, high, *([now] if honor_vt else []), budget - 1]).fetchone()
                if row is not None:
                    end = int(row[0])
            if honor_vt:
                room = max_pending - len(pending)
                later = [int(r[0]) for r in conn.execute(sql.SQL(
                    "SELECT msg_id FROM {} WHERE msg_id > %s AND msg_id <= %s AND vt > %s "
                    "ORDER BY msg_id LIMIT %s").format(info.q),
                    (start.msg_id, end, now, max(room, 0) + 1)).fetchall()]
                if len(later) > room:
                    # too many invisible messages: stop right before the first one over the limit
                    end = later[max(room, 0)] - 1
                    later = later[:max(room, 0)]
                pending.extend(later)
    out = Offset(max(end, start.msg_id), sorted(pending))
    return start if out == start else out


def stream_parts(start: Offset, end: Offset, partitions: int) -> list[tuple[int, int, list[int], list[int]]]:
    """(lo, hi, exclude, include) slices of the batch start -> end: ids in (start, end] minus
    end.pending, plus the start.pending ids that are no longer pending."""
    due = sorted(set(start.pending) - set(end.pending))
    later = set(end.pending)
    span = end.msg_id - start.msg_id
    parts: list[tuple[int, int, list[int], list[int]]] = []
    k = max(1, min(partitions, span)) if span > 0 else 0
    for i in range(k):
        lo = start.msg_id + span * i // k
        hi = start.msg_id + span * (i + 1) // k
        parts.append((lo, hi, sorted(x for x in later if lo < x <= hi), []))
    if due:
        if parts:
            lo, hi, ex, _ = parts[0]
            parts[0] = (lo, hi, ex, due)
        else:
            parts.append((0, 0, [], due))
    return parts


def ack_range(conn: psycopg.Connection, info: QueueInfo, done: Offset, upto: Offset,
              mode: str) -> int:
    """Delete or archive what the stream delivered between ``done`` (already acked) and
    ``upto``: ids in (done, upto] or in done.pending, minus upto.pending, as a few msg_id ranges
    in one pgmq.ack_ranges statement (no lease fence: the stream is its queue's only consumer)."""
    if mode == "none" or (upto.msg_id <= done.msg_id and not set(done.pending) - set(upto.pending)):
        return 0
    if ranges.available(conn):
        firsts, lasts = ranges.id_ranges(done.msg_id, upto.msg_id, upto.pending, done.pending)
        return ranges.ack(conn, info, firsts, lasts, None, archive=mode != "delete")
    return ack_by_ids(conn, info, done, upto, mode)


def ack_by_ids(conn: psycopg.Connection, info: QueueInfo, done: Offset, upto: Offset,
               mode: str) -> int:
    """ack_range on a pgmq without ack_ranges (2.9.0 and older): every id through
    pgmq.delete/archive."""
    fn = "delete" if mode == "delete" else "archive"
    ids = sql.SQL("SELECT msg_id FROM {} WHERE ((msg_id > %s AND msg_id <= %s) "
                  "OR msg_id = ANY(%s::bigint[])) AND msg_id <> ALL(%s::bigint[])").format(info.q)
    stmt = sql.SQL("SELECT count(*) FROM pgmq.{}(queue_name => %s::text, msg_ids => ARRAY({})::bigint[])"
                   ).format(sql.Identifier(fn), ids)
    with conn.transaction():
        n = conn.execute(stmt, (info.queue, done.msg_id, upto.msg_id, done.pending,
                                upto.pending)).fetchone()[0]
    return int(n)
