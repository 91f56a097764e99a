"""A one-minute soak (chaos/runner.run_soak: steady mixed load, a fault every 8 s)
and its report: the ledger holds, every fault is recovered from within 30 s, table sizes and
dead tuples are sampled and judged by steady.py's flat rule; the report is written as Markdown
and JSON. Plus the command's options."""

from __future__ import annotations

import json

import pytest

from chaos import cli, report
from chaos.runner import RECOVERY_LIMIT, run_soak


@pytest.mark.chaos
def test_soak_one_minute_and_its_report(tmp_path, capsys):
    with capsys.disabled():
        r = run_soak(1.0, fault_every=8.0)
    v = r["ledger"]
    assert v["lost"] == 0 and v["beyond_rules"] == 0, v
    assert {e["fault"] for e in r["events"]} == {"terminate", "restart", "xmin", "timeouts"}
    assert all(s is not None and s <= RECOVERY_LIMIT for s in r["recovery_seconds"]), r["events"]
    samples = r["samples"]["pgmq.q_work"]
    assert len(samples) >= 20 and all(s["table_bytes"] > 0 for s in samples)
    assert r["flat"]["judged"] and set(r["flat"]["tables"]) == set(r["samples"])
    for verdict in r["flat"]["tables"].values():
        assert set(verdict) >= {"table_bytes", "index_bytes", "n_dead_tup", "flat"}
    assert r["ok"]

    out = tmp_path / "chaos.md"
    meta = report.meta("short", "test", 60.0, (0.1, 0.2, 0.3), "now")
    md, js = report.write(str(out), [r], meta)
    text = md.read_text()
    assert "| scenario | mode | faults injected | messages checked | lost |" in text
    assert f"| soak | short | {r['faults']} | {v['checked']:,} | 0 | 0 |" in text
    assert "tables flat" in text or "tables NOT flat" in text
    data = json.loads(js.read_text())
    assert data["results"][0]["ledger"]["checked"] == v["checked"]


def test_cli_options(capsys):
    assert cli.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for name in ("restart", "terminate", "xmin", "burst", "timeouts", "disk_full", "soak"):
        assert name in listed
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--only", "restart,nope"])
    assert exit_.value.code == 2 and "unknown scenario(s): nope" in capsys.readouterr().err
    args = cli.parse_args(["--long", "--only", "xmin"])
    assert args.selected == ["xmin"] and args.soak_minutes == 60
    assert cli.parse_args([]).soak_minutes == 1 and cli.parse_args(["--soak", "0"]).soak_minutes == 0
