"""`pgmq-build stream ...`: streams and their subscriptions (README: Streams, Admin CLI).

Everything goes through the stream routines (create_stream, stream_info, subscribe, ...) except
`peek` and `tail`, which look at events without consuming them: streams have no browse
routine, so they read the stream's table (SELECT on it, which readers have) and never touch a
subscription. `tail` shows events as they commit, by comparing transaction snapshots as the
stream's batches do, so an event whose producer commits late is shown when it commits."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
from psycopg import sql

from . import db, render
from .options import confirm, dsn_option, handled, json_option, yes_option
from .render import Output

PEEK_MAX = 1000
SEND_CHUNK = 1000  # events per stream_send_batch call (all of them in one transaction)

_EVENT = "SELECT e.ev_id, e.ev_time, e.message, e.headers FROM {} e"


@click.group("stream")
def stream_group() -> None:
    """Streams: create, drop, list, info, subscribe, unsubscribe, rewind, send, peek, tail."""


def _start(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value in ("latest", "earliest") or (value.isdigit() and len(value) <= 18):
        return value
    raise click.BadParameter("must be latest, earliest or a position (a tick id from stream info)")


def _json_value(what: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=what) from None


def _table(conn: db.Conn, stream: str) -> sql.Composable:
    """The stream's (parent) table: reading it reads every segment."""
    return sql.Identifier("pgmq", db.value(conn, "SELECT pgmq.format_table_name(%s::text, 's')",
                                           (stream,)))


def _event_row(e: dict[str, Any]) -> list[Any]:
    return [e["ev_id"], f"{e['ev_time']:%Y-%m-%d %H:%M:%S}", render.clip(e["message"]),
            None if e["headers"] is None else render.clip(e["headers"], 40)]


EVENT_COLUMNS = ["ev_id", "ev_time", "message", "headers"]


@stream_group.command("list")
@dsn_option
@json_option
@handled
def list_(dsn: str, as_json: bool) -> None:
    """Every stream: retention, rotation, segments, size, subscriptions and the largest lag."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        streams = db.streams(conn)
        subs = db.stream_info(conn)
    per: dict[str, list[dict[str, Any]]] = {}
    for s in subs:
        per.setdefault(s["stream_name"], []).append(s)
    docs = [{**s, "subscriptions": len(per.get(s["stream_name"], [])),
             "max_lag_events": max((x["lag_events"] for x in per.get(s["stream_name"], [])), default=None)}
            for s in streams]
    if as_json:
        out.json({"streams": docs})
        return
    cols = ["stream", "owner", "retention", "rotation", "segments", "size", "subscriptions",
            "max lag"]
    body = [[d["stream_name"], d["owner"], str(d["retention"]), str(d["rotation_period"]),
             d["segments"], render.size(d["total_bytes"]), d["subscriptions"],
             None if d["max_lag_events"] is None else render.count(d["max_lag_events"])]
            for d in docs]
    out.print(render.table(cols, body, right=("segments", "size", "subscriptions", "max lag"),
                           whole=["retention", "rotation"],
                           drop=["rotation", "retention", "owner", "segments"]))
    if not docs:
        out.note("no streams")


@stream_group.command("create")
@click.argument("name")
@click.option("--retention", default="7 days", show_default=True, metavar="INTERVAL",
              help="Keep events at least this long after their segment closes (a PostgreSQL interval).")
@click.option("--rotation-period", default="1 hour", show_default=True, metavar="INTERVAL",
              help="Start a new segment this often (at least 1 second).")
@click.option("--retention-bytes", type=click.IntRange(min=1), default=None,
              help="Drop the oldest closed segments while the stream is larger.")
@click.option("--drop-unacked", is_flag=True,
              help="Retention does not wait for slow subscriptions (they count what they lost).")
@dsn_option
@json_option
@handled
def create(name: str, retention: str, rotation_period: str, retention_bytes: int | None,
           drop_unacked: bool, dsn: str, as_json: bool) -> None:
    """Create stream NAME (nothing happens when it exists)."""
    with db.connect(dsn) as conn:
        existed = any(s["stream_name"] == name for s in db.streams(conn))
        if not existed:
            db.value(conn, "SELECT pgmq.create_stream(stream_name => %s::text, retention => %s::interval, "
                           "rotation_period => %s::interval, retention_bytes => %s::bigint, "
                           "drop_unacked => %s::boolean)",
                     (name, retention, rotation_period, retention_bytes, drop_unacked))
    Output(as_json).result({"stream": name, "created": not existed},
                           f"stream {name} {'already exists' if existed else 'created'}")


@stream_group.command("drop")
@click.argument("name")
@dsn_option
@yes_option
@json_option
@handled
def drop(name: str, dsn: str, yes: bool, as_json: bool) -> None:
    """Drop stream NAME with its events and subscriptions."""
    with db.connect(dsn) as conn:
        row = db.require_stream(conn, name)
        subs = [s["subscription_name"] for s in db.stream_info(conn, name)]
        confirm(f"Drop stream {name!r} ({render.size(row['total_bytes'])} in {row['segments']} "
                f"segment(s)) and its {len(subs)} subscription(s)?", yes)
        db.value(conn, "SELECT pgmq.drop_stream(stream_name => %s::text)", (name,))
    Output(as_json).result({"stream": name, "dropped": True, "subscriptions": subs},
                           f"stream {name} dropped with {len(subs)} subscription(s)")


@stream_group.command("info")
@click.argument("name", required=False)
@dsn_option
@json_option
@handled
def info(name: str | None, dsn: str, as_json: bool) -> None:
    """Every subscription (of stream NAME): position, lag, batches out, events lost."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        if name is not None:
            db.require_stream(conn, name)
        subs = db.stream_info(conn, name)
    if as_json:
        out.json({"subscriptions": subs})
        return
    cols = ["stream", "subscription", "position", "position time", "lag", "lag age",
            "batches out", "lost"]
    body = [[s["stream_name"], s["subscription_name"], s["position"],
             f"{s['position_time']:%Y-%m-%d %H:%M:%S}", render.count(s["lag_events"]),
             render.age(s["lag_seconds"]), s["batches_out"], render.count(s["lost"])] for s in subs]
    out.print(render.table(cols, body, right=("position", "lag", "lag age", "batches out", "lost"),
                           whole=["position time"],
                           drop=["position time", "batches out", "position"]))
    if not subs:
        out.note("no subscriptions" + (f" to {name}" if name else ""))


