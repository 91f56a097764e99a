"""The steady-state run's pure parts (bench/steady.py), without a server: options,
phases, percentiles, the flat rule, recovery after the hold and the summary."""

from __future__ import annotations

import argparse

import pytest

from bench import run as bench_run
from bench import steady
from bench.steady import (
    Config,
    Op,
    Sample,
    flat,
    parse_args,
    parse_duration,
    percentile,
    phase_of,
    recovery,
    summarize,
)

MB = 1 << 20


def test_durations():
    assert parse_duration("240") == 240
    assert parse_duration("5s") == 5
    assert parse_duration("4m") == 240
    assert parse_duration("1.5m") == 90
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("soon")


def test_defaults_are_the_issues():
    cfg = parse_args([]).config
    assert (cfg.minutes, cfg.rate, cfg.consumers, cfg.consume, cfg.batch, cfg.sample) == \
        (10, 1000, 2, "read", 10, 10)
    assert (cfg.hold_at, cfg.hold_seconds, cfg.hold_end, cfg.steady_from) == (240, 120, 360, 60)


def test_short_run_options():
    cfg = parse_args(["--minutes", "0.3", "--hold-at", "5s", "--hold-seconds", "5",
                      "--rate", "200"]).config
    assert (cfg.duration, cfg.hold_at, cfg.hold_end, cfg.rate) == (18, 5, 10, 200)
    assert cfg.steady_from == 2.5  # the warm-up is at most half the time before the hold


@pytest.mark.parametrize("bad", [["--minutes", "0"], ["--rate", "-1"], ["--consumers", "0"],
                                 ["--minutes", "1", "--hold-at", "50", "--hold-seconds", "10"],
                                 ["--consume", "peek"]])
def test_bad_options(bad):
    with pytest.raises(SystemExit):
        parse_args(bad)


def test_bench_cli_dispatches_steady(monkeypatch):
    seen = []
    monkeypatch.setattr(steady, "main", lambda argv: seen.append(argv) or 0)
    assert bench_run.main(["steady", "--minutes", "1"]) == 0
    assert bench_run.main(["--minutes", "1", "--steady"]) == 0
    assert seen == [["--minutes", "1"], ["--minutes", "1"]]
    assert bench_run.parse_args(["--seconds", "1"]).seconds == 1  # the bench's own options


def test_phases():
    cfg = Config(hold_at=240, hold_seconds=120, warmup=60)
    assert [phase_of(cfg, t, 10) for t in (10, 60, 70, 240, 250, 360, 370)] == \
        ["warmup", "warmup", "before", "before", "hold", "hold", "after"]
    assert phase_of(Config(hold_seconds=0), 70, 10) == "steady"


def test_percentile_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3, 1, 2], 0.5) == 2
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([5], 0.99) == 5


def sample(t: float, phase: str = "before", consumed: int = 100, p50: float | None = 1.0,
           p99: float | None = 2.0, depth: int = 5, table: int = 10 * MB, index: int = 2 * MB,
           dead: int = 1000, buffers: int = 2000) -> Sample:
    return Sample(t=t, dt=1.0, phase=phase, sent=100, consumed=consumed, ops=10, empty=0,
                  depth=depth, table_bytes=table, index_bytes=index, n_dead_tup=dead,
                  n_live_tup=5, autovacuum_count=0, xmin_age=0, p50_ms=p50, p99_ms=p99,
                  consumer_cpu_us_per_msg=100.0, producer_cpu_us_per_msg=50.0, wal_bytes=0,
                  buffers=buffers)


def test_flat_rule():
    earlier = [sample(1, table=10 * MB, dead=1000), sample(2, table=9 * MB, dead=500)]
    assert flat(earlier, [sample(3, table=13 * MB, dead=2200)])["flat"]  # 1.2 x 10 + 1 MB
    f = flat(earlier, [sample(3, table=14 * MB)])
    assert not f["flat"] and not f["table_bytes"]["flat"] and f["n_dead_tup"]["flat"]
    assert not flat(earlier, [sample(3, dead=2300)])["flat"]  # 1.2 x 1000 + 1000
    assert flat([], earlier) == {"judged": False}


