"""Every SQL and shell example in README.md runs as written.

Each ```sql block runs through psql (ON_ERROR_STOP, so any error fails it) in a database of its
own with the extension created, as a superuser would paste it; a few blocks also have what they
show checked. Each `pgmq-build` line of the ```sh blocks runs with the README's placeholder DSN
(`postgresql://…`, `…`) replaced by the test server's; the ones that serve until stopped are
asked over HTTP, then stopped. The `make` lines are the README's set-up commands: CI runs
`make test` (.ci/run) and tests/integration/test_demo.py runs the demo.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest

from pgmq_build.cluster import pg_bindir
from pgmq_build.migrate import upstream_sql

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(lang: str) -> list[tuple[int, str]]:
    """(line, text) of every fenced block of `lang` (indented ones too, dedented)."""
    out, lines = [], README.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```" + lang + r"\s*$", lines[i])
        if m:
            indent, start, body = len(m.group(1)), i + 1, []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            out.append((start, "\n".join(body) + "\n"))
        i += 1
    return out


SQL = blocks("sql")
SH = blocks("sh")

# What a block shows, checked beyond "it ran": first line's start -> text psql must print.
SHOWS = {
    "SELECT pgmq.create('jobs')": ['{"a": 1}'],
    "SELECT pgmq.create_stream('orders', retention": ["billing"],
    "SELECT pgmq.create('eu_jobs')": ["eu_jobs", "orders_log"],
    "SELECT pgmq.create_stream('orders');": ['{"id": 1}', '{"id": 2}', "card declined"],
    "SELECT pgmq.create('orders_eu')": ["orders_eu"],
    "CREATE ROLE app_owner": ["orders     | app_owner"],
    "SELECT pgmq.create('docs', 'xml')": ["\\x00ff"],
    "SELECT pgmq.create('orders');": ["      42"],
}


def test_the_readme_has_the_examples_this_file_runs():
    assert len(SQL) >= 9 and len(SH) >= 4
    firsts = [text.splitlines()[0] for _, text in SQL]
    for start in SHOWS:
        assert sum(f.startswith(start) for f in firsts) == 1, start
    assert not [ln for ln, text in SQL if "<" in text and ">" in text.replace("=>", "").replace("->", "")], \
        "a placeholder such as <batch_id> cannot run as written"


@pytest.fixture
def fresh_db(pg_cluster):
    """A database of its own with the extension; roles an example made are dropped after it."""
    name = "readme_example"
    admin = psycopg.connect(pg_cluster.dsn(), autocommit=True)
    roles_before = {r for (r,) in admin.execute("SELECT rolname FROM pg_roles")}
    admin.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(pg_cluster.dsn(name), autocommit=True) as c:
        c.execute("CREATE EXTENSION pgmq")
    yield pg_cluster.dsn(name)
    admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    for (role,) in admin.execute("SELECT rolname FROM pg_roles").fetchall():
        if role not in roles_before:
            admin.execute(f'DROP ROLE "{role}"')
    admin.close()


def psql(dsn: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(pg_bindir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
                          input=script, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("line,script", SQL, ids=[f"README.md:{ln}" for ln, _ in SQL])
def test_sql_example_runs_as_written(fresh_db, line, script):
    out = psql(fresh_db, script)
    assert out.returncode == 0, f"README.md:{line} failed:\n{out.stdout[-3000:]}\n{out.stderr}"
    assert "ERROR" not in out.stderr, out.stderr
    for start, shown in SHOWS.items():
        if script.startswith(start):
            for text in shown:
                assert text in out.stdout, f"README.md:{line} does not show {text!r}:\n{out.stdout}"


# -- shell ------------------------------------------------------------------------------------

def commands() -> list[tuple[int, str]]:
    """Every `pgmq-build` command of the ```sh blocks, comment stripped."""
    out = []
    for line, text in SH:
        for k, cmd in enumerate(text.splitlines()):
            cmd = cmd.split("#", 1)[0].strip()
            if cmd.startswith("pgmq-build "):
                out.append((line + k, cmd))
    return out


def with_dsn(cmd: str, dsn: str) -> list[str]:
    url = dsn_url(dsn)
    cmd = re.sub(r"--dsn \S+", f"--dsn {url}", cmd)
    return [sys.executable, "-m", "pgmq_build", *cmd.split()[1:]]


def dsn_url(dsn: str) -> str:
    kv = dict(part.split("=", 1) for part in dsn.split())
    return f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"


def served(args: list[str], url: str) -> str:
    """Starts a serving command, returns what `url` answers once it is up, then stops it."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return r.read().decode()
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{args} did not serve {url}:\n{proc.stdout.read() if proc.stdout else ''}") from exc
                time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


CMDS = commands()


def test_the_readme_shell_examples_are_these():
    seen = {cmd.split()[1] for _, cmd in CMDS}
    assert {"migrate", "metrics", "worker", "dashboard"} <= seen


@pytest.mark.parametrize("line,cmd", CMDS, ids=[f"README.md:{ln}" for ln, _ in CMDS])
def test_shell_example_runs_as_written(pg_cluster, fresh_db, line, cmd):
    args = with_dsn(cmd, fresh_db)
    sub = cmd.split()[1]
    if sub == "migrate":
        # the README's case: upstream's SQL-only install, no extension row
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute("DROP EXTENSION pgmq CASCADE")
            c.execute(upstream_sql()[1])
            c.execute("SELECT pgmq.create('legacy'); SELECT pgmq.send('legacy', '{\"k\": 1}')")
        out = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        with psycopg.connect(fresh_db) as c:
            migrated = c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'").fetchone()[0]
            assert migrated == (0 if "--dry-run" in cmd else 1)
            assert c.execute("SELECT count(*) FROM pgmq.q_legacy").fetchone()[0] == 1
    elif "--serve" in cmd or "--metrics-bind" in cmd:
        bind = re.search(r"--(?:serve|metrics-bind) (\S+)", cmd).group(1)
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute("SELECT pgmq.create('jobs')")
        text = served(args, f"http://{bind}/metrics")
        assert "pgmq_up 1" in text and 'queue="jobs"' in text
    elif sub == "dashboard":
        bind = re.search(r"--bind (\S+)", cmd)
        page = served(args, f"http://{bind.group(1) if bind else '127.0.0.1:8080'}/")
        assert "<html" in page.lower()
    else:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute("SELECT pgmq.create('jobs')")
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "jobs" in out.stdout