@stream_group.command("subscribe")
@click.argument("name")
@click.argument("subscription")
@click.option("--start", default="latest", show_default=True, callback=_start,
              help="latest (from now on), earliest (every event still kept) or a position.")
@dsn_option
@json_option
@handled
def subscribe(name: str, subscription: str, start: str, dsn: str, as_json: bool) -> None:
    """Subscribe SUBSCRIPTION to stream NAME (an existing subscription keeps its position)."""
    with db.connect(dsn) as conn:
        db.require_stream(conn, name)
        existed = any(s["subscription_name"] == subscription for s in db.stream_info(conn, name))
        position = db.value(conn, "SELECT pgmq.subscribe(stream_name => %s::text, "
                                  "subscription_name => %s::text, start => %s::text)",
                            (name, subscription, start))
    Output(as_json).result(
        {"stream": name, "subscription": subscription, "position": position, "created": not existed},
        f"{subscription} {'was already subscribed' if existed else 'subscribed'} to {name} "
        f"at position {position}")


@stream_group.command("unsubscribe")
@click.argument("name")
@click.argument("subscription")
@dsn_option
@yes_option
@json_option
@handled
def unsubscribe(name: str, subscription: str, dsn: str, yes: bool, as_json: bool) -> None:
    """Remove SUBSCRIPTION of stream NAME with its position and open batches."""
    with db.connect(dsn) as conn:
        row = db.require_subscription(conn, name, subscription)
        confirm(f"Unsubscribe {subscription!r} from {name!r} ({row['lag_events']:,} event(s) not "
                f"acknowledged, {row['batches_out']} batch(es) out)?", yes)
        db.value(conn, "SELECT pgmq.unsubscribe(stream_name => %s::text, subscription_name => %s::text)",
                 (name, subscription))
    Output(as_json).result({"stream": name, "subscription": subscription, "removed": True},
                           f"{subscription} unsubscribed from {name}")


@stream_group.command("rewind")
@click.argument("name")
@click.argument("subscription")
@click.option("--to-position", type=click.IntRange(min=0), default=None,
              help="A position (tick id; stream info shows them).")
@click.option("--to-time", default=None, metavar="TIMESTAMP",
              help="The last position at or before this time (a timestamptz literal, e.g. "
                   "'2024-05-01 12:00+00').")
@dsn_option
@yes_option
@json_option
@handled
def rewind(name: str, subscription: str, to_position: int | None, to_time: str | None, dsn: str,
           yes: bool, as_json: bool) -> None:
    """Move SUBSCRIPTION of stream NAME to a position or time; its open batches are dropped and
    every event after it is delivered again."""
    if (to_position is None) == (to_time is None):
        raise click.UsageError("give exactly one of --to-position and --to-time")
    with db.connect(dsn) as conn:
        row = db.require_subscription(conn, name, subscription)
        where = f"position {to_position}" if to_time is None else f"time {to_time}"
        confirm(f"Rewind {subscription!r} of {name!r} from position {row['position']} to {where} "
                f"(its {row['batches_out']} open batch(es) are dropped; what follows is delivered "
                "again)?", yes)
        if to_time is None:
            position = db.value(conn, "SELECT pgmq.stream_rewind(stream_name => %s::text, "
                                      "subscription_name => %s::text, to_position => %s::bigint)",
                                (name, subscription, to_position))
        else:
            position = db.value(conn, "SELECT pgmq.stream_rewind(stream_name => %s::text, "
                                      "subscription_name => %s::text, to_time => %s::timestamptz)",
                                (name, subscription, to_time))
    Output(as_json).result(
        {"stream": name, "subscription": subscription, "from": row["position"], "position": position},
        f"{subscription} of {name} moved from position {row['position']} to {position}")


