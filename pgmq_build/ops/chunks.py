"""Long moves (redrive, move) as a series of calls of at most `chunk` messages each: every call
is its own transaction, so progress is visible, locks are short and an interruption keeps what
was already moved."""

from __future__ import annotations

from typing import Any

from . import db
from .exits import Exit, OpsError
from .render import Output


def run_in_chunks(conn: db.Conn, out: Output, description: str, statement: str,
                  params: dict[str, Any], *, total: int, chunk: int,
                  limit: int | None) -> tuple[int, int]:
    """Call `statement` (which returns how many it moved; %(n)s is the chunk's size) until a
    call moves fewer than asked or `limit` is reached. Returns (moved, calls)."""
    moved = calls = 0
    goal = total if limit is None else min(total, limit)
    try:
        with out.progress(description, goal) as advance:
            while limit is None or moved < limit:
                n = chunk if limit is None else min(chunk, limit - moved)
                got = int(db.value(conn, statement, {**params, "n": n}) or 0)  # autocommit
                calls += 1
                moved += got
                advance(got)
                if got < n:  # nothing more was eligible
                    break
    except KeyboardInterrupt:
        # the call in flight is rolled back; the calls before it are committed
        raise OpsError(f"interrupted: {moved} message(s) moved in {calls} committed call(s)",
                       Exit.ABORTED) from None
    return moved, calls
