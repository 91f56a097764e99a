"""A primary and a streaming hot standby on this machine, for the failover and read-offload
tests and the chaos failover scenario (docs/guides/high-availability.md).

Both are TempClusters (same binaries, same unprivileged server user): the standby's data
directory is a ``pg_basebackup -R`` of the primary, so everything made on the primary (the
extension, queues) reaches it by WAL. With ``synchronous=True`` the primary names the standby
in ``synchronous_standby_names``: a commit returns once the standby has flushed its WAL, which
is what makes "no acknowledged message lost" a promise across a promotion.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .cluster import ClusterError, TempCluster

STANDBY_NAME = "standby1"


@dataclass
class StandbyCluster(TempCluster):
    """A hot standby of ``primary`` (a running TempCluster)."""

    primary: TempCluster | None = None
    name: str = STANDBY_NAME

    def _make_datadir(self, bindir: Path) -> None:
        assert self.primary is not None
        self._run([str(bindir / "pg_basebackup"), "-D", str(self.datadir), "-R", "-X", "stream",
                   "-c", "fast", "--no-sync", "-d",
                   f"host=127.0.0.1 port={self.primary.port} user={self.superuser}"])
        # -R wrote a primary_conninfo without our name; the last setting in the file wins.
        # The name is what the primary's synchronous_standby_names waits for.
        with open(self.datadir / "postgresql.auto.conf", "a") as fh:
            fh.write(f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} "
                     f"user={self.superuser} application_name={self.name}'\n")

    def promote(self) -> None:
        """pg_ctl promote, waiting until the server accepts writes."""
        self._run([str(self._bindir / "pg_ctl"), "promote", "-D", str(self.datadir), "-w",
                   "-t", "60"])


@dataclass
class ReplicaPair:
    """``with ReplicaPair() as pair:`` a primary and its standby; ``pair.dsn()`` is the
    multi-host DSN an application would use; ``pair.failover()`` stops the primary with
    ``-m immediate`` and promotes the standby."""

    synchronous: bool = True
    settings: dict[str, str] = field(default_factory=dict)
    primary: TempCluster | None = None
    standby: StandbyCluster | None = None

    def start(self) -> ReplicaPair:
        sync_names = f"'{STANDBY_NAME}'" if self.synchronous else "''"
        self.primary = TempCluster(settings={
            "wal_level": "replica", "max_wal_senders": "5", "hot_standby": "on",
            "synchronous_standby_names": sync_names, **self.settings}).start()
        try:
            # The standby copies postgresql.conf: once promoted it must not wait for a standby
            # of its own (every commit would hang).
            self.standby = StandbyCluster(primary=self.primary, settings={
                "hot_standby": "on", "synchronous_standby_names": "''",
                **self.settings}).start()
            self.wait_streaming()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary sees the standby streaming (as its synchronous one when so)."""
        assert self.primary is not None
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.dsn(), autocommit=True) as c:
                row = c.execute("SELECT state, sync_state FROM pg_stat_replication "
                                "WHERE application_name = %s", (STANDBY_NAME,)).fetchone()
            state = row
            if row is not None and row[0] == "streaming" and row[1] == want:
                return
            time.sleep(0.05)
        raise ClusterError(f"the standby is not streaming ({want}) after {timeout:g} s: {state}")

    def dsn(self, dbname: str = "postgres", **options: str) -> str:
        """Both servers, the one that accepts writes chosen at connect time."""
        assert self.primary is not None and self.standby is not None
        opts = {"target_session_attrs": "read-write", "connect_timeout": "5", **options}
        return (f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port} "
                f"user={self.primary.superuser} dbname={dbname} "
                + " ".join(f"{k}={v}" for k, v in opts.items()))

    def wait_replayed(self, dbname: str = "postgres", timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary wrote so far (a synchronous
        commit only waits for the standby's flush, not its replay)."""
        assert self.primary is not None and self.standby is not None
        with psycopg.connect(self.primary.dsn(dbname), autocommit=True) as c:
            lsn = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.standby.dsn(dbname), autocommit=True) as c:
            while time.monotonic() < deadline:
                if c.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                             (lsn,)).fetchone()[0]:
                    return
                time.sleep(0.02)
        raise ClusterError(f"the standby did not replay up to {lsn} within {timeout:g} s")

    def failover(self) -> dict[str, float]:
        """Stop the primary with -m immediate (a crash: nothing flushed or sent after that),
        then promote the standby. Returns the seconds each step took, and ``at``: the
        time.monotonic() at which the new primary accepted writes."""
        assert self.primary is not None and self.standby is not None
        t0 = time.monotonic()
        self.primary.pg_ctl("stop", mode="immediate")
        t1 = time.monotonic()
        self.standby.promote()
        t2 = time.monotonic()
        return {"stop_seconds": round(t1 - t0, 3), "promote_seconds": round(t2 - t1, 3),
                "at": t2}

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            if server is not None:
                server.stop()

    def __enter__(self) -> ReplicaPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
