"""What a terminal or a page may show of a name (or any text a role chose): every character
Python does not call printable (control characters such as ESC, CR and LF, DEL, C1 controls,
format characters such as the bidirectional overrides, line and paragraph separators) becomes a
visible escape, ``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``, so that a queue's name cannot move the
cursor, recolour, hide or forge rows of an operator's view. Names made since 2.9.0 hold no
control character (the SQL refuses them, README: Security); older ones, and payloads, may.
Backslashes are left alone: ``a\\b`` reads as it is."""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every unprintable character escaped; ``lines=True`` keeps line feeds (a
    traceback, a document of several lines)."""
    if text.isprintable():
        return text
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
