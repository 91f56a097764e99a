"""The operations tools' pure parts (no server): rates, formatting, the exporter's families,
option parsing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pgmq_build.ops import metrics, render
from pgmq_build.ops.exits import Exit, OpsError
from pgmq_build.ops.rates import rate
from tests.helpers import run_cli

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def row(**kw):
    """A pgmq.queue_metrics() row of an empty, plain queue, with kw changed."""
    base = dict(queue_name="jobs", paused=False, depth=0, visible=0, in_flight=0, delayed=0,
                oldest_msg_age_sec=None, newest_msg_age_sec=None, dead_letter_queue=None,
                dead_letter_depth=None, archive_rows=0, total_sent=0, table_bytes=8192,
                index_bytes=16384, archive_bytes=8192, dead_tuples=0, default_partition_rows=None,
                callback_succeeded=None, callback_failed=None, estimated=False, measured_at=T0)
    return {**base, **kw}


def test_rates_from_two_samples():
    old = row(total_sent=100, depth=50)
    new = row(total_sent=300, depth=150, measured_at=T0 + timedelta(seconds=2))
    r = rate(old, new)
    assert r.send == 100.0  # 200 sent in 2 s
    assert r.consume == 50.0  # 200 sent, depth +100: 100 left in 2 s


def test_rates_need_a_previous_sample_and_a_counter_that_did_not_go_back():
    assert rate(None, row()).send is None
    recreated = rate(row(total_sent=100), row(total_sent=3, measured_at=T0 + timedelta(seconds=1)))
    assert recreated.send is None and recreated.consume is None


@pytest.mark.parametrize("seconds,text", [(None, "–"), (1.25, "1.2s"), (42, "42s"), (245, "4m05s"),
                                          (7380, "2h03m"), (273600, "3d04h")])
def test_age(seconds, text):
    assert render.age(seconds) == text


def test_families_name_units_labels_and_skip_what_does_not_apply():
    rows = [row(queue_name="a", depth=7, visible=4, in_flight=2, delayed=1, total_sent=9,
                oldest_msg_age_sec=12.5, dead_letter_queue="a_dlq", dead_letter_depth=3,
                callback_succeeded=5, callback_failed=1, paused=True),
            row(queue_name="b", default_partition_rows=11)]
    text = generate_latest(metrics.registry_for(metrics.QueueCollector(lambda: rows))).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("pgmq_queue_messages", (("queue", "a"), ("state", "in_flight")))] == 2
    assert samples[("pgmq_queue_depth_messages", (("queue", "a"),))] == 7
    assert samples[("pgmq_queue_sent_messages_total", (("queue", "a"),))] == 9
    assert samples[("pgmq_queue_oldest_message_age_seconds", (("queue", "a"),))] == 12.5
    assert samples[("pgmq_queue_oldest_message_age_seconds", (("queue", "b"),))] == 0
    assert samples[("pgmq_queue_dead_letter_messages",
                    (("dead_letter_queue", "a_dlq"), ("queue", "a")))] == 3
    assert samples[("pgmq_queue_callbacks_total", (("outcome", "failed"), ("queue", "a")))] == 1
    assert samples[("pgmq_queue_paused", (("queue", "a"),))] == 1
    assert samples[("pgmq_queue_default_partition_rows", (("queue", "b"),))] == 11
    assert ("pgmq_queue_default_partition_rows", (("queue", "a"),)) not in samples
    assert ("pgmq_queue_dead_letter_messages", (("dead_letter_queue", "b"), ("queue", "b"))) not in samples
    assert samples[("pgmq_up", ())] == 1
    assert "# TYPE pgmq_queue_sent_messages_total counter" in text


@pytest.mark.parametrize("text,expected", [("127.0.0.1:9187", ("127.0.0.1", 9187)),
                                           ("[::1]:80", ("::1", 80))])
def test_parse_bind(text, expected):
    assert metrics.parse_bind(text) == expected


@pytest.mark.parametrize("text", ["9187", "host:", "host:0", ":9187", "host:99999"])
def test_parse_bind_refuses(text):
    with pytest.raises(OpsError) as info:
        metrics.parse_bind(text)
    assert info.value.code == Exit.USAGE


def test_dsn_is_required_unless_pgmq_dsn_is_set(monkeypatch):
    monkeypatch.delenv("PGMQ_DSN", raising=False)
    missing = run_cli("queues")
    assert missing.exit_code == Exit.USAGE and "--dsn" in missing.output
    # the environment variable is read: an unreachable server is a database error (exit 1)
    monkeypatch.setenv("PGMQ_DSN", "host=127.0.0.1 port=1 connect_timeout=2")
    down = run_cli("queues", "--json", "--no-rates")
    assert down.exit_code == Exit.DATABASE
    assert down.stderr.startswith("error: cannot connect:")
    assert '"exit_code": 1' in down.stdout
