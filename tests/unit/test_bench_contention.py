"""The contention sweep's pure parts: pgbench's per-transaction log, percentiles, the tables."""

from __future__ import annotations

from bench.contention import percentile, read_log
from bench.contention_report import Point, markdown, peak_share


def test_read_log_counts_the_window_only(tmp_path):
    # client, transaction, latency µs (or a failure), script, end s, end µs
    (tmp_path / "tx.1").write_text("0 0 1500 0 100 900000\n0 1 2500 0 101 200000\n"
                                   "1 0 failed 0 101 300000\n")
    (tmp_path / "tx.1.1").write_text("2 0 9000 0 102 500000\n")
    latencies, failed = read_log(str(tmp_path), 101.0, 102.0)
    assert latencies == [2.5] and failed == 1


def test_percentile():
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.99) == 100.0
    assert percentile(values, 0.5) == 51.0
    assert percentile([], 0.99) == 0.0


def test_markdown_rows_columns_and_peak_share():
    points = [Point("ours pop", 1, 100, 1.0, 50.0, 4.0, 2.0), Point("ours pop", 4, 300, 1.0, 40.0, 9.0, 3.0),
              Point("ours pop", 16, 150, 1.0, None, 20.0, 5.0, failed=2),
              Point("raw", 1, 200, 2.0, 30.0, 1.0, 0.5)]
    text = markdown(points, "header")
    assert "| msgs/s by consumers | 1 | 4 | 16 |" in text
    assert "| ours pop | 100 | 300 | 150 (2 failed) |" in text
    assert "| raw | 100 | – | – |" in text
    assert "| ours pop | 50 | 40 | ? |" in text
    assert peak_share(points, "ours pop") == 0.5
    assert "ours pop 50%" in text
