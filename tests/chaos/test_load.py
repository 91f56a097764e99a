"""The chaos load's own clients (chaos/load.py) must come back from whatever a fault
leaves their sessions in, or a scenario measures a dead client instead of the server."""

from __future__ import annotations

import time

import psycopg
from psycopg.types.json import Jsonb

from chaos import ledger
from chaos.load import Load, stuck


def aborted(conn: psycopg.Connection) -> psycopg.Connection:
    """The session a cancelled ROLLBACK leaves (seen in a --long timeouts run): still in a
    failed transaction block, every statement refused with 25P02."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero:
        pass
    return conn


class _FirstSessionAborted(Load):
    def _connect(self, name: str, role: str) -> psycopg.Connection | None:
        conn = super()._connect(name, role)
        if conn is not None and not getattr(self, "_handed", False):
            self._handed = True
            return aborted(conn)
        return conn


def test_stuck_tells_a_failed_transaction_from_an_idle_session(connect):
    c = connect(autocommit=True)
    assert not stuck(c)
    assert stuck(aborted(c))
    c.execute("ROLLBACK")
    assert not stuck(c)


def test_a_consumer_left_in_a_failed_transaction_reconnects_and_consumes(conn, dsn):
    ledger.setup(conn)
    uids = [f"m{i}" for i in range(20)]
    conn.execute("SELECT pgmq.send_batch('work', %s::jsonb[])", ([Jsonb({"id": u}) for u in uids],))
    load = _FirstSessionAborted(dsn, ledger.Book())
    load._spawn(load._consume, "chaos-consumer-0", 0)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            done = conn.execute("SELECT count(*) FROM chaos.consumed").fetchone()[0]
            if done == len(uids):
                break
            time.sleep(0.1)
    finally:
        load.finish()
    assert sorted(r[0] for r in conn.execute("SELECT uid FROM chaos.consumed")) == sorted(uids)
    assert load.book.errors["25P02"] >= 1  # it did meet the aborted session first
