"""`pgmq-build stream ...` and the stream series of `pgmq-build metrics` against a real server:
what they print (tables and --json), what they change, and their exit codes."""

from __future__ import annotations

import json
import time

import pytest

from pgmq_build.ops.exits import Exit
from tests.helpers import column, scalar, wait_for
from tests.ops.support import samples, spawn


@pytest.fixture
def stream(conn):
    """Stream ev with subscription a (from the start) and three events."""
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a', 'earliest')")
    conn.execute("SELECT pgmq.stream_send_batch('ev', ARRAY['{\"n\":1}','{\"n\":2}','{\"n\":3}']::jsonb[])")
    return "ev"


def drain(conn, sub="a", stream="ev") -> list[int]:
    got = []
    while rows := conn.execute("SELECT batch_id, (message->>'n')::int FROM pgmq.stream_read(%s, %s)",
                               (stream, sub)).fetchall():
        conn.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (stream, sub, rows[0][0]))
        got += [n for _, n in rows]
    return got


def test_create_list_info_subscribe_unsubscribe_drop(ops, ops_json, conn):
    assert ops_json("stream", "create", "ev", "--retention", "2 days", "--rotation-period", "10 min",
                    "--retention-bytes", "1000000", "--drop-unacked") == {"stream": "ev", "created": True}
    assert ops_json("stream", "create", "ev") == {"stream": "ev", "created": False}
    doc = ops_json("stream", "subscribe", "ev", "a", "--start", "earliest")
    assert doc == {"stream": "ev", "subscription": "a", "position": 0, "created": True}
    assert ops_json("stream", "subscribe", "ev", "a")["created"] is False
    conn.execute("SELECT pgmq.stream_send('ev', '{}')")

    (listed,) = ops_json("stream", "list")["streams"]
    assert (listed["stream_name"], listed["retention"], listed["rotation_period"]) == ("ev", 172800.0, 600.0)
    assert (listed["retention_bytes"], listed["drop_unacked"], listed["segments"]) == (1000000, True, 1)
    assert (listed["subscriptions"], listed["max_lag_events"]) == (1, 1)
    table = ops("stream", "list")
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line.strip()}
    assert table.exit_code == 0 and rows["ev"][1] == conn.info.user and rows["ev"][-2:] == ["1", "1"]

    (sub,) = ops_json("stream", "info", "ev")["subscriptions"]
    assert (sub["subscription_name"], sub["lag_events"], sub["batches_out"], sub["lost"]) == ("a", 1, 0, 0)
    assert "a" in ops("stream", "info").stdout

    refused = ops("stream", "unsubscribe", "ev", "a", input="n\n")
    assert refused.exit_code == Exit.ABORTED and "1 event(s) not acknowledged" in refused.stderr
    assert ops_json("stream", "unsubscribe", "ev", "a", "--yes")["removed"] is True
    ops_json("stream", "unsubscribe", "ev", "a", "--yes", code=Exit.NOT_FOUND)

    refused = ops("stream", "drop", "ev", input="\n")
    assert refused.exit_code == Exit.ABORTED and "Drop stream 'ev'" in refused.stderr
    assert ops_json("stream", "drop", "ev", "--yes") == {"stream": "ev", "dropped": True, "subscriptions": []}
    assert scalar(conn, "SELECT count(*) FROM pgmq.streams") == 0


@pytest.mark.parametrize("args", [("stream", "drop", "nope", "--yes"), ("stream", "info", "nope"),
                                  ("stream", "subscribe", "nope", "a"), ("stream", "peek", "nope"),
                                  ("stream", "send", "nope", "{}"), ("stream", "tail", "nope"),
                                  ("stream", "rewind", "ev", "ghost", "--to-position", "0", "--yes"),
                                  ("stream", "peek", "ev", "--subscription", "ghost")])
def test_not_found_exits_3(ops, stream, args):
    result = ops(*args)
    assert result.exit_code == Exit.NOT_FOUND, result.output
    assert result.stderr.startswith("error: ") and "does not exist" in result.stderr


def test_bad_input_is_refused_and_changes_nothing(ops, ops_json, conn, stream):
    before = (conn.execute("SELECT subscription_name, position, lag_events, batches_out "
                           "FROM pgmq.stream_info()").fetchall(),
              scalar(conn, "SELECT count(*) FROM pgmq.s_ev"))
    for args, code, words in [
        (("stream", "subscribe", "ev", "b", "--start", "soon"), Exit.USAGE, ["--start", "latest, earliest"]),
        (("stream", "send", "ev", "{}", "{bad"), Exit.USAGE, ["MESSAGE 2", "not JSON"]),
        (("stream", "send", "ev", "{}", "--headers", "[1]"), Exit.USAGE, ["--headers", "JSON object"]),
        (("stream", "rewind", "ev", "a", "--yes"), Exit.USAGE, ["exactly one of --to-position"]),
        (("stream", "peek", "ev", "--limit", "0"), Exit.USAGE, ["--limit"]),
        (("stream", "create", "ev2", "--retention", "soonish"), Exit.DATABASE, ["SQLSTATE 22007"]),
        (("stream", "create", "ev2", "--rotation-period", "0"), Exit.DATABASE, ["SQLSTATE 22023", "rotation_period"]),
        (("stream", "create", "bad;name"), Exit.DATABASE, ["SQLSTATE 42602"]),
        (("stream", "rewind", "ev", "a", "--to-position", "999999", "--yes"), Exit.DATABASE, ["SQLSTATE 22023"]),
    ]:
        result = ops(*args)
        assert result.exit_code == code, (args, result.output)
        for word in words:
            assert word in result.output, (args, word, result.output)
    after = (conn.execute("SELECT subscription_name, position, lag_events, batches_out "
                           "FROM pgmq.stream_info()").fetchall(),
             scalar(conn, "SELECT count(*) FROM pgmq.s_ev"))
    assert after == before and column(conn, "SELECT stream_name FROM pgmq.streams") == ["ev"]


