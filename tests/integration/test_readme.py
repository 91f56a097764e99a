"""Every SQL and shell example of the documentation runs as written: README.md, CONTRIBUTING.md
and every page of docs/ (the site's sources) but the generated reference, whose examples
test_reference_examples.py runs.

Each ```sql block runs through psql (ON_ERROR_STOP, so any error fails it) in a database of its
own with the extension created, as a superuser would paste it; a few blocks also have what they
show checked (SHOWS, keyed by file and first line). A page's blocks also run one after another
in one database, as a reader pasting the page top to bottom would. Each `pgmq-build` line of the
```sh blocks runs with the placeholder DSN (`postgresql://…`, `…`) replaced by the test server's;
the ones that serve until stopped are asked over HTTP, then stopped. The `make` lines are the
set-up commands: CI runs `make test` (.ci/run), which runs `make deps` and `make gates`, and
tests/integration/test_demo.py runs the demo; any other line of a ```sh block fails the
inventory test (what cannot run as written is fenced ```text). The ```python blocks of the README
and of the Python client guide run against the test server too.
"""

from __future__ import annotations

import os
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

ROOT = Path(__file__).resolve().parents[2]
# The generated reference's examples run in tests/integration/test_reference_examples.py, each in
# a fresh database of its own (they are independent, not a page to paste top to bottom).
GENERATED = ROOT / "docs" / "reference"
FILES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
         *sorted(p for p in (ROOT / "docs").rglob("*.md") if GENERATED not in p.parents)]

