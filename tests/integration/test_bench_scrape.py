"""`python3 -m bench --scrape` on the test server: a tiny bench of the send, read and pop cells
with the exporter's counters read around each segment of ours; they agree exactly with the
bench's own counts (timed and warm-up messages), the delivery counts of a counting queue too,
and the report prints them."""

from __future__ import annotations

import json

from bench import run as bench_run
from bench.scrape import COUNTED


def test_the_counters_agree_with_the_bench(dsn, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = bench_run.parse_args(["--only", "send,send_batch,read_delete,read_delete_batch,pop,read_delete_counted,pop_counted",
                                 "--clients", "1,2", "--seconds", "0.3", "--rounds", "1",
                                 "--prefill", "3000", "--no-upstream", "--spark-rows", "0",
                                 "--scrape", "--json", str(out)])
    assert bench_run.run(args, dsn, "the test server") == 0
    printed = capsys.readouterr().out
    assert "Counters scraped from the exporter" in printed

    cells = json.loads(out.read_text())["results"]
    scraped = [(c["workload"], s["scrape"]) for c in cells for s in c["segments"]
               if s["system"] == "ours"]
    assert len(scraped) == 7 * 2  # every cell of ours, none of raw
    for workload, r in scraped:
        assert r["bench_msgs"] > 0 and r["warmup_msgs"] > 0, (workload, r)
        expected = r["bench_msgs"] + r["warmup_msgs"]
        for counter in COUNTED[workload]:
            assert r["counters"][counter] == expected, (workload, counter, r)
        assert r["agree"] is True
        if workload.startswith("send"):
            assert r["counters"]["deleted"] == r["counters"]["updated"] == 0
        if workload == "pop":
            assert r["counters"]["updated"] == 0
        if not workload.endswith("_counted"):
            assert r["counters"]["delivered"] == 0
        assert f"{workload} x" in printed
    assert all(s["scrape"] is None for c in cells for s in c["segments"] if s["system"] == "raw")
