"""A primary and a streaming hot standby on this machine, for the failover and read-offload
tests and the chaos failover scenario (docs/guides/high-availability.md).

Both are TempClusters (same binaries, same unprivileged server user): the standby's data
directory is a ``pg_basebackup -R`` of the primary, so everything made on the primary (the
extension, queues) reaches it by WAL. With ``synchronous=True`` the primary names the standby
in ``synchronous_standby_names``: a commit returns once the standby has flushed its WAL, which
is what makes "no acknowledged message lost" a promise across a promotion.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
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

    def seeded(self, sql: str, dbname: str = "postgres") -> ReplicaPair:
        """The pair, after `sql` ran on the primary and the standby replayed it."""
        with psycopg.connect(self.dsn(dbname), autocommit=True) as c:
            c.execute(sql)
        self.wait_replayed(dbname)
        return self

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


# -- what asynchronous replication loses ---------------------------------------------------------

def _kill_9(server: TempCluster) -> None:
    """SIGKILL the postmaster and every process it started (a power cut, as far as this
    server's processes know), then clear its pid file so that stop() has nothing to do."""
    pid_file = server.datadir / "postmaster.pid"
    pid = int(pid_file.read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    for p in [pid, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    pid_file.unlink()


def measure_loss(synchronous: bool, producers: int = 8, seconds: float = 3.0) -> dict:
    """Producers send to a queue on the pair's multi-host DSN; after `seconds` the primary is
    killed with SIGKILL and the standby promoted. Counts the sends that returned a msg_id
    (acknowledged) and are not on the new primary."""
    with ReplicaPair(synchronous=synchronous) as pair:
        dsn = pair.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("SELECT pgmq.create('orders')")
        acked: list[int] = []
        lock = threading.Lock()

        def produce() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while True:
                    try:
                        msg_id = conn.execute("SELECT pgmq.send('orders', '{}')").fetchone()[0]
                    except psycopg.Error:
                        return  # the primary is gone: this send was not acknowledged
                    with lock:
                        acked.append(msg_id)

        threads = [threading.Thread(target=produce) for _ in range(producers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        assert pair.primary is not None and pair.standby is not None
        with psycopg.connect(pair.primary.dsn(), autocommit=True) as c:
            lag = c.execute("SELECT pg_current_wal_lsn() - replay_lsn FROM pg_stat_replication"
                            ).fetchone()[0]
        _kill_9(pair.primary)
        for t in threads:
            t.join(30)
        pair.standby.promote()
        with psycopg.connect(dsn, autocommit=True) as conn:
            present = {r[0] for r in conn.execute("SELECT msg_id FROM pgmq.q_orders")}
        lost = sorted(set(acked) - present)
        return {"replication": "synchronous" if synchronous else "asynchronous",
                "producers": producers, "seconds": seconds, "acknowledged": len(acked),
                "lost": len(lost), "lost_msg_ids": lost[:10],
                "replay_lag_bytes_just_before": int(lag)}


def main(argv: list[str] | None = None) -> int:
    """python3 -m pgmq_build.replication [--sync] [--producers N] [--seconds S]: measure_loss
    once, printed as JSON."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python3 -m pgmq_build.replication",
                                description="Acknowledged sends lost when the primary is "
                                            "killed (SIGKILL) and its standby promoted.")
    p.add_argument("--sync", action="store_true", help="a synchronous standby (default: async)")
    p.add_argument("--producers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args(argv)
    print(json.dumps(measure_loss(args.sync, args.producers, args.seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
