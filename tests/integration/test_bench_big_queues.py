"""`python3 -m bench big` (bench/big_queues.py) on the test server with a
small queue: every operation is measured on the plain queue and, with pg_partman, on a
partitioned one; the bench database is gone afterwards. No timing is asserted."""

from __future__ import annotations

import json

import psycopg
import pytest

from bench import big_queues


def test_big_queue_bench_measures_every_operation(dsn, tmp_path, capsys):
    out = tmp_path / "big.json"
    args = big_queues.parse_args(["--sizes", "3000", "--ops", "50", "--json", str(out)])
    assert big_queues.run(args, dsn, "the test server") == 0
    assert "| plain | 3,000 |" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    with psycopg.connect(dsn) as conn:
        partman = conn.execute("SELECT count(*) FROM pg_available_extensions "
                               "WHERE name = 'pg_partman'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'pgmq_bench'").fetchone()[0] == 0
    assert [r["kind"] for r in rows] == ["plain"] + (["partitioned"] if partman else [])
    for r in rows:
        assert r["size"] == 3000 and r["table_mb"] > 0
        assert min(r["send_us"], r["read_delete_us"], r["pop_us"]) > 0
        assert r["queue_metrics_ms"] > 0 and r["metrics_ms"] > 0


def test_big_queue_bench_measures_the_partitioned_queue_alone(dsn, tmp_path, capsys):
    out = tmp_path / "big.json"
    args = big_queues.parse_args(["--sizes", "3000", "--ops", "20", "--no-plain", "--partition-interval", "1000",
                                  "--json", str(out)])
    with psycopg.connect(dsn) as conn:
        partman = conn.execute("SELECT count(*) FROM pg_available_extensions "
                               "WHERE name = 'pg_partman'").fetchone()[0]
    assert big_queues.run(args, dsn, "the test server") == (0 if partman else 2)
    if partman:
        rows = json.loads(out.read_text())
        assert [r["kind"] for r in rows] == ["partitioned"]
        # 3,000 ids in partitions of 1,000, the ones made ahead and the default partition
        assert rows[0]["partitions"] >= 4
        printed = capsys.readouterr().out
        assert "| plain |" not in printed and f"| partitioned ({rows[0]['partitions']} partitions) | 3,000 |" in printed
        # maintenance between the fill's chunks confirmed a read floor: the head
        assert rows[0]["read_floor"] == 1


def test_big_queue_bench_measures_without_the_read_floor(dsn, tmp_path, capsys, partman):
    out = tmp_path / "big.json"
    args = big_queues.parse_args(["--sizes", "3000", "--ops", "20", "--no-plain", "--partition-interval", "1000",
                                  "--no-read-floor", "--json", str(out)])
    assert big_queues.run(args, dsn, "the test server") == 0
    rows = json.loads(out.read_text())
    assert [(r["kind"], r["read_floor"]) for r in rows] == [("partitioned, no read floor", None)]
    assert "| partitioned, no read floor (" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--sizes", "10"], ["--sizes", "x"], ["--ops", "0"],
                                  ["--no-plain", "--no-partitioned"], ["--partition-interval", "10"]])
def test_big_queue_bench_refuses_bad_options(argv):
    with pytest.raises(SystemExit) as exc:
        big_queues.parse_args(argv)
    assert exc.value.code == 2
