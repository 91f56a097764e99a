"""Queue names that attack an operator's views, and queues made with them the only way they can
exist since 2.9.0 refuses control characters: made by 2.8.0, then upgraded."""

from __future__ import annotations

import psycopg

from pgmq_build.printable import printable

# Each would, printed raw: recolour the rest of the line, start a forged row, erase the row above
# (the `jobs` row in a listing sorted by name), make a CSI out of one C1 byte, or be read as rich
# markup (colour, a hyperlink) and an emoji code.
HOSTILE = {
    "esc": "evil\x1b[31mred",
    "crlf": "fake\r\njobs  999",
    "hide": "hide\x1b[2K\x1b[1A",
    "c1": "c1\x9b7m\x7fdel",
    "markup": "[red]x[/red]:x:",
    "link": "[link=http://e.x]y[/link]",
}

SHOWN = {label: printable(name) for label, name in HOSTILE.items()}


def legacy_queues(conn: psycopg.Connection, names: list[str] | tuple[str, ...],
                  subscriptions: dict[str, list[str]] | None = None) -> None:
    """Queues named `names` (and streams with `subscriptions`: {stream: [subscription, ...]}) in
    conn's database as 2.8.0 made them (it accepted control characters), the extension then
    updated to the current version. The database holds nothing else of pgmq's beforehand (a
    fresh test database)."""
    conn.execute("DROP EXTENSION pgmq CASCADE")
    conn.execute("CREATE EXTENSION pgmq VERSION '2.8.0'")
    for name in names:
        conn.execute("SELECT pgmq.create(%s)", (name,))
    for stream, subs in (subscriptions or {}).items():
        conn.execute("SELECT pgmq.create_stream(%s)", (stream,))
        for sub in subs:
            conn.execute("SELECT pgmq.subscribe(%s, %s)", (stream, sub))
    conn.execute("ALTER EXTENSION pgmq UPDATE")
