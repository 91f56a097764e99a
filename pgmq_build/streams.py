"""Streams on the Python side (README: Streams): the rows the stream routines return, and the
handling of one subscription batch, shared by ``Client.consume_stream`` and the worker's
``--stream`` consumers.

A batch is leased by ``pgmq.stream_read`` in a statement of its own (so that other consumers of
the subscription can cut the next batch meanwhile), then the handler runs and
``pgmq.stream_ack`` follows **in one transaction on the connection the handler was given**:

- the handler returns: its writes on that connection and the ack commit together, exactly once;
- the handler raises: that transaction rolls back (its writes too) and the batch comes back to
  a consumer when its lease runs out, under a new batch_id;
- the lease ran out before the ack (a handler slower than ``lease_seconds``): the ack fails with
  55000, the transaction rolls back, and the consumer that took the batch over does the work;
- the connection or the process dies: nothing of the transaction stays; the batch comes back
  after its lease.

Work a handler does outside that connection (HTTP calls, other databases, files) is therefore
at-least-once: repeated for every delivery that did not commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

__all__ = ["BatchHandler", "StreamBatch", "StreamEvent", "StreamRecord", "SubscriptionInfo",
           "handle_batch", "read_batch", "DONE", "FAILED", "EXPIRED"]

# What handle_batch reports.
DONE = "done"  # handler returned; its work and the ack committed
FAILED = "failed"  # handler raised (or left the transaction failed): rolled back, comes back after the lease
EXPIRED = "expired"  # the lease ran out before the ack: rolled back, another consumer has the batch

_NOT_OUT = "55000"  # stream_ack: the batch is not out (acknowledged, or its lease ran out)
_FAILED_TRANSACTION = "25P02"  # the handler swallowed an error and left the transaction failed


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a batch (a row of ``pgmq.stream_read``)."""

    ev_id: int
    ev_time: datetime
    message: Any
    headers: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """A leased batch of a subscription: every event committed between two ticks, in ev_id
    order. Acknowledge it (``stream_ack``) with ``batch_id`` before ``leased_for`` seconds."""

    stream: str
    subscription: str
    batch_id: int
    events: tuple[StreamEvent, ...]
    leased_for: int

    @property
    def messages(self) -> list[Any]:
        return [e.message for e in self.events]

    def __len__(self) -> int:
        return len(self.events)


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One row of ``pgmq.stream_info()``: a subscription's position (a tick id) and its time,
    its lag in events and seconds, its batches out and the events retention dropped before it
    acknowledged them."""

    stream_name: str
    subscription_name: str
    position: int
    position_time: datetime
    lag_events: int
    lag_seconds: float
    batches_out: int
    lost: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SubscriptionInfo:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One row of ``pgmq.list_streams()``."""

    stream_name: str
    owner: str
    retention: timedelta
    rotation_period: timedelta
    retention_bytes: int | None
    drop_unacked: bool
    segments: int
    total_bytes: int
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StreamRecord:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


BatchHandler = Callable[[StreamBatch, psycopg.Connection], object]

_READ = ("SELECT batch_id, ev_id, ev_time, message, headers FROM pgmq.stream_read("
         "stream_name => %s::text, subscription_name => %s::text, lease_seconds => %s::integer)")
_ACK = ("SELECT pgmq.stream_ack(stream_name => %s::text, subscription_name => %s::text, "
        "batch_id => %s::bigint)")


def read_batch(conn: psycopg.Connection, stream: str, subscription: str,
               lease_seconds: int) -> StreamBatch | None:
    """Lease the subscription's next batch (None when nothing is new, or while another consumer
    of the subscription cuts a batch or acknowledges). On an autocommit connection the lease is
    committed at once; inside a transaction it lasts as long as that transaction."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_READ, (stream, subscription, lease_seconds)).fetchall()
    if not rows:
        return None
    return StreamBatch(stream, subscription, int(rows[0]["batch_id"]),
                       tuple(StreamEvent(r["ev_id"], r["ev_time"], r["message"], r["headers"])
                             for r in rows), lease_seconds)


def ack(conn: psycopg.Connection, batch: StreamBatch) -> None:
    conn.execute(_ACK, (batch.stream, batch.subscription, batch.batch_id))


def handle_batch(conn: psycopg.Connection, batch: StreamBatch,
                 handler: BatchHandler) -> tuple[str, BaseException | None]:
    """Run ``handler(batch, conn)`` and acknowledge the batch in one transaction on ``conn``
    (module doc). Returns (DONE | FAILED | EXPIRED, the handler's exception or the ack's
    error). psycopg errors of the transaction itself (a broken connection, a dropped
    subscription) propagate: nothing was committed."""
    failure: BaseException | None = None
    try:
        with conn.transaction():
            try:
                handler(batch, conn)
            except Exception as exc:
                failure = exc
                raise psycopg.Rollback() from exc  # rolls the handler's writes back, quietly
            ack(conn, batch)
    except psycopg.Error as exc:
        if failure is not None and (conn.broken or conn.closed):
            raise  # the handler's error broke the connection: the caller reconnects
        if exc.sqlstate == _NOT_OUT:
            return EXPIRED, exc
        if exc.sqlstate == _FAILED_TRANSACTION:
            return FAILED, exc
        raise
    if failure is not None:
        return FAILED, failure
    return DONE, None
