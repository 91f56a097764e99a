"""`pgmq-build queues` (the overview) and the `pgmq-build queue ...` group."""

from __future__ import annotations

import time
from typing import Any

import click

from . import db, render
from .chunks import run_in_chunks
from .options import confirm, dsn_option, handled, json_option, yes_option
from .rates import rates
from .render import Output

RATE_SAMPLE_SECONDS = 1.0
CHUNK = 1000  # messages per call (one transaction each) of redrive and move
PEEK_MAX = 1000  # pgmq.browse's largest qty

chunk_option = click.option("--batch", "chunk", type=click.IntRange(min=1), default=CHUNK,
                            show_default=True, help="Messages per call; each call is one transaction.")


def peek_options(fn):
    """--limit and --after of the peek commands."""
    fn = click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
                      help="Only messages with msg_id above this.")(fn)
    return click.option("--limit", type=click.IntRange(min=1, max=PEEK_MAX), default=10,
                        show_default=True, help=f"Messages to show (at most {PEEK_MAX}).")(fn)


limit_option = click.option("--limit", type=click.IntRange(min=1), default=None,
                            help="Move at most this many messages (default: all).")


def metrics_doc(row: dict[str, Any]) -> dict[str, Any]:
    """A pgmq.queue_metrics() row with the contract's keys, in its order."""
    return {k: row.get(k) for k in db.QUEUE_METRICS_COLUMNS}


@click.command("queues")
@dsn_option
@click.option("--no-rates", is_flag=True,
              help=f"Skip the send rate (it needs a second sample, {RATE_SAMPLE_SECONDS:g} s later).")
@json_option
@handled
def queues_command(dsn: str, no_rates: bool, as_json: bool) -> None:
    """Every queue: paused, depth, visible, in flight, delayed, oldest age, DLQ depth, send rate."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        first = db.queue_metrics(conn)
        now = first
        if not no_rates:
            time.sleep(RATE_SAMPLE_SECONDS)
            now = db.queue_metrics(conn)
    per = rates(None if no_rates else first, now)
    if as_json:
        out.json({"queues": [{**metrics_doc(r), "send_rate": per[r["queue_name"]].send}
                             for r in now]})
        return
    cols = ["queue", "paused", "depth", "visible", "in flight", "delayed", "oldest age",
            "DLQ depth", "send msg/s", "DLQ"]
    body = [[r["queue_name"], "paused" if r["paused"] else "", render.counted(r, "depth"),
             render.counted(r, "visible"), render.counted(r, "in_flight"), render.counted(r, "delayed"),
             render.age(r["oldest_msg_age_sec"]),
             None if r["dead_letter_queue"] is None else render.count(r["dead_letter_depth"]),
             render.rate(per[r["queue_name"]].send), r["dead_letter_queue"]]
            for r in now]
    out.print(render.table(cols, body, right=cols[2:-1], whole=["paused"],
                           drop=["DLQ", "delayed", "visible", "in flight", "DLQ depth"]))
    if not now:
        out.note("no queues")


@click.group("queue")
def queue_group() -> None:
    """Create, drop, purge, pause, resume, peek at and move messages of one queue."""


@queue_group.command("create")
@click.argument("name")
@click.option("--unlogged", is_flag=True, help="UNLOGGED tables (faster, emptied by a crash).")
@dsn_option
@json_option
@handled
def create(name: str, unlogged: bool, dsn: str, as_json: bool) -> None:
    """Create queue NAME and its archive (nothing happens when it exists)."""
    with db.connect(dsn) as conn:
        existed = name in db.queue_names(conn)
        if not existed:
            db.value(conn, f"SELECT pgmq.{'create_unlogged' if unlogged else 'create'}"
                           "(queue_name => %s::text)", (name,))
    _done(Output(as_json), {"queue": name, "created": not existed},
          f"queue {name} {'already exists' if existed else 'created'}")


@queue_group.command("drop")
@click.argument("name")
@dsn_option
@yes_option
@json_option
@handled
def drop(name: str, dsn: str, yes: bool, as_json: bool) -> None:
    """Drop queue NAME with its archive, settings and bindings."""
    with db.connect(dsn) as conn:
        depth = _depth(conn, name)
        confirm(f"Drop queue {name!r} with its {depth:,} message(s) and its archive?", yes)
        db.value(conn, "SELECT pgmq.drop_queue(queue_name => %s::text)", (name,))
    _done(Output(as_json), {"queue": name, "dropped": True, "messages": depth},
          f"queue {name} dropped ({depth:,} message(s))")


@queue_group.command("purge")
@click.argument("name")
@dsn_option
@yes_option
@json_option
@handled
def purge(name: str, dsn: str, yes: bool, as_json: bool) -> None:
    """Delete every message of queue NAME (the archive is kept)."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        depth = _depth(conn, name)
        confirm(f"Delete all {depth:,} message(s) of queue {name!r}?", yes)
        with out.progress(f"purging {name}", None):
            purged = int(db.value(conn, "SELECT pgmq.purge_queue(queue_name => %s::text)", (name,)))
    _done(out, {"queue": name, "purged": purged}, f"queue {name}: {purged:,} message(s) deleted")


