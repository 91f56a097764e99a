"""The package a user installs: the wheel built from this tree, pip-installed into a fresh
virtualenv with its runtime dependencies only (from PyPI), gives a working
`pgmq-build install --dsn`, client and worker, and none of the extras' packages."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest

from pgmq_build.manifest import VERSION

REPO = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ("jinja2", "pglast", "rich", "prometheus_client", "pyspark", "pandas")

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """A command with the venv's own environment: no PYTHONPATH pointing into this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, **kw)
    assert out.returncode == 0, f"{args}: {out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """bin/ of a fresh virtualenv holding the wheel and its runtime dependencies."""
    tmp = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
        "-w", tmp / "dist", REPO, cwd=tmp)
    [wheel] = (tmp / "dist").glob("pgmq_build-*.whl")
    run(sys.executable, "-m", "venv", tmp / "venv", cwd=tmp)
    run(tmp / "venv" / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        wheel, cwd=tmp)
    return tmp / "venv" / "bin"


@pytest.fixture
def fresh_db(pg_cluster):
    """A new database without pgmq; dropped afterwards."""
    name = f"wheel_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_cluster.dsn(name)
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_fresh_venv_installs_the_extension_and_runs_the_client_and_the_worker(venv, fresh_db, tmp_path):
    py = venv / "python"
    # only the runtime dependencies: no extra's package came along
    found = run(py, "-c", "import importlib.util as u, json; "
                f"print(json.dumps([m for m in {EXTRAS_ONLY!r} if u.find_spec(m)]))", cwd=tmp_path)
    assert json.loads(found.stdout) == []
    where = run(py, "-c", "import pgmq_build; print(pgmq_build.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(venv.parent)), where  # the installed copy, not this checkout

    # pgmq-build install --dsn: the wheel's extension files into pg_config's sharedir (PATH
    # points at the test server's pg_config), then CREATE EXTENSION
    out = run(venv / "pgmq-build", "install", "--dsn", fresh_db, cwd=tmp_path).stdout
    assert f"CREATE EXTENSION pgmq: version {VERSION} is installed" in out

    # the client: send and read
    client = run(py, "-c", f"""
import json
from pgmq_build.client import Client
with Client({fresh_db!r}) as q:
    q.create("jobs")
    msg_id = q.send("jobs", {{"n": 1}})
    [m] = q.read("jobs", vt=30, qty=1)
    print(json.dumps([msg_id, m.msg_id, m.message]))
""", cwd=tmp_path).stdout
    msg_id, read_id, message = json.loads(client)
    assert read_id == msg_id and message == {"n": 1}

    # the worker (PGMQ_DSN, no --dsn): one callback delivered; asked for /metrics without the
    # [ops] extra, it says so and runs on
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE handled (n int)")
        conn.execute("CREATE PROCEDURE handle(msg jsonb) LANGUAGE sql "
                     "AS $$ INSERT INTO public.handled VALUES ((msg->>'n')::int) $$")
        conn.execute("SELECT pgmq.create('work')")
        conn.execute("CALL pgmq.register_callback('work', 'public.handle(jsonb)')")
        conn.execute("SELECT pgmq.send('work', '{\"n\": 7}')")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PGMQ_DSN": fresh_db}
        proc = subprocess.Popen([venv / "pgmq-build", "worker", "--metrics-bind", f"127.0.0.1:{free_port()}"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not conn.execute("SELECT n FROM handled").fetchall() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert conn.execute("SELECT n FROM handled").fetchall() == [(7,)]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    [off] = [e for e in events if e["event"] == "metrics_off"]
    assert "pip install 'pgmq-build[ops]'" in off["error"] and "prometheus_client" in off["error"]

    # an operator command of the [ops] extra names it instead of failing with an ImportError
    bad = subprocess.run([venv / "pgmq-build", "queues"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: pgmq-build queues needs the Python package 'rich'")
    assert "pip install 'pgmq-build[ops]'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_wheel_holds_only_the_shipped_extension_files(venv):
    """The wheel's force-included extension/ is the product: no history/, no harnesses."""
    [wheel] = (venv.parent.parent / "dist").glob("pgmq_build-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("pgmq_build/_data/extension/"))
    assert shipped == sorted(p.name for p in (REPO / "extension").iterdir())
    assert not [n for n in names if n.startswith(("bench/", "chaos/", "history/", "pgmq_build/bench",
                                                  "pgmq_build/chaos"))]