def test_recovery_needs_a_run_of_good_samples():
    samples = [sample(t, p50=p) for t, p in
               [(10, 9.0), (11, 1.0), (12, 9.0), (13, 1.05), (14, 1.0), (15, 1.1)]]
    good = lambda s: s.p50_ms <= 1.1  # noqa: E731
    assert recovery(samples, 10, good) == 3  # 13, 14, 15: the end of sample 13 is 3 s after
    assert recovery(samples, 10, good, run=1) == 1
    assert recovery(samples, 14, good) == 1  # fewer than `run` left: all of them
    assert recovery(samples, 10, lambda s: False) is None


def test_summary_of_a_hold():
    """Before (t 3..5), a hold (6..8) that triples latency, halves throughput and grows the
    table, then after (9..14) back to normal: slowdown, recovery, growth and the loss check."""
    cfg = Config(minutes=14 / 60, sample=1, hold_at=5, hold_seconds=3, warmup=2)
    samples = []
    for t in range(1, 15):
        phase = phase_of(cfg, t, 1)
        if phase == "hold":
            s = sample(t, phase, consumed=50, p50=3.0, p99=6.0, depth=100 * (t - 5),
                       table=(10 + 2 * (t - 5)) * MB, dead=1000 + 5000 * (t - 5), buffers=5000)
        else:
            late = t > 8
            s = sample(t, phase, consumed=150 if t == 9 else 100, p50=2.0 if t == 9 else 1.0,
                       p99=1.0, depth=5, table=16 * MB if late else 10 * MB, dead=1000,
                       buffers=4000 if t == 9 else 2000)
        samples.append(s)
    ops = ([Op(t + 0.5, 0.001, 10) for t in range(2, 5) for _ in range(10)]
           + [Op(t + 0.5, 0.003, 10) for t in range(5, 8) for _ in range(5)]
           + [Op(t + 0.5, 0.001, 10) for t in range(8, 14) for _ in range(10)])
    messages = {"sent": 1400, "consumed": 1395, "left": 5, "lost": 0, "duplicates": 0}
    s = summarize(cfg, samples, ops, (5.01, 8.0), messages)
    h = s["hold"]
    assert h["before"]["p50_ms"] == 1.0 and h["during"]["p50_ms"] == 3.0
    assert h["before"]["consume_rate"] == pytest.approx(100 / 1.0 * 3 / 3.0, rel=0.05)
    assert h["slowdown"]["p50"] == 3.0 and h["slowdown"]["throughput"] == pytest.approx(0.5, 0.05)
    r = h["recovery_seconds"]
    assert r["throughput"] == 1 and r["backlog"] == 1 and r["p50"] == 2 and r["all"] == 2
    assert h["slowdown"]["buffers_per_msg"] == 5.0  # 5000 / 50 vs 2000 / 100
    assert r["buffers_per_msg"] == 2  # sample 9: 4000 / 150 > 1.1 x 2000 / 100
    g = h["growth"]["table_bytes"]
    assert (g["at_hold_start"], g["at_release"], g["during_hold"]) == (10 * MB, 16 * MB, 6 * MB)
    assert g["after"] == "stopped growing"
    assert h["growth"]["n_dead_tup"]["after"] == "back to the pre-hold level"
    assert s["flat"]["before_hold"]["flat"] and not s["flat"]["whole_run"]["flat"]
    assert s["flat"]["after_hold"]["flat"]
    assert (h["before"]["samples"], h["during"]["samples"], h["after"]["samples"]) == (3, 3, 6)
    assert h["during"]["seq_scan_samples"] == 0
    text = steady.format_summary("ours", cfg, s)
    assert "nothing lost" in text and "p50 x3.00" in text and "stopped growing" in text


def test_sample_row_lines_up_with_the_header():
    head = steady.table_header().splitlines()[0]
    assert len(steady.sample_row(sample(10))) == len(head)


def test_seq_scans_per_consumer_call():
    s = sample(10)
    assert s.seq_per_call == 0
    s.seq_scans, s.ops, s.empty = 12, 10, 2
    assert s.seq_per_call == 1.0 and s.as_dict()["seq_scans_per_call"] == 1.0
    s.ops = s.empty = 0
    assert s.seq_per_call is None
