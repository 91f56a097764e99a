"""`pgmq-build dlq list|peek|redrive`: the queues that are some queue's dead_letter_queue."""

from __future__ import annotations

import click

from . import db, render
from .options import dsn_option, handled, json_option, yes_option
from .queues import chunk_option, do_redrive, limit_option, peek_options, show_messages
from .render import Output


@click.group("dlq")
def dlq_group() -> None:
    """Dead-letter queues: list them, look at their messages, send them back."""


@dlq_group.command("list")
@dsn_option
@json_option
@handled
def list_(dsn: str, as_json: bool) -> None:
    """Every dead-letter queue with the queues feeding it, its depth and oldest message."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        sources = db.dead_letter_sources(conn)
        metrics = {r["queue_name"]: r for r in db.queue_metrics(conn)}
    docs = [{"queue": name, "sources": feeding,
             "depth": metrics.get(name, {}).get("depth"),
             "oldest_msg_age_sec": metrics.get(name, {}).get("oldest_msg_age_sec")}
            for name, feeding in sorted(sources.items())]
    if as_json:
        out.json({"dead_letter_queues": docs})
        return
    body = [[d["queue"], ", ".join(d["sources"]), render.count(d["depth"]),
             render.age(d["oldest_msg_age_sec"])] for d in docs]
    out.print(render.table(["dead-letter queue", "from", "depth", "oldest age"], body,
                           right=("depth", "oldest age")))
    if not docs:
        out.note("no queue has a dead-letter queue")


@dlq_group.command("peek")
@click.argument("name")
@peek_options
@dsn_option
@json_option
@handled
def peek(name: str, limit: int, after: int, dsn: str, as_json: bool) -> None:
    """Dead letters of NAME with where they came from and why (non-consuming)."""
    with db.connect(dsn) as conn:
        db.require_dlq(conn, name)
    show_messages(name, limit, after, False, dsn, as_json, dead_letters=True)


@dlq_group.command("redrive")
@click.argument("name")
@click.option("--to", "target", default=None,
              help="Queue to move them to (default: each back to the queue it came from).")
@chunk_option
@limit_option
@dsn_option
@yes_option
@json_option
@handled
def redrive(name: str, target: str | None, chunk: int, limit: int | None, dsn: str, yes: bool,
            as_json: bool) -> None:
    """Move the dead letters of NAME back, oldest first, attempts reset (pgmq.redrive)."""
    do_redrive(name, target, chunk, limit, dsn, yes, as_json, only_dlq=True)
