"""The streams' steady-state run (`python3 -m bench steady --streams`,
bench/steady_streams.py) on the test server, shortened to 20 s at 200 events/s with a
6 s xmin hold and segments rotating every 3 s: every subscription got every event once, the event
tables never had a dead tuple, segments were rotated and dropped, and the report has its fields."""

from __future__ import annotations

import json

from bench import steady_streams
from tests.helpers import scalar

ARGS = ["--minutes", "0.34", "--hold-at", "8s", "--hold-seconds", "6", "--rate", "200",
        "--sample", "1", "--rotation", "3s", "--retention", "0", "--subscriptions", "3"]


def test_stream_steady_run_loses_nothing_and_leaves_no_dead_tuples(dsn, conn, tmp_path, capsys):
    out = tmp_path / "steady.json"
    args = steady_streams.parse_args([*ARGS, "--json", str(out)])
    assert steady_streams.run(args, dsn, "the test server") == 0
    text = capsys.readouterr().out
    assert "Summary (ours, a stream):" in text and "none, as it must be" in text
    assert text.count(" | hold   | ") == 6 and " | after  | " in text
    assert "during the hold vs before: throughput x" in text

    report = json.loads(out.read_text())
    (res,) = report["results"]
    samples = res["samples"]
    assert len(samples) == 21  # 20.4 s
    for key in ("t", "phase", "sent", "delivered", "backlog", "segments", "event_bytes", "event_dead",
                "catalog_dead", "xmin_age", "p50_ms", "p99_ms", "consumer_cpu_us_per_event"):
        assert key in samples[-1], key
    assert max(s["xmin_age"] for s in samples if s["phase"] == "hold") > 0  # the hold held
    assert all(s["event_dead"] == 0 for s in samples)
    assert max(s["segments"] for s in samples) >= 2  # rotated ...
    assert min(s["segments"] for s in samples[10:]) <= 3  # ... and dropped behind the readers

    summary = res["summary"]
    events = summary["events"]
    assert events["sent"] > 0.8 * 200 * 20 and len(events["subscriptions"]) == 3
    for sub in events["subscriptions"].values():
        assert (sub["received"], sub["lost"], sub["duplicates"]) == (events["sent"], 0, 0)
    assert summary["event_dead_max"] == 0
    h = summary["hold"]
    for phase in ("before", "during", "after"):
        assert h[phase]["delivered"] > 0 and h[phase]["p99_ms"] >= h[phase]["p50_ms"]
    assert h["throughput_ratio"] is not None
    assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname = %s",
                  (steady_streams.STEADY_DB,)) == 0
