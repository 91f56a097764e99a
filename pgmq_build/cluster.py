"""A throwaway local PostgreSQL server for the demo, the tests and the benchmarks.

PostgreSQL refuses to run as root. When we are root (CI is), the server runs as an
unprivileged OS user: $PGMQ_CLUSTER_USER, else `postgres`, else a system user `pgmq` that we
create. Everything lives in one temporary directory that is removed on stop.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


class ClusterError(RuntimeError):
    pass


def pg_bindir(pg_config: str = "pg_config") -> Path:
    """The directory holding initdb/pg_ctl/postgres for the server we install into."""
    exe = shutil.which(pg_config)
    if exe:
        out = subprocess.run([exe, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").exists():
            return Path(out.stdout.strip())
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    if candidates:
        return candidates[0].parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise ClusterError(
        "PostgreSQL server binaries not found (no initdb): install postgresql-15, "
        "or put pg_config on PATH"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    """None when we may run the server ourselves; else the unprivileged account to use."""
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get("PGMQ_CLUSTER_USER")
    for name in ([wanted] if wanted else ["postgres", "pgmq"]):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    name = wanted or "pgmq"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True, capture_output=True,
    )
    return pwd.getpwnam(name)


def server_owner() -> tuple[int, int]:
    """(uid, gid) that the throwaway servers run as: files they must own are given to it."""
    user = _server_user()
    return (user.pw_uid, user.pw_gid) if user else (os.geteuid(), os.getegid())


@dataclass
class TempCluster:
    """initdb + pg_ctl in a temporary directory, listening on 127.0.0.1 only."""

    settings: dict[str, str] = field(default_factory=dict)
    superuser: str = "postgres"
    keep: bool = False
    port: int = 0
    base: Path | None = None
    _user: pwd.struct_passwd | None = None

    @property
    def datadir(self) -> Path:
        assert self.base is not None
        return self.base / "data"

    @property
    def logfile(self) -> Path:
        assert self.base is not None
        return self.base / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.superuser} dbname={dbname}"

    def _run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        kw: dict = {}
        env = dict(os.environ, LC_ALL="C", LANG="C")
        if self._user is not None:
            kw.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
            env["HOME"] = str(self.base)
        proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=self.base, **kw)
        if check and proc.returncode != 0:
            log = self.logfile.read_text()[-2000:] if self.logfile.exists() else ""
            raise ClusterError(f"{' '.join(args[:2])} failed ({proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}{log}")
        return proc

    def start(self) -> TempCluster:
        bindir = pg_bindir()
        self._user = _server_user()
        self.base = Path(tempfile.mkdtemp(prefix="pgmq-cluster-"))
        os.chmod(self.base, 0o755)
        if self._user is not None:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        self._make_datadir(bindir)
        self.port = self.port or _free_port()
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.base}'",
            "fsync": "off",  # a throwaway server: speed over durability across OS crashes
            "max_connections": "100",
            "max_prepared_transactions": "10",
            **self.settings,
        }
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write("\n# pgmq_build.cluster\n")
            for key, value in conf.items():
                fh.write(f"{key} = {value}\n")
        self._bindir = bindir
        self.pg_ctl("start")
        return self

    def _make_datadir(self, bindir: Path) -> None:
        self._run([str(bindir / "initdb"), "-D", str(self.datadir), "-U", self.superuser,
                   "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])

    def pg_ctl(self, action: str, mode: str = "fast") -> None:
        args = [str(self._bindir / "pg_ctl"), action, "-D", str(self.datadir), "-w", "-t", "60"]
        if action in ("start", "restart"):
            args += ["-l", str(self.logfile)]
        if action in ("stop", "restart"):
            args += ["-m", mode]
        self._run(args)
        if action in ("start", "restart"):
            self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise ClusterError(f"server did not accept connections on port {self.port}")

    def crash_restart(self) -> None:
        """Stop with -m immediate (no shutdown checkpoint: crash recovery on start), then start."""
        self.pg_ctl("stop", mode="immediate")
        self.pg_ctl("start")

    def stop(self) -> None:
        if self.base is None:
            return
        try:
            if (self.datadir / "postmaster.pid").exists():
                self.pg_ctl("stop", mode="fast")
        finally:
            if not self.keep:
                shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> TempCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
