"""The short variant of every chaos scenario (chaos/runner.py), each on a throwaway
server: nothing lost, nothing delivered beyond the rules, throughput back within 10 % of the
pre-fault rate within 30 s of each fault, and the fault really happened."""

from __future__ import annotations

import pytest

from chaos.runner import BY_NAME, RECOVERY_LIMIT, run_scenario

pytestmark = pytest.mark.chaos


def fault_happened(name: str, r: dict) -> None:
    d = r["fault_details"]
    if name == "restart":
        assert len(r["recovery_seconds"]) == 2  # two immediate stops, each recovered from
    elif name == "terminate":
        assert set(d["terminated"]) == {"pgmq-worker", "chaos-consumer", "chaos-producer",
                                        "chaos-client"}
    elif name == "xmin":
        before = r["bloat"]["before_fault"]["pgmq.q_work"]["n_dead_tup"]
        assert r["bloat"]["during_fault"]["pgmq.q_work"]["n_dead_tup"] > before
    elif name == "burst":
        assert d["refusals"].get("53300", 0) > 0 and d["refusals_not_53300"] == {}
        assert d["terminated"] >= 3 and r["worker"]["errors"] + r["worker"]["reconnects"] >= 0
    elif name == "timeouts":
        assert d["client_errors"].get("57014", 0) > 0  # statement_timeout in read
        assert d["client_errors"].get("55P03", 0) > 0  # lock_timeout in send
        assert d["worker_dispatch_errors"] > 0  # both, inside _dispatch_one
    elif name == "failover":
        assert d["promote_seconds"] > 0 and r["worker"]["reconnects"] > 0
        assert r["client_errors"]  # the load met the dead primary, and went on
    elif name == "disk_full":
        assert d["client_errors"].get("53100", 0) > 0  # the tablespace really filled up
        assert d["filler_bytes"] > 0


@pytest.mark.parametrize("name", list(BY_NAME))
def test_short_scenario(name, capsys):
    with capsys.disabled():
        r = run_scenario(BY_NAME[name], long=False)
    v = r["ledger"]
    assert v["lost"] == 0, v
    assert v["beyond_rules"] == 0, v
    assert v["checked"] > 500 and v["dead_lettered_poison"] > 0  # load ran, retry limits hit
    assert r["injected"] > 0
    assert all(s is not None and s <= RECOVERY_LIMIT for s in r["recovery_seconds"]), r
    assert r["left_after_drain"] == 0
    assert r["client_consume_restarts"] == 0  # Client.consume rides through every fault
    fault_happened(name, r)
    assert r["ok"]
