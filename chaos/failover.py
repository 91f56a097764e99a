"""The failover scenario (issue 33): the load runs on the multi-host DSN of a primary and its
synchronous hot standby (pgmq_build.replication), the primary is stopped with -m immediate and
the standby promoted; the ledger is checked on the new primary. Apart from faults.py because
its server is a pair, not a TempCluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from pgmq_build.replication import ReplicaPair

from .faults import Ctx, Fault


@contextlib.contextmanager
def pair(settings: dict[str, str]) -> Iterator[ReplicaPair]:
    with ReplicaPair(settings=dict(settings)) as p:
        yield p


def failover(ctx: Ctx) -> Fault:
    """ctx.cluster is the ReplicaPair (runner._server with Scenario.standby)."""
    cluster: ReplicaPair = ctx.cluster  # type: ignore[assignment]
    t = time.monotonic()
    timings = cluster.failover()
    timings.pop("at")
    ctx.log(f"primary stopped (-m immediate) in {timings['stop_seconds']} s, standby promoted "
            f"in {timings['promote_seconds']} s ({time.monotonic() - t:.2f} s in all)")
    return Fault(1, "failover: primary stopped -m immediate, synchronous standby promoted",
                 [ctx.now()], timings)
