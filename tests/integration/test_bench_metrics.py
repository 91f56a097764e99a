"""`python3 -m bench metrics` (bench/metrics_cost.py) on the test server,
with a queue just over the exact-count size: every row reports, ours estimates, and the
estimate is close to upstream's full count."""

from __future__ import annotations

import json

import pytest

from bench import metrics_cost


def test_metrics_cost_reports_every_call(dsn, tmp_path, capsys):
    out = tmp_path / "metrics.json"
    args = metrics_cost.parse_args(["--messages", "60000", "--leased", "50", "--repeat", "2",
                                    "--json", str(out)])
    assert metrics_cost.run(args, dsn, "the test server") == 0
    assert "pgmq.queue_metrics('bench_metrics')" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [(r["system"].split()[0], r["call"].split("(")[0]) for r in rows] == [
        ("ours", "pgmq.queue_metrics"), ("ours", "pgmq.metrics"), ("upstream", "pgmq.metrics")]
    ours, exact, upstream = rows
    assert ours["estimated"] is True and exact["depth"] == upstream["depth"] == 60000
    assert abs(ours["depth"] - 60000) <= 600
    assert all(r["median_ms"] > 0 for r in rows)


@pytest.mark.parametrize("argv", [["--messages", "0"], ["--repeat", "0"], ["--messages", "5", "--leased", "6"]])
def test_metrics_cost_refuses_bad_options(argv):
    with pytest.raises(SystemExit) as exc:
        metrics_cost.parse_args(argv)
    assert exc.value.code == 2