@stream_group.command("send")
@click.argument("name")
@click.argument("messages", nargs=-1, metavar="[MESSAGE]...")
@click.option("--headers", default=None, metavar="JSON", help="Headers (a JSON object) of every event.")
@dsn_option
@json_option
@handled
def send(name: str, messages: tuple[str, ...], headers: str | None, dsn: str, as_json: bool) -> None:
    """Append events to stream NAME: each MESSAGE is JSON text; without any, one JSON document
    per line of stdin. All of them in one transaction (a bad one sends none)."""
    texts = list(messages) or [line for line in sys.stdin.read().splitlines() if line.strip()]
    if not texts:
        raise click.UsageError("no MESSAGE given and nothing on stdin")
    for i, text in enumerate(texts):
        _json_value(f"MESSAGE {i + 1}", text)
    hdrs = None
    if headers is not None:
        if not isinstance(_json_value("--headers", headers), dict):
            raise click.BadParameter("must be a JSON object", param_hint="--headers")
        hdrs = headers
    ids: list[int] = []
    with db.connect(dsn) as conn:
        db.require_stream(conn, name)
        with conn.transaction():
            for k in range(0, len(texts), SEND_CHUNK):
                chunk = texts[k:k + SEND_CHUNK]
                ids += [r["stream_send_batch"] for r in db.rows(
                    conn, "SELECT * FROM pgmq.stream_send_batch(stream_name => %s::text, "
                          "msgs => %s::text[]::jsonb[], headers => %s::text[]::jsonb[])",
                    (name, chunk, None if hdrs is None else [hdrs] * len(chunk)))]
    Output(as_json).result({"stream": name, "ev_ids": ids},
                           f"{len(ids)} event(s) appended to {name} (ev_id {ids[0]}..{ids[-1]})")


@stream_group.command("peek")
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1, max=PEEK_MAX), default=10, show_default=True,
              help=f"Events to show (at most {PEEK_MAX}).")
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Only events with ev_id above this.")
@click.option("--subscription", default=None,
              help="Only events this subscription has not acknowledged yet.")
@dsn_option
@json_option
@handled
def peek(name: str, limit: int, after: int, subscription: str | None, dsn: str, as_json: bool) -> None:
    """Show events of NAME in ev_id order without consuming them (reads the stream's table:
    without --subscription that scans every segment)."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        db.require_stream(conn, name)
        snapshot = None
        if subscription is not None:
            position = db.require_subscription(conn, name, subscription)["position"]
            snapshot = db.value(conn, "SELECT tick_snapshot::text FROM pgmq.stream_ticks "
                                      "WHERE stream_name = %s AND tick_id = %s", (name, position))
        query = sql.SQL(_EVENT + " WHERE e.ev_id > %(after)s AND (%(snap)s::pg_snapshot IS NULL OR "
                        "(e.ev_txid >= pg_snapshot_xmin(%(snap)s::pg_snapshot) AND "
                        "NOT pg_visible_in_snapshot(e.ev_txid, %(snap)s::pg_snapshot))) "
                        "ORDER BY e.ev_id LIMIT %(n)s").format(_table(conn, name))
        events = db.rows(conn, query, {"after": after, "snap": snapshot, "n": limit})
    if as_json:
        out.json({"stream": name, "subscription": subscription, "events": events})
        return
    out.print(render.table(EVENT_COLUMNS, [_event_row(e) for e in events], right=("ev_id",), whole=("ev_time",)))
    if not events:
        out.note(f"no events in {name} after ev_id {after}"
                 + (f" that {subscription} has not acknowledged" if subscription else ""))


@stream_group.command("tail")
@click.argument("name")
@click.option("--interval", type=click.FloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              help="Seconds between looks.")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Exit after this many events (default: until Ctrl-C).")
@dsn_option
@json_option
@handled
def tail(name: str, interval: float, count: int | None, dsn: str, as_json: bool) -> None:
    """Show the events of NAME as they commit, from now on (--json: one object per line);
    consumes nothing. Ctrl-C ends it (exit 0)."""
    out = Output(as_json)
    shown = 0
    with db.connect(dsn) as conn:
        db.require_stream(conn, name)
        query = sql.SQL(_EVENT + " WHERE e.ev_txid >= pg_snapshot_xmin(%(prev)s::pg_snapshot) AND "
                        "NOT pg_visible_in_snapshot(e.ev_txid, %(prev)s::pg_snapshot) "
                        "ORDER BY e.ev_id").format(_table(conn, name))
        prev = None
        try:
            while count is None or shown < count:
                # one snapshot per look: what it sees and the previous look did not is new
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    now = db.value(conn, "SELECT pg_current_snapshot()::text")
                    events = [] if prev is None else db.rows(conn, query, {"prev": prev})
                prev = now
                for e in events[: None if count is None else count - shown]:
                    shown += 1
                    if as_json:
                        click.echo(render.json_line(e))
                    else:
                        out.print(render.cell("  ".join(str(c) for c in _event_row(e) if c is not None)))
                if count is None or shown < count:
                    time.sleep(interval)
        except KeyboardInterrupt:  # the normal end of a tail
            pass
    if not as_json:
        out.note(f"{shown} event(s)")
