"""`python3 -m bench archive` (bench/archive_retention.py) on the test server, small: every cycle
is measured, retention keeps the archive's partitions bounded, and the bench database is gone
afterwards. No timing is asserted."""

from __future__ import annotations

import json

import psycopg
import pytest

from bench import archive_retention


def test_archive_bench_reports_every_cycle_and_retention_bounds_the_archive(dsn, tmp_path, capsys):
    out = tmp_path / "archive.json"
    args = archive_retention.parse_args(["--messages", "12000", "--cycle", "2000", "--batch", "500",
                                         "--partition", "1000", "--retention", "3000", "--json", str(out)])
    with psycopg.connect(dsn) as conn:
        partman = conn.execute("SELECT count(*) FROM pg_available_extensions "
                               "WHERE name = 'pg_partman'").fetchone()[0]
    rc = archive_retention.run(args, dsn, "the test server")
    text = capsys.readouterr()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'pgmq_bench'").fetchone()[0] == 0
    if not partman:
        assert rc == 1 and "pg_partman is not installed" in text.err + text.out
        return
    assert rc == 0
    cycles = json.loads(out.read_text())
    assert [c["n"] for c in cycles] == [1, 2, 3, 4, 5, 6]
    assert cycles[-1]["archived"] == 12000
    # 12 partitions' worth of ids went through; retention keeps about 3 behind the newest
    # (plus the one being filled and those made ahead), never all of them
    assert max(c["archive_partitions"] for c in cycles) < 12
    assert cycles[-1]["archive_partitions"] <= cycles[2]["archive_partitions"] + 1
    assert "| 6 | 12,000 |" in text.out and "archive: at most" in text.out


@pytest.mark.parametrize("argv", [["--cycle", "1500", "--batch", "1000"], ["--messages", "10", "--cycle", "1000"],
                                  ["--retention", "0"]])
def test_archive_bench_refuses_bad_options(argv):
    with pytest.raises(SystemExit) as exc:
        archive_retention.parse_args(argv)
    assert exc.value.code == 2
