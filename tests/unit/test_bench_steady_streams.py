"""The streams' steady-state run's pure parts (bench/steady_streams.py), without a
server: options, the ledger of events sent and received, the phases' figures, the verdicts."""

from __future__ import annotations

import pytest

from bench import steady, steady_streams
from bench.steady_streams import (
    Config,
    Ledger,
    Op,
    Sample,
    failed,
    format_summary,
    parse_args,
    phase_stats,
    summarize,
)


def test_defaults_and_bad_options():
    cfg = parse_args([]).config
    assert (cfg.minutes, cfg.rate, cfg.producers, cfg.subscriptions, cfg.hold_at, cfg.hold_end) == \
        (10, 1000, 2, 2, 240, 360)
    assert (cfg.rotation, cfg.retention, cfg.steady_from) == (60, 60, 60)
    short = parse_args(["--minutes", "0.5", "--hold-at", "10s", "--hold-seconds", "5", "--rotation", "3s"]).config
    assert (short.duration, short.hold_end, short.rotation, short.steady_from) == (30, 15, 3, 5)
    for bad in (["--subscriptions", "0"], ["--rotation", "0"], ["--retention", "-1"], ["--rate", "nan"],
                ["--minutes", "1", "--hold-at", "50", "--hold-seconds", "10"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_steady_dispatches_streams(monkeypatch):
    seen = []
    monkeypatch.setattr(steady, "on_server", lambda args, body: seen.append((args.config, body)) or 0)
    assert steady.main(["--streams", "--minutes", "2", "--hold-at", "30s", "--hold-seconds", "10"]) == 0
    (cfg, body), = seen
    assert isinstance(cfg, Config) and cfg.minutes == 2 and body is steady_streams.run
    seen.clear()
    assert steady.main(["--minutes", "10"]) == 0
    assert isinstance(seen[0][0], steady.Config) and seen[0][1] is steady.run


def test_the_ledger_counts_lost_and_twice_per_subscription():
    ledger = Ledger(["a", "b"])
    for ev in (1, 2, 3, 9, 10_000):
        ledger.sent_one(ev)
    ledger.received("a", [1, 2, 3, 9, 10_000])
    ledger.received("b", [1, 3, 3])
    ledger.received("b", [1])
    assert ledger.summary() == {
        "sent": 5,
        "subscriptions": {"a": {"received": 5, "lost": 0, "duplicates": 0},
                          "b": {"received": 2, "lost": 3, "duplicates": 2}}}


def _sample(t, phase, delivered, cpu=100.0, dead=0, backlog=5):
    return Sample(t=t, dt=10, phase=phase, sent=1000, delivered=delivered, ops=10, backlog=backlog,
                  segments=2, event_bytes=1 << 20, event_dead=dead,
                  catalog_dead={"stream_subscriptions": 10, "stream_batches": 20, "stream_ticks": 0},
                  xmin_age=5 if phase == "hold" else 0, p50_ms=1.0, p99_ms=2.0,
                  consumer_cpu_us_per_event=cpu)


def test_phases_and_the_hold_verdict():
    cfg = Config(minutes=1, hold_at=20, hold_seconds=20, warmup=0)
    samples = [_sample(10, "before", 2000), _sample(20, "before", 2000, cpu=50),
               _sample(30, "hold", 1900, cpu=150), _sample(40, "hold", 1900, cpu=150),
               _sample(50, "after", 2000), _sample(60, "after", 2000)]
    ops = [Op(t, 0.001 * (2 if 20 < t <= 40 else 1), 100) for t in range(1, 61)]
    st = phase_stats(ops, samples, 0, 20)
    assert (st["delivered"], st["delivery_rate"], st["ops"], st["consumer_cpu_us_per_event"]) == (2000, 100, 20, 75)
    assert (st["p50_ms"], st["max_backlog"], st["max_catalog_dead"]) == (1.0, 5, 30)
    ledger = {"sent": 10, "subscriptions": {"a": {"received": 10, "lost": 0, "duplicates": 0}}}
    s = summarize(cfg, samples, ops, None, ledger)
    h = s["hold"]
    assert (h["throughput_ratio"], h["throughput_within"], h["p50_ratio"], h["cpu_ratio"]) == (1.0, True, 2.0, 2.0)
    assert s["catalog_dead_max"] == {"stream_subscriptions": 10, "stream_batches": 20, "stream_ticks": 0}
    assert failed(s) == []
    text = format_summary(cfg, s)
    assert "none, as it must be" in text and "throughput x1.000 (within 10%)" in text
    # consumers a fifth slower while held, a dead tuple, an event lost and one twice
    slow = [Op(t, 0.001, 100 if not 20 < t <= 40 else 80) for t in range(1, 61)]
    samples[3] = _sample(40, "hold", 1900, dead=1)
    bad = {"sent": 10, "subscriptions": {"a": {"received": 9, "lost": 1, "duplicates": 1}}}
    s = summarize(cfg, samples, slow, None, bad)
    assert (s["hold"]["throughput_ratio"], s["hold"]["throughput_within"]) == (0.8, False)
    assert failed(s) == ["1 event(s) lost", "1 event(s) delivered twice", "1 dead tuple(s) in the event tables"]
    assert "NOT within 10%" in format_summary(cfg, s) and "NOT 0" in format_summary(cfg, s)


def test_a_run_without_a_hold_reports_steady_figures():
    cfg = Config(minutes=1, hold_seconds=0, warmup=10)
    samples = [_sample(t, "steady", 1000) for t in (10, 20, 30)]
    s = summarize(cfg, samples, [Op(15, 0.002, 50), Op(25, 0.004, 50)],
                  None, {"sent": 1, "subscriptions": {}})
    assert "hold" not in s and s["steady"]["delivered"] == 100
    assert "events/s delivered" in format_summary(cfg, s)
