"""Send and consume rates from two samples of pgmq.queue_metrics(): total_sent is a counter
(the msg_id sequence), so sent = its increase; whatever left the queue table meanwhile (deleted,
archived, popped, dead-lettered, moved) = sent - the change in depth."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rate:
    send: float | None  # messages/s sent; None without a previous sample (or after a reset)
    consume: float | None  # messages/s that left the queue table


def seconds_between(old: dict[str, Any], new: dict[str, Any]) -> float:
    return (new["measured_at"] - old["measured_at"]).total_seconds()


def rate(old: dict[str, Any] | None, new: dict[str, Any]) -> Rate:
    """The rates between two rows of the same queue (rows of pgmq.queue_metrics())."""
    if old is None:
        return Rate(None, None)
    dt = seconds_between(old, new)
    sent = (new["total_sent"] or 0) - (old["total_sent"] or 0)
    if dt <= 0 or sent < 0:  # no time passed, or the queue was dropped and made again
        return Rate(None, None)
    left = sent - ((new["depth"] or 0) - (old["depth"] or 0))
    # depth of a large queue is an estimate: never show a negative consume rate
    return Rate(sent / dt, max(0, left) / dt)


def rates(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> dict[str, Rate]:
    """queue name -> Rate, for every queue of the new sample."""
    before = {r["queue_name"]: r for r in old or ()}
    return {r["queue_name"]: rate(before.get(r["queue_name"]), r) for r in new}
