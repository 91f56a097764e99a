"""The steady-state run (`python3 -m bench steady`, bench/steady.py) on the
test server, shortened to 15 s at 200 msg/s with a 5 s xmin hold: the report has its fields and
nothing was lost (sent = consumed + left in the queue, none consumed twice)."""

from __future__ import annotations

import json

from bench import steady
from tests.helpers import scalar

ARGS = ["--minutes", "0.25", "--hold-at", "5s", "--hold-seconds", "5", "--rate", "200",
        "--sample", "1"]


def test_steady_run_reports_and_loses_nothing(dsn, conn, tmp_path, capsys):
    out = tmp_path / "steady.json"
    args = steady.parse_args([*ARGS, "--json", str(out)])
    assert steady.run(args, dsn, "the test server") == 0
    text = capsys.readouterr().out
    assert "autovacuum=on, naptime" in text
    assert text.count(" | hold   | ") == 5 and " | after  | " in text
    assert "Summary (ours):" in text and "nothing lost" in text
    assert "during the hold vs before: p50 x" in text

    report = json.loads(out.read_text())
    assert report["config"]["rate"] == 200 and report["settings"]["autovacuum"]["value"] == "on"
    assert len(report["loadavg_start"]) == 3
    (res,) = report["results"]
    assert res["system"] == "ours"
    samples = res["samples"]
    assert len(samples) == 15
    for key in ("t", "phase", "depth", "table_bytes", "index_bytes", "n_dead_tup", "n_live_tup",
                "autovacuum_count", "send_rate", "consume_rate", "p50_ms", "p99_ms",
                "consumer_cpu_us_per_msg", "xmin_age", "buffers_per_msg", "seq_scans_per_call"):
        assert key in samples[-1], key
    assert max(s["xmin_age"] for s in samples if s["phase"] == "hold") > 0  # the hold held
    assert sum(s["sent"] for s in samples) > 0.8 * 200 * 15  # paced at about the rate
    assert all(s["table_bytes"] > 0 for s in samples)

    summary = res["summary"]
    m = summary["messages"]
    assert m["sent"] == m["consumed"] + m["left"] and m["lost"] == 0
    assert m["duplicates"] == 0 and m["sent"] > 0
    h = summary["hold"]
    for phase in ("before", "during", "after"):
        assert h[phase]["consume_rate"] > 0 and h[phase]["p50_ms"] is not None
        assert h[phase]["p99_ms"] >= h[phase]["p50_ms"]
    assert set(h["recovery_seconds"]) == {"throughput", "p50", "p99", "backlog", "all",
                                          "buffers_per_msg"}
    assert set(h["slowdown"]) >= {"p50", "p99", "throughput"}
    assert set(h["growth"]) == {"table_bytes", "index_bytes", "n_dead_tup"}
    assert h["growth"]["table_bytes"]["during_hold"] >= 0
    assert set(summary["flat"]) == {"before_hold", "whole_run", "after_hold"}
    # the run's database is gone
    assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname = %s",
                  (steady.STEADY_DB,)) == 0