def test_send_arguments_or_stdin_in_one_transaction(ops_json, conn, stream):
    doc = ops_json("stream", "send", "ev", '{"n": 4}', '"five"', "--headers", '{"src": "cli"}')
    assert doc["stream"] == "ev" and len(doc["ev_ids"]) == 2
    doc = ops_json("stream", "send", "ev", input='{"n": 6}\n\n[7]\n')
    assert len(doc["ev_ids"]) == 2
    assert column(conn, "SELECT message FROM pgmq.s_ev ORDER BY ev_id")[3:] == [{"n": 4}, "five", {"n": 6}, [7]]
    assert column(conn, "SELECT headers FROM pgmq.s_ev ORDER BY ev_id")[3:5] == [{"src": "cli"}] * 2
    assert scalar(conn, "SELECT count(DISTINCT xmin::text) FROM pgmq.s_ev WHERE ev_id > 3") == 2


def test_peek_consumes_nothing_and_follows_a_subscription(ops, ops_json, conn, stream):
    doc = ops_json("stream", "peek", "ev", "--after", "1", "--limit", "1")
    assert [e["message"] for e in doc["events"]] == [{"n": 2}]
    assert drain(conn)[:1] == [1]  # peeking left everything to the subscription
    conn.execute("SELECT pgmq.subscribe('ev', 'b', 'earliest')")
    conn.execute("SELECT pgmq.stream_send('ev', '{\"n\": 4}')")
    assert [e["message"]["n"] for e in ops_json("stream", "peek", "ev", "--subscription", "a")["events"]] == [4]
    assert len(ops_json("stream", "peek", "ev", "--subscription", "b")["events"]) == 4
    table = ops("stream", "peek", "ev")
    assert table.exit_code == 0 and '{"n": 4}' in table.stdout


def test_rewind_by_position_and_time(ops, ops_json, conn, stream):
    assert drain(conn) == [1, 2, 3]
    refused = ops("stream", "rewind", "ev", "a", "--to-position", "0", input="n\n")
    assert refused.exit_code == Exit.ABORTED and drain(conn) == []
    doc = ops_json("stream", "rewind", "ev", "a", "--to-position", "0", "--yes")
    assert doc["position"] == 0 and doc["from"] > 0
    assert drain(conn) == [1, 2, 3]
    doc = ops_json("stream", "rewind", "ev", "a", "--to-time", "2000-01-01 00:00+00", "--yes")
    assert doc["position"] == 0 and drain(conn) == [1, 2, 3]


def test_tail_shows_events_as_they_commit_late_ones_too(dsn, connect, conn, stream):
    slow = connect(autocommit=False)
    slow.execute("SELECT pgmq.stream_send('ev', '{\"n\": 4}')")  # before the tail, committed after
    proc = spawn("stream", "tail", "ev", "--json", "--count", "3", "--interval", "0.05", "--dsn", dsn)
    try:
        # its first look (a snapshot, then COMMIT) is done: what commits from now on is new to it
        wait_for(lambda: proc.poll() is not None or scalar(
            conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgmq-build' "
                  "AND (query = 'COMMIT' OR query LIKE '%%pg_visible_in_snapshot%%')") == 1,
            timeout=30, what="the tail's first look")
        conn.execute("SELECT pgmq.stream_send('ev', '{\"n\": 5}')")
        time.sleep(0.2)
        slow.commit()
        conn.execute("SELECT pgmq.stream_send('ev', '{\"n\": 6}')")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    shown = [json.loads(line)["message"]["n"] for line in out.splitlines()]
    assert shown == [5, 4, 6]  # in commit order; the events from before the tail are not shown
    assert drain(conn) == [1, 2, 3, 4, 5, 6]  # nothing consumed


def test_metrics_export_each_subscription_s_lag(ops, conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'b')")  # from 'latest': nothing to do
    result = ops("metrics")
    assert result.exit_code == 0, result.output
    got = samples(result.stdout)

    def sub(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({"stream": "ev", **labels}.items())))]

    assert sub("pgmq_stream_subscription_lag_events", subscription="a") == 3
    assert sub("pgmq_stream_subscription_lag_events", subscription="b") == 0
    assert sub("pgmq_stream_subscription_lag_seconds", subscription="a") >= 0
    assert sub("pgmq_stream_subscription_batches_out", subscription="a") == 0
    assert sub("pgmq_stream_subscription_lost_events_total", subscription="a") == 0
    assert sub("pgmq_stream_segments") == 1 and sub("pgmq_stream_bytes") > 0
    assert got[("pgmq_up", ())] == 1
    drain(conn)
    again = samples(ops("metrics").stdout)
    assert again[("pgmq_stream_subscription_lag_events", (("stream", "ev"), ("subscription", "a")))] == 0
    doc = json.loads(ops("metrics", "--json").stdout)
    assert [s["subscription_name"] for s in doc["subscriptions"]] == ["a", "b"]
    assert doc["streams"][0]["stream_name"] == "ev" and doc["streams"][0]["retention"] == 7 * 86400
