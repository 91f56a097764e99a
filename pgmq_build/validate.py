"""Checks of caller-supplied values, shared by the Python client and the worker: each raises
TypeError (wrong kind of value) or ValueError (right kind, bad value) naming the argument, the
value and what is allowed, before anything reaches the server.

The server judges queue names itself (README: Queue names); these checks only stop what
PostgreSQL cannot even receive (non-strings, NUL bytes, unpaired surrogates) or would receive
as something else (bytes become a name like ``\\x6a6f6273``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import headers as pgmq_headers

INT32_MAX = 2**31 - 1  # SQL integer: vt, qty, delays, poll settings
INT64_MAX = 2**63 - 1  # SQL bigint: msg ids

# Headers pgmq reads as SQL integers at send and at every later read: a value that is not one
# fails those reads for the whole queue (see the SQL issue in tests/integration/test_inputs_sql.py).
INTEGER_HEADERS = (pgmq_headers.PRIORITY, pgmq_headers.TTL, pgmq_headers.MAX_RETRIES,
                   pgmq_headers.RETRY_DELAY)


def text(name: str, value: object, *, empty: bool = True) -> str:
    """A str PostgreSQL can take as text: no NUL byte, no unpaired surrogate."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r:.60}")
    if not empty and not value:
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL (\\x00), got {value!r:.60}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid Unicode (an unpaired surrogate), got {value!r:.60}") from None
    return value


def queue_name(name: str, value: object) -> str:
    return text(name, value, empty=False)


def integer(name: str, value: object, minimum: int, maximum: int = INT32_MAX) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer from {minimum} to {maximum}, got "
                        f"{type(value).__name__} {value!r:.60}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an integer from {minimum} to {maximum}, got {value}")
    return value


def seconds(name: str, value: object, minimum: float = 0.0, *, inclusive: bool = True,
            maximum: float | None = None) -> float:
    """A finite number (int or float, not bool) >= minimum (> minimum when not inclusive)."""
    low = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
    allowed = f"a finite number {low}" + (f" and <= {maximum:g}" if maximum is not None else "")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} {value!r:.60}")
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive) \
            or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return float(value)


def msg_ids(name: str, value: object) -> int | list[int]:
    """One msg id (an int) or an iterable of them (not a str: "12" is not ids 1 and 2)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return integer(name, value, -INT64_MAX - 1, INT64_MAX)
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an integer or a sequence of integers, got "
                        f"{type(value).__name__} {value!r:.60}")
    return [integer(f"{name}[{i}]", v, -INT64_MAX - 1, INT64_MAX) for i, v in enumerate(value)]


def json_text(name: str, value: Any) -> str:
    """The JSON text jsonb will accept for value: no NaN/Infinity, no \\u0000, no unpaired
    surrogate (PostgreSQL refuses all three, with errors that do not say which argument)."""
    try:
        out = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # not serializable, or NaN / Infinity
        raise type(exc)(f"{name} is not JSON: {exc}") from None
    if "\\u0000" in out:
        raise ValueError(f"{name} contains a NUL character (\\u0000), which jsonb cannot store")
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} contains an unpaired surrogate, which is not valid Unicode") from None
    return out


def headers_text(name: str, value: object) -> str | None:
    """Headers: None or a dict (a JSON object); the integer headers pgmq reads must be ints."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict (a JSON object) or None, got {type(value).__name__}")
    for key in INTEGER_HEADERS:
        if key in value:
            integer(f"{name}[{key!r}]", value[key], -INT32_MAX - 1)
    return json_text(name, value)
