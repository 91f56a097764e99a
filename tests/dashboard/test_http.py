"""The dashboard over HTTP against a real database: pages, status codes, the read-only default,
CSRF and origin checks, 404s for names that are not queues, errors as pages."""

from __future__ import annotations

import ast
import html
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import quote

from psycopg.rows import dict_row

import pgmq_build.dashboard as package
from pgmq_build.dashboard import queries
from tests.helpers import run_cli, scalar, send_n

PAGE_SIZE = 20


def queue_state(conn, queue: str) -> dict:
    return conn.cursor(row_factory=dict_row).execute(
        "SELECT paused, depth FROM pgmq.queue_metrics(%s)", (queue,)).fetchone()


def csrf_of(body: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', body).group(1)


def test_queue_list_shows_every_queue_with_its_numbers(dashboard, demo, conn):
    dash = dashboard()
    reply = dash.get("/")
    assert reply.status == 200 and reply.headers["content-type"] == "text/html; charset=utf-8"
    text = html.unescape(re.sub(r"<[^>]+>", " ", reply.body))
    for q in demo.queues:
        assert f'href="/queues/{q}"' in reply.body
    row = re.search(r'<tr>\s*<td class="l"><a href="/queues/orders">.*?</tr>', reply.body, re.S).group(0)
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[2:6] == ["26", "20", "4", "2"]  # depth, visible, in flight, delayed
    assert "paused" in text and f"{demo.dlq}</a>: {demo.dead}" in reply.body
    csp = reply.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "form-action 'self'" in csp
    assert reply.headers["x-frame-options"] == "DENY"


def test_queue_detail_charts_settings_and_pretty_payloads(dashboard, demo, conn):
    dash = dashboard()
    reply = dash.get("/queues/orders")
    assert reply.status == 200
    assert reply.body.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 3
    assert all(t in reply.body for t in ("Depth", "Oldest message age", "Throughput"))
    def policy(body: str) -> list[str]:
        table = re.search(r'<table id="settings">.*?</table>', body, re.S).group(0)
        return [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", table, re.S)]

    assert policy(reply.body)[0] == "no"  # orders has no retry policy
    msgs = re.findall(r"<pre>(.*?)</pre>", reply.body, re.S)
    assert html.unescape(msgs[0]) == '{\n  "n": 1,\n  "total": 12.5,\n  "customer": "ada"\n}'
    settings = dash.get(f"/queues/{demo.source}")
    assert policy(settings.body)[:2] == ["yes", "0"] and policy(settings.body)[5] == demo.dlq


def test_message_browser_pages_and_archive(dashboard, demo, conn):
    send_n(conn, "emails", 30, start=100)  # 39 queued: two pages of 20
    dash = dashboard()
    first = dash.get("/queues/emails")
    ids = [int(i) for i in re.findall(r"<tr>\s*<td>(\d+)</td>", first.body)]
    assert len(ids) == PAGE_SIZE and ids == sorted(ids) and ids[0] == 6  # 1-5 are archived
    nxt = re.search(r'id="next" href="([^"]+)"', first.body).group(1)
    assert nxt == f"/queues/emails?after={ids[-1]}"
    second = dash.get(nxt)
    rest = [int(i) for i in re.findall(r"<tr>\s*<td>(\d+)</td>", second.body)]
    assert len(rest) == 39 - PAGE_SIZE and rest[0] > ids[-1] and 'id="next"' not in second.body
    archived = dash.get("/queues/emails?archived=1")
    assert [int(i) for i in re.findall(r"<tr>\s*<td>(\d+)</td>", archived.body)] == [1, 2, 3, 4, 5]
    assert dash.get("/queues/emails?after=abc").status == 400
    assert dash.get("/queues/emails?after=-1").status == 400


NOT_QUEUES = ["nope", "x'; DROP TABLE pgmq.meta; --", "orders' OR '1'='1", "a" * 200, "%s",
              "q_orders", "$1", "orders;", "a/b", "a\x00b"]


def test_a_name_that_is_no_queue_is_a_404_and_harms_nothing(dashboard, demo, conn):
    dash = dashboard()
    for name in NOT_QUEUES:
        reply = dash.get("/queues/" + quote(name, safe=""))
        assert reply.status == 404 and "404 Not Found" in reply.body, name
        for action in ("pause", "purge"):
            refused = dash.post(f"/queues/{quote(name, safe='')}/{action}", {})
            assert refused.status in (403, 404), name  # read-only: refused before any SQL
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == len(demo.queues)  # all still there
    assert dash.get("/queues/orders").status == 200
    assert dash.get("/queues/%ff").status == 400  # not UTF-8


def test_hostile_but_valid_queue_name_is_escaped_and_reachable(dashboard, conn):
    name = "<b>x</b> & \"y\""
    conn.execute("SELECT pgmq.create(%s)", (name,))
    conn.execute("SELECT pgmq.send(%s, %s::jsonb)", (name, '{"html": "<img src=x onerror=alert(1)>"}'))
    dash = dashboard()
    listing = dash.get("/")
    assert "<b>x</b>" not in listing.body and "&lt;b&gt;x&lt;/b&gt; &amp; &#34;y&#34;" in listing.body
    link = re.search(r'href="(/queues/%3Cb%3E[^"]*)"', listing.body).group(1)
    detail = dash.get(link)
    assert detail.status == 200
    assert "<img" not in detail.body and "&lt;img src=x onerror=alert(1)&gt;" in detail.body


def test_read_only_by_default(dashboard, demo, conn):
    dash = dashboard()
    page = dash.get("/queues/orders")
    assert "<form" not in page.body and "read-only" in page.body
    assert "<form" not in dash.get("/dead-letters").body
    for action in ("/queues/orders/pause", "/queues/orders/purge", f"/dead-letters/{demo.dlq}/redrive"):
        reply = dash.post(action, {"csrf": dash.app.csrf_token, "confirm": "yes"})
        assert reply.status == 403 and "--allow-actions" in reply.body
    assert queue_state(conn, "orders") == {"paused": False, "depth": 26}
    assert scalar(conn, f"SELECT count(*) FROM pgmq.q_{demo.dlq}") == demo.dead


def test_actions_need_the_token_and_the_same_origin(dashboard, demo, conn):
    dash = dashboard(allow_actions=True)
    token = csrf_of(dash.get("/queues/orders").body)
    assert token == dash.app.csrf_token
    refused = [
        dash.post("/queues/orders/pause", {}),  # no token
        dash.post("/queues/orders/pause", {"csrf": token[:-1] + "x"}),  # wrong token
        dash.post("/queues/orders/pause", {"csrf": token}, headers={"Origin": "http://evil.example"}),
        dash.post("/queues/orders/pause", {"csrf": token}, origin=False,
                  headers={"Referer": "http://evil.example/x"}),
    ]
    assert [r.status for r in refused] == [403, 403, 403, 403]
    assert queue_state(conn, "orders")["paused"] is False
    assert dash.get("/queues/orders/pause").status == 405  # actions are POST only
    done = dash.post("/queues/orders/pause", {"csrf": token})
    assert done.status == 303 and done.headers["location"] == "/queues/orders?notice=paused"
    assert queue_state(conn, "orders")["paused"] is True
    assert "Paused: consumers get nothing" in dash.get(done.headers["location"]).body
    # A client that sends neither Origin nor Referer (not a browser) still needs the token.
    assert dash.post("/queues/orders/resume", {"csrf": token}, origin=False).status == 303
    assert queue_state(conn, "orders")["paused"] is False


def test_host_header_must_name_the_dashboard(dashboard, demo):
    dash = dashboard()
    assert dash.get("/", headers={"Host": "evil.example:80"}).status == 400  # DNS rebinding
    port = dash.url.rsplit(":", 1)[1]
    assert dash.get("/", headers={"Host": f"localhost:{port}"}).status == 200


def test_purge_needs_confirmation(dashboard, demo, conn):
    dash = dashboard(allow_actions=True)
    token = dash.app.csrf_token
    assert dash.post("/queues/emails/purge", {"csrf": token}).status == 400
    assert queue_state(conn, "emails")["depth"] == 9
    done = dash.post("/queues/emails/purge", {"csrf": token, "confirm": "yes"})
    assert done.status == 303 and done.headers["location"] == "/queues/emails?notice=purged&n=9"
    assert queue_state(conn, "emails")["depth"] == 0
    assert dash.post("/queues/nope/purge", {"csrf": token, "confirm": "yes"}).status == 404


def test_redrive_over_http(dashboard, demo, conn):
    dash = dashboard(allow_actions=True)
    token = dash.app.csrf_token
    path = f"/dead-letters/{demo.dlq}/redrive"
    assert dash.post(path, {"csrf": token, "max_messages": "two"}).status == 400
    assert dash.post(path, {"csrf": token, "target": "nope"}).status == 404
    before = queue_state(conn, demo.source)["depth"]
    done = dash.post(path, {"csrf": token, "target": "", "max_messages": "2"})
    assert done.status == 303 and done.headers["location"] == "/dead-letters?notice=redriven&n=2"
    assert queue_state(conn, demo.dlq)["depth"] == demo.dead - 2
    assert queue_state(conn, demo.source)["depth"] == before + 2
    moved = dash.post(path, {"csrf": token, "target": "orders"})
    assert moved.headers["location"] == f"/dead-letters?notice=redriven&n={demo.dead - 2}"
    assert queue_state(conn, "orders")["depth"] == 26 + demo.dead - 2


def test_dead_letter_view_shows_reason_and_source(dashboard, demo):
    body = dashboard().get("/dead-letters").body
    section = re.search(r'<section class="dlq".*?</section>', body, re.S).group(0)
    assert f'data-queue="{demo.dlq}"' in section and f"dead-letter queue of {demo.source}" in section
    rows = re.findall(r"<tr>\s*<td>\d+</td>(.*?)</tr>", section, re.S)
    assert len(rows) == demo.dead
    reasons = sorted(re.search(r'<td class="l">(\w+)</td>', r).group(1) for r in rows)
    assert reasons == ["nack"] * 3 + ["rollback"] * 2
    assert all(f'<td class="l">{demo.source}</td>' in r for r in rows)
    assert section.count("card declined") == 3


def test_database_errors_are_pages_and_the_server_keeps_running(dashboard, demo, make_role, dsn):
    role = make_role("dash_nobody", login=True)  # no USAGE on schema pgmq
    dash = dashboard(f"{dsn} user={role}")
    for _ in range(2):
        reply = dash.get("/queues/orders")
        assert reply.status == 500 and "permission denied" in reply.body and "42501" in reply.body
    down = dashboard("host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=1",
                     pool_timeout=0.5)
    for _ in range(2):
        reply = down.get("/")
        assert reply.status == 503 and "database is unavailable" in reply.body
    assert down.get("/no-such-page").status == 404


def test_a_pg_monitor_role_is_enough_to_watch(dashboard, demo, make_role, conn, dsn):
    role = make_role("dash_monitor", login=True)
    conn.execute(f"GRANT pg_monitor TO {role}")
    dash = dashboard(f"{dsn} user={role}")
    listing = dash.get("/")
    assert listing.status == 200 and all(f'href="/queues/{q}"' in listing.body for q in demo.queues)
    assert dash.get("/queues/orders?archived=1").status == 200
    assert dash.get("/dead-letters").body.count("card declined") == 3


def test_every_statement_is_a_constant_from_queries():
    """Request input can only reach SQL as a parameter: each execute() in the package gets one
    of the constants of queries.py, and those hold no formatting but %s placeholders."""
    root = Path(package.__file__).parent
    calls = 0
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "execute":
                first = node.args[0]
                assert (isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name)
                        and first.value.id == "queries"), f"{path.name}:{node.lineno}"
                calls += 1
    assert calls >= 6
    for name in dir(queries):
        if name.isupper():
            text = getattr(queries, name)
            assert re.sub(r"%s::\w+|%s", "", text).count("%") == 0 and "{" not in text, name


def test_cli_serves_until_interrupted(demo, dsn, repo_root):
    proc = subprocess.Popen([sys.executable, "-m", "pgmq_build", "dashboard", "--dsn", dsn,
                             "--bind", "127.0.0.1:0", "--sample-interval", "0.5"],
                            cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(repo_root)})
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        assert "read-only" in line
        with urllib.request.urlopen(url) as reply:
            assert reply.status == 200 and "payments_dlq" in reply.read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_cli_refuses_a_bad_bind(dsn):
    result = run_cli("dashboard", "--dsn", dsn, "--bind", "8080")
    assert result.exit_code == 2 and "HOST:PORT" in result.output