@queue_group.command("pause")
@click.argument("name")
@dsn_option
@json_option
@handled
def pause(name: str, dsn: str, as_json: bool) -> None:
    """Stop every consuming path of NAME (sends keep working)."""
    _pause(name, dsn, as_json, pause=True)


@queue_group.command("resume")
@click.argument("name")
@dsn_option
@json_option
@handled
def resume(name: str, dsn: str, as_json: bool) -> None:
    """Let consumers take messages of NAME again."""
    _pause(name, dsn, as_json, pause=False)


def _pause(name: str, dsn: str, as_json: bool, *, pause: bool) -> None:
    with db.connect(dsn) as conn:
        db.require_queue(conn, name)
        changed = bool(db.value(conn, f"SELECT pgmq.{'pause' if pause else 'resume'}"
                                      "(queue_name => %s::text)", (name,)))
    state = "paused" if pause else "running"
    _done(Output(as_json), {"queue": name, "paused": pause, "changed": changed},
          f"queue {name} {state}" + ("" if changed else f" (it was already {state})"))


@queue_group.command("peek")
@click.argument("name")
@peek_options
@click.option("--archived", is_flag=True, help="Look at the archive instead.")
@dsn_option
@json_option
@handled
def peek(name: str, limit: int, after: int, archived: bool, dsn: str, as_json: bool) -> None:
    """Show messages of NAME without consuming them (pgmq.browse)."""
    show_messages(name, limit, after, archived, dsn, as_json)


def show_messages(name: str, limit: int, after: int, archived: bool, dsn: str, as_json: bool,
                  dead_letters: bool = False) -> None:
    """peek's body; dead_letters adds the x-pgmq-dead-letter header's fields as columns."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        db.require_queue(conn, name)
        msgs = db.rows(conn, "SELECT * FROM pgmq.browse(queue_name => %s::text, "
                             "after_msg_id => %s::bigint, qty => %s::integer, archived => %s::boolean)",
                       (name, after, limit, archived))
    if as_json:
        out.json({"queue": name, "archived": archived, "messages": msgs})
        return
    cols = ["msg_id", "read_ct", "enqueued_at", "vt"]
    if dead_letters:
        cols += ["source", "reason", "attempts"]
    cols += ["message", "headers"]
    body = []
    for m in msgs:
        row = [m["msg_id"], m["read_ct"], f"{m['enqueued_at']:%Y-%m-%d %H:%M:%S}",
               f"{m['vt']:%Y-%m-%d %H:%M:%S}"]
        if dead_letters:
            dl = (m["headers"] or {}).get("x-pgmq-dead-letter") or {}
            row += [dl.get("source_queue"), dl.get("reason"), dl.get("attempts")]
        row += [render.clip(m["message"]), None if m["headers"] is None else render.clip(m["headers"], 40)]
        body.append(row)
    out.print(render.table(cols, body, right=[c for c in ("msg_id", "read_ct", "attempts") if c in cols],
                           whole=("enqueued_at", "vt")))
    if not msgs:
        out.note(f"no messages in {'the archive of ' if archived else ''}{name} after msg_id {after}")


@queue_group.command("metrics")
@click.argument("name")
@dsn_option
@json_option
@handled
def metrics(name: str, dsn: str, as_json: bool) -> None:
    """Every column of pgmq.queue_metrics(NAME)."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        db.require_queue(conn, name)
        row = metrics_doc(db.queue_metrics(conn, name)[0])
    if as_json:
        out.json(row)
    else:
        out.print(render.fields(row))


