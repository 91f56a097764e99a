"""`pgmq-build exchange list|create|drop|bind|unbind`."""

from __future__ import annotations

import click

from . import db, render
from .exits import not_found
from .options import confirm, dsn_option, handled, json_option, yes_option
from .render import Output

TYPES = ("fanout", "direct", "topic", "headers")


@click.group("exchange")
def exchange_group() -> None:
    """List, create, drop exchanges and bind queues to them."""


def _bindings(conn: db.Conn, exchange: str | None = None) -> list[dict]:
    # a stream's binding (features/routing, bind_stream) shows as "stream:<name>"
    return db.rows(conn, "SELECT exchange_name, coalesce(queue_name, 'stream:' || stream_name) AS queue_name, "
                         "binding_key FROM pgmq.list_exchange_bindings(exchange_name => %s::text) "
                         "ORDER BY exchange_name, queue_name, binding_key", (exchange,))


def _require_exchange(conn: db.Conn, name: str) -> dict:
    row = next((e for e in db.rows(conn, "SELECT * FROM pgmq.list_exchanges()")
                if e["exchange_name"] == name), None)
    if row is None:
        raise not_found(f'exchange "{name}"')
    return row


@exchange_group.command("list")
@dsn_option
@json_option
@handled
def list_(dsn: str, as_json: bool) -> None:
    """Every exchange with its type, unroutable handling and bindings."""
    out = Output(as_json)
    with db.connect(dsn) as conn:
        exchanges = db.rows(conn, "SELECT exchange_name, exchange_type, owner, on_unroutable, "
                                  "alternate_exchange FROM pgmq.list_exchanges() ORDER BY 1")
        bindings = _bindings(conn)
    by_exchange: dict[str, list[dict]] = {}
    for b in bindings:
        by_exchange.setdefault(b["exchange_name"], []).append(
            {"queue": b["queue_name"], "key": b["binding_key"]})
    if as_json:
        out.json({"exchanges": [{**e, "bindings": by_exchange.get(e["exchange_name"], [])}
                                for e in exchanges]})
        return
    body = [[e["exchange_name"], e["exchange_type"], e["on_unroutable"], e["alternate_exchange"],
             ", ".join(b["queue"] + ("" if b["key"] is None else f" [{b['key']}]")
                       for b in by_exchange.get(e["exchange_name"], [])) or None]
            for e in exchanges]
    out.print(render.table(["exchange", "type", "unroutable", "alternate", "bindings"], body))


@exchange_group.command("create")
@click.argument("name")
@click.option("--type", "type_", type=click.Choice(TYPES), default="fanout", show_default=True)
@dsn_option
@json_option
@handled
def create(name: str, type_: str, dsn: str, as_json: bool) -> None:
    """Create exchange NAME."""
    with db.connect(dsn) as conn:
        db.value(conn, "SELECT pgmq.create_exchange(%s::name, %s::text)", (name, type_))
    _done(as_json, {"exchange": name, "type": type_, "created": True},
          f"exchange {name} ({type_}) created")


@exchange_group.command("drop")
@click.argument("name")
@click.option("--cascade", is_flag=True, help="Also drop every queue bound to it.")
@dsn_option
@yes_option
@json_option
@handled
def drop(name: str, cascade: bool, dsn: str, yes: bool, as_json: bool) -> None:
    """Drop exchange NAME (bound queues make it fail unless --cascade, which drops them)."""
    with db.connect(dsn) as conn:
        _require_exchange(conn, name)
        queues = sorted({b["queue_name"] for b in _bindings(conn, name)})
        extra = f" and the bound queue(s) {', '.join(queues)}" if cascade and queues else ""
        confirm(f"Drop exchange {name!r}{extra}?", yes)
        db.value(conn, "SELECT pgmq.drop_exchange(%s::name, %s::boolean)", (name, cascade))
    _done(as_json, {"exchange": name, "dropped": True, "dropped_queues": queues if cascade else []},
          f"exchange {name} dropped{extra}")


@exchange_group.command("bind")
@click.argument("exchange")
@click.argument("queue")
@click.option("--key", default=None,
              help="Routing key (direct), pattern (topic) or JSON arguments (headers); none for fanout.")
@dsn_option
@json_option
@handled
def bind(exchange: str, queue: str, key: str | None, dsn: str, as_json: bool) -> None:
    """Bind QUEUE to EXCHANGE (idempotent)."""
    with db.connect(dsn) as conn:
        db.require_queue(conn, queue)
        db.value(conn, "SELECT pgmq.bind_queue(%s::name, %s::name, %s::text)", (queue, exchange, key))
    _done(as_json, {"exchange": exchange, "queue": queue, "key": key, "bound": True},
          f"{queue} bound to {exchange}" + ("" if key is None else f" with key {key}"))


@exchange_group.command("unbind")
@click.argument("exchange")
@click.argument("queue")
@click.option("--key", default=None, help="The binding's key (default: every binding of QUEUE to EXCHANGE).")
@dsn_option
@json_option
@handled
def unbind(exchange: str, queue: str, key: str | None, dsn: str, as_json: bool) -> None:
    """Remove QUEUE's binding to EXCHANGE; exit 3 when there was none."""
    with db.connect(dsn) as conn:
        db.require_queue(conn, queue)
        _require_exchange(conn, exchange)

        def mine() -> int:
            return sum(b["queue_name"] == queue for b in _bindings(conn, exchange))

        before = mine()
        db.value(conn, "SELECT pgmq.unbind_queue(%s::name, %s::name, %s::text)", (queue, exchange, key))
        removed = before - mine()
    if not removed:
        raise not_found(f"binding of queue \"{queue}\" to exchange \"{exchange}\""
                        + ("" if key is None else f" with key {key!r}"))
    _done(as_json, {"exchange": exchange, "queue": queue, "key": key, "removed": removed},
          f"{removed} binding(s) of {queue} to {exchange} removed")


def _done(as_json: bool, doc: dict, text: str) -> None:
    out = Output(as_json)
    if as_json:
        out.json(doc)
    else:
        out.print(text)