# Lines of ```sh blocks that this file does not run, and what runs them instead.
RUN_ELSEWHERE = {
    "make demo": "tests/integration/test_demo.py",
    "make test": "CI (.ci/run)",
    "make deps": "make test, in CI",
    "make gates": "make test, in CI",
}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def blocks(path: Path, lang: str) -> list[tuple[str, int, str]]:
    """(file, line, text) of every fenced block of `lang` (indented ones too, dedented)."""
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```" + lang + r"\s*$", lines[i])
        if m:
            indent, start, body = len(m.group(1)), i + 1, []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            out.append((rel(path), start, "\n".join(body) + "\n"))
        i += 1
    return out


SQL = [b for f in FILES for b in blocks(f, "sql")]
SH = [b for f in FILES for b in blocks(f, "sh")]
# The ```python blocks that run (client code against the test server); the rest (Spark jobs, alert
# rules in YAML, ...) are shown only.
PY = blocks(ROOT / "README.md", "python") + blocks(ROOT / "docs/guides/python-client.md", "python")
# What a run prints or leaves, checked beyond "it ran": (file, first line's start) -> (stdout
# text, SQL, its result).
PY_SHOWS = {
    ("README.md", "from pgmq_build.client import Client"):
        ("{'order': 7}", "SELECT count(*) FROM pgmq.a_orders", 1),
    ("docs/guides/python-client.md", "import threading\n\nfrom pgmq_build"):
        ("handling {'task': 2}", "SELECT count(*) FROM pgmq.a_jobs", 2),
    ("docs/guides/python-client.md", "import threading\nfrom datetime"):
        ("SubscriptionInfo(", "SELECT array_agg(order_id) FROM invoices", [4]),
}

# What a block shows, checked beyond "it ran": (file, first line's start) -> text psql must print.
SHOWS = {
    ("README.md", "SELECT pgmq.create('jobs')"): ["jobs       |     1 |       0"],
    ("docs/index.md", "SELECT pgmq.create('jobs')"): ['{"task": 1}'],
    ("docs/concepts/queues-and-streams.md", "SELECT pgmq.create('jobs')"): ['{"a": 1}'],
    ("docs/concepts/queues-and-streams.md", "SELECT pgmq.create_stream('orders', retention"): ["billing"],
    ("docs/concepts/queues-and-streams.md", "SELECT pgmq.create('eu_jobs')"): ["eu_jobs", "orders_log"],
    ("docs/concepts/queues-and-streams.md", "SELECT pgmq.create_stream('orders');"):
        ['{"id": 1}', '{"id": 2}', "card declined"],
    ("docs/guides/exchanges-and-routing.md", "SELECT pgmq.create('orders_eu')"): ["orders_eu"],
    ("docs/guides/access-control.md", "CREATE ROLE app_owner"): ["orders     | app_owner"],
    ("docs/guides/typed-payloads.md", "SELECT pgmq.create('docs', 'xml')"): ["\\x00ff"],
    ("docs/guides/callbacks-and-worker.md", "SELECT pgmq.create('orders');"): ["      42"],
}


def ids(items: list[tuple]) -> list[str]:
    return [f"{f}:{ln}" for f, ln, *_ in items]


def test_the_docs_have_the_examples_this_file_runs():
    assert len(SQL) >= 11 and len(SH) >= 4 and len(PY) == 3
    for (f, start) in SHOWS:
        firsts = [text.splitlines()[0] for bf, _, text in SQL if bf == f]
        assert sum(first.startswith(start) for first in firsts) == 1, (f, start)
    assert not [(f, ln) for f, ln, text in SQL if "<" in text and ">" in text.replace("=>", "").replace("->", "")], \
        "a placeholder such as <batch_id> cannot run as written"


def test_every_shell_line_is_run_here_or_elsewhere():
    """A ```sh line is a `pgmq-build` command (run below), a comment, or a set-up command that
    RUN_ELSEWHERE names; anything else belongs in a ```text block."""
    stray = []
    for f, line, text in SH:
        for k, cmd in enumerate(text.splitlines()):
            cmd = cmd.split("#", 1)[0].strip()
            if cmd and not cmd.startswith("pgmq-build ") and cmd not in RUN_ELSEWHERE:
                stray.append(f"{f}:{line + k}: {cmd}")
    assert not stray, stray


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


@pytest.mark.parametrize("file,line,script", SQL, ids=ids(SQL))
def test_sql_example_runs_as_written(fresh_db, file, line, script):
    out = psql(fresh_db, script)
    assert out.returncode == 0, f"{file}:{line} failed:\n{out.stdout[-3000:]}\n{out.stderr}"
    assert "ERROR" not in out.stderr, out.stderr
    for (f, start), shown in SHOWS.items():
        if f == file and script.startswith(start):
            for text in shown:
                assert text in out.stdout, f"{file}:{line} does not show {text!r}:\n{out.stdout}"


PAGES = sorted({f for f, _, _ in SQL if sum(bf == f for bf, _, _ in SQL) > 1})


@pytest.mark.parametrize("file", PAGES)
def test_a_pages_sql_examples_run_one_after_another(fresh_db, file):
    """A reader pastes a page top to bottom into one database: no block trips over an earlier one."""
    for f, line, script in SQL:
        if f == file:
            out = psql(fresh_db, script)
            assert out.returncode == 0, f"{file}:{line} failed after the blocks above it:\n{out.stderr}"


@pytest.mark.parametrize("file,line,code", PY, ids=ids(PY))
def test_python_example_runs_as_written(fresh_db, file, line, code):
    """Client code of the docs, with its DSN replaced by the test server's."""
    literal = '"postgresql://postgres@localhost/app"'
    assert literal in code, f"{file}:{line}: the example's DSN is {literal}"
    code = code.replace(literal, repr(dsn_url(fresh_db)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, f"{file}:{line} failed:\n{out.stderr}"
    (printed, sql, result), = [v for (f, start), v in PY_SHOWS.items()
                               if f == file and code.startswith(start)]
    assert printed in out.stdout, out.stdout
    with psycopg.connect(fresh_db) as c:
        assert c.execute(sql).fetchone()[0] == result


# -- shell ------------------------------------------------------------------------------------

def commands() -> list[tuple[str, int, str]]:
    """Every `pgmq-build` command of the ```sh blocks, comment stripped."""
    out = []
    for f, line, text in SH:
        for k, cmd in enumerate(text.splitlines()):
            cmd = cmd.split("#", 1)[0].strip()
            if cmd.startswith("pgmq-build "):
                out.append((f, line + k, cmd))
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


def test_the_shell_examples_are_these():
    seen = {cmd.split()[1] for _, _, cmd in CMDS}
    assert {"migrate", "metrics", "worker", "dashboard"} <= seen


@pytest.mark.parametrize("file,line,cmd", CMDS, ids=ids(CMDS))
def test_shell_example_runs_as_written(pg_cluster, fresh_db, file, line, cmd):
    args = with_dsn(cmd, fresh_db)
    sub = cmd.split()[1]
    if sub == "migrate":
        # the documented case: upstream's SQL-only install, no extension row
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
    elif sub == "install":
        # the database of the example has the extension already: install says so, changes nothing
        out = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "is already installed; nothing was changed" in out.stdout
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