@queue_group.command("redrive")
@click.argument("dead_letter_queue")
@click.option("--to", "target", default=None,
              help="Queue to move them to (default: each back to the queue it came from).")
@chunk_option
@limit_option
@dsn_option
@yes_option
@json_option
@handled
def redrive(dead_letter_queue: str, target: str | None, chunk: int, limit: int | None,
            dsn: str, yes: bool, as_json: bool) -> None:
    """Move dead letters of DEAD_LETTER_QUEUE back (pgmq.redrive), oldest first, attempts reset."""
    do_redrive(dead_letter_queue, target, chunk, limit, dsn, yes, as_json)


def do_redrive(dlq: str, target: str | None, chunk: int, limit: int | None, dsn: str, yes: bool,
               as_json: bool, *, only_dlq: bool = False) -> None:
    out = Output(as_json)
    with db.connect(dsn) as conn:
        if only_dlq:
            db.require_dlq(conn, dlq)
        if target is not None:
            db.require_queue(conn, target)
        waiting = _depth(conn, dlq)
        where = f"to {target!r}" if target else "each to the queue it came from"
        confirm(f"Redrive {_up_to(waiting, limit)} message(s) of {dlq!r} {where}?", yes)
        moved, calls = run_in_chunks(
            conn, out, f"redrive {dlq}",
            "SELECT pgmq.redrive(dead_letter_queue => %(dlq)s::text, target_queue => %(target)s::text, "
            "max_messages => %(n)s::integer)",
            {"dlq": dlq, "target": target}, total=waiting, chunk=chunk, limit=limit)
        left = _depth(conn, dlq)
    # without --to, messages whose source queue is gone (or unknown) stay where they are
    _done(out, {"dead_letter_queue": dlq, "target": target, "moved": moved, "calls": calls,
                "left": left},
          f"{moved:,} message(s) redriven from {dlq} {where} in {calls} transaction(s); "
          f"{left:,} left")


@queue_group.command("move")
@click.argument("source")
@click.argument("target")
@chunk_option
@limit_option
@dsn_option
@yes_option
@json_option
@handled
def move(source: str, target: str, chunk: int, limit: int | None, dsn: str, yes: bool,
         as_json: bool) -> None:
    """Move visible messages of SOURCE to TARGET (oldest first, with headers and priority; new
    msg_ids)."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        db.require_queue(conn, target)
        waiting = _visible(conn, source)
        confirm(f"Move {_up_to(waiting, limit)} message(s) from {source!r} to {target!r}?", yes)
        moved, calls = run_in_chunks(
            conn, out, f"move {source} -> {target}",
            "SELECT pgmq.move_messages(source_queue => %(source)s::text, "
            "target_queue => %(target)s::text, max_messages => %(n)s::integer)",
            {"source": source, "target": target}, total=waiting, chunk=chunk, limit=limit)
        left = _depth(conn, source)
    _done(out, {"source": source, "target": target, "moved": moved, "calls": calls, "left": left},
          f"{moved:,} message(s) moved from {source} to {target} in {calls} transaction(s); "
          f"{left:,} left in {source}")


def _depth(conn: db.Conn, name: str) -> int:
    db.require_queue(conn, name)
    return int(db.queue_metrics(conn, name)[0]["depth"] or 0)


def _visible(conn: db.Conn, name: str) -> int:
    db.require_queue(conn, name)
    return int(db.queue_metrics(conn, name)[0]["visible"] or 0)


def _up_to(n: int, limit: int | None) -> str:
    return f"{n:,}" if limit is None or limit >= n else f"{limit:,} of {n:,}"


def _done(out: Output, doc: dict[str, Any], text: str) -> None:
    if out.as_json:
        out.json(doc)
    else:
        out.print(text)
