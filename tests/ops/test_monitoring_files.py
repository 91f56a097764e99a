"""The files operators load into the tools they run (docs/grafana/pgmq.json,
docs/prometheus/alerts.yml) refer only to series the exporter emits: the names are collected from
a live scrape of a database with a queue, its dead-letter queue (and a message nacked into it),
a callback, a queue that counts deliveries and a stream subscription. The rules pass `promtool check rules` and their unit tests
(alerts_test.yml) when promtool is installed (tools/ensure-deps.sh takes it out of Debian's prometheus package), else a
check of their shape."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pgmq_build.ops import metrics
from tests.ops.support import REPO

DASHBOARD = REPO / "docs" / "grafana" / "pgmq.json"
RULES = REPO / "docs" / "prometheus" / "alerts.yml"
RULE_TESTS = REPO / "docs" / "prometheus" / "alerts_test.yml"
PROMETHEUS_OWN = {"up"}  # series Prometheus makes itself for every target
TARGET_LABELS = {"job", "instance"}  # labels Prometheus adds to every scraped series
SERIES = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


@pytest.fixture
def emitted(conn, dsn) -> dict[str, set[str]]:
    """{sample name: its label names} of one scrape of a database with every kind of thing."""
    conn.execute("SELECT pgmq.create('jobs'), pgmq.create('jobs_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    conn.execute("SELECT pgmq.nack('jobs', pgmq.send('jobs', '{}'))")  # a nack and a dead letter
    # a queue that counts deliveries, with a delivery, a redelivery and its consumer
    conn.execute("SELECT pgmq.set_delivery_counting('jobs_dlq'), pgmq.send('jobs_dlq', '{}')")
    conn.execute("SELECT * FROM pgmq.read('jobs_dlq', 0, 1)")
    conn.execute("SELECT * FROM pgmq.pop('jobs_dlq', 10)")
    conn.execute("SELECT * FROM pgmq.pop('jobs_dlq', 1)")  # finds nothing: writes the counts
    conn.execute("CREATE PROCEDURE public.handle(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN END $$")
    conn.execute("CALL pgmq.register_callback('jobs', 'public.handle(jsonb)')")
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a', 'earliest')")
    conn.execute("SELECT pgmq.stream_send('ev', '{}')")
    source = metrics.QueueMetricsSource(dsn)
    try:
        text = metrics.generate_latest(metrics.registry_for(metrics.QueueCollector(source.read))).decode()
    finally:
        source.close()
    got: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got.setdefault(s.name, set()).update(s.labels)
    assert got["pgmq_up"] is not None and "pgmq_stream_subscription_lag_events" in got
    return got


def series_in(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names matched) of each pgmq series or Prometheus' own in a PromQL
    expression (function names, keywords and label names are none of those)."""
    for m in SERIES.finditer(expr):
        name, matchers = m.group(1), m.group(2) or ""
        if name.startswith("pgmq_") or name in PROMETHEUS_OWN:
            yield name, set(MATCHER.findall(matchers))


def check_expr(expr: str, emitted: dict[str, set[str]], where: str) -> int:
    n = 0
    for name, labels in series_in(expr):
        n += 1
        if name in PROMETHEUS_OWN:
            continue
        assert name in emitted, f"{where}: {name} is not a series the exporter emits"
        unknown = labels - emitted[name] - TARGET_LABELS
        assert not unknown, f"{where}: {name} has no label(s) {unknown}"
    return n


def panels(dashboard: dict) -> Iterator[dict]:
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def test_every_dashboard_panel_uses_emitted_series(emitted):
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [(f"panel {p['title']!r}", t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    queries += [(f"variable {v['name']!r}", v["query"]["query"]) for v in dashboard["templating"]["list"]
                if v["type"] == "query"]
    assert len(queries) > 20
    for where, expr in queries:
        assert check_expr(expr, emitted, where) > 0, f"{where}: no series in {expr!r}"
    for p in panels(dashboard):  # every graph draws a gap as a gap, not a line across an outage
        if p["type"] == "timeseries":
            assert p["fieldConfig"]["defaults"]["custom"]["spanNulls"] is False, p["title"]


def test_every_alert_uses_emitted_series(emitted):
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {"PgmqExporterDown", "PgmqOldestMessageTooOld",
                                           "PgmqDeadLettersGrowing", "PgmqConsumerAbsent"}
    for r in rules:
        assert check_expr(r["expr"], emitted, r["alert"]) > 0
        assert {"severity"} <= r["labels"].keys() and {"summary", "description"} <= r["annotations"].keys()


def test_a_made_up_series_is_caught(emitted):
    """The check above can fail: a name or a label the exporter does not emit."""
    with pytest.raises(AssertionError, match="not a series"):
        check_expr("rate(pgmq_queue_acked_total[5m])", emitted, "x")
    with pytest.raises(AssertionError, match="no label"):
        check_expr('pgmq_queue_depth_messages{consumer="a"}', emitted, "x")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (make deps)")
def test_promtool_checks_and_tests_the_rules():
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_guide_lists_every_series(emitted):
    """docs/guides/metrics-and-alerts.md names each metric family a scrape emits."""
    guide = (REPO / "docs" / "guides" / "metrics-and-alerts.md").read_text()
    families = {re.sub(r"_total$", "", name) for name in emitted}
    missing = sorted(f for f in families if f not in guide)
    assert not missing, f"not in the guide: {missing}"
