"""The chaos report: one row per scenario (faults injected, messages checked, lost, delivered
beyond the rules, redeliveries, recovery seconds, the Spark query when it ran), printed as text
and written as Markdown and JSON."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from .ledger import MAX_RETRIES, SPARK_QUEUE, SPARK_RESULT
from .runner import RECOVERY_LIMIT, RECOVERY_RUN, RECOVERY_TOLERANCE
from .spark_query import describe

HEADER = ("scenario", "mode", "faults injected", "messages checked", "lost",
          "beyond rules", "redeliveries", "recovery s", "Spark query", "result")


def _recovery(r: dict) -> str:
    recs = r.get("recovery_seconds") or []
    if not recs:
        return "-"
    if len(recs) <= 3:
        return ", ".join("never" if x is None else f"{x:g}" for x in recs)
    never = sum(1 for x in recs if x is None)
    worst = max((x for x in recs if x is not None), default=None)
    return (f"never {never} of {len(recs)}" if never else f"max {worst:g} of {len(recs)}")


def _result(r: dict) -> str:
    if r.get("unavailable"):
        return "NOT RUN"
    return "ok" if r["ok"] else "FAILED"


def rows(results: list[dict]) -> list[tuple[str, ...]]:
    out = []
    for r in results:
        if r.get("unavailable"):
            out.append((r["name"], r["mode"], f"not run: {r['unavailable']}", "-", "-", "-", "-",
                        "-", "-", _result(r)))
            continue
        v = r["ledger"]
        out.append((r["name"], r["mode"], r["faults"], f"{v['checked']:,}", str(v["lost"]),
                    str(v["beyond_rules"]), str(v["redeliveries"]), _recovery(r),
                    describe(r.get("spark") or {}), _result(r)))
    return out


def _notes(results: list[dict]) -> list[str]:
    notes = []
    for r in results:
        if r.get("unavailable"):
            continue
        v = r["ledger"]
        bits = [f"pre-fault {r['baseline_rates']['produced']:g} produced/s, "
                f"{r['baseline_rates']['consumed']:g} consumed/s"]
        if "rates_during_fault" in r:
            d = r["rates_during_fault"]
            bits.append(f"during the fault {d['produced']:g} / {d['consumed']:g}")
        bits.append(f"dead-lettered {v['dead_lettered']} ({v['dead_lettered_poison']} poison), left in queues {v['left_in_queues']}, "
                    f"sends with unknown outcome {v['unknown_sends']} "
                    f"({v['unknown_committed']} had committed), refused sends {v['failed_sends']}")
        if v.get("uncounted_after_crash"):
            bits.append(f"{v['uncounted_after_crash']} message(s) delivered over the limit by "
                        "the clients' count whose extra take the crash erased (not counted "
                        "by the server: see ledger.check)")
        if v["breakdown"]:
            bits.append(f"problems {v['breakdown']} e.g. {v['examples']}")
        if r.get("client_consume_restarts"):
            bits.append(f"Client.consume restarted {r['client_consume_restarts']} times")
        if r.get("spark"):
            bits.append(_spark_note(r["spark"], v.get("spark") or {}))
        if r["name"] == "xmin" and r.get("bloat"):
            b = r["bloat"]
            q = "pgmq.q_work"
            if q in b.get("before_fault", {}) and q in b.get("during_fault", {}):
                bits.append(f"{q}: table {b['before_fault'][q]['table_bytes'] / 1024:.0f} -> "
                            f"{b['during_fault'][q]['table_bytes'] / 1024:.0f} kB, dead tuples "
                            f"{b['before_fault'][q]['n_dead_tup']:,} -> "
                            f"{b['during_fault'][q]['n_dead_tup']:,} during the hold")
        if r["name"] == "soak":
            f = r["flat"]
            tables = ", ".join(
                f"{t.removeprefix('pgmq.')} x{v2['table_bytes']['ratio']} / dead "
                f"{v2['n_dead_tup']['earlier_max']:,}->{v2['n_dead_tup']['later_max']:,}"
                for t, v2 in f["tables"].items() if v2.get("judged"))
            bits.append(f"tables {'flat' if f['flat'] else 'NOT flat'} (first vs last window: "
                        f"{tables})")
        notes.append(f"- **{r['name']}**: " + "; ".join(bits))
    return notes


def _spark_note(sp: dict, counted: dict) -> str:
    out = (f"Spark: {counted.get('sent', 0):,} sent to queue {SPARK_QUEUE}, "
           f"{counted.get('through', 0):,} in {SPARK_RESULT}, {counted.get('archived', 0):,} "
           f"archived by the source; first batch at {sp['first_batch_s']} s")
    if sp.get("recovery_seconds"):
        out += ("; caught up " + _recovery({"recovery_seconds": sp["recovery_seconds"]})
                + " s after the fault(s)")
    if sp["restarts"]:
        why: dict[str, list[float]] = {}
        for d in sp["deaths"]:
            why.setdefault(d["error"], []).append(d["at_s"])
        out += (f"; the query died {sp['restarts']} times and the supervisor restarted it ("
                + "; ".join(f"{len(at)}x at {', '.join(f'{t:g}' for t in at)} s: {e}"
                            for e, at in why.items()) + ")")
        if sp["failed_starts"]:
            out += (f", {sp['failed_starts']} restart(s) failed and were tried again ("
                    + "; ".join(f"{n}x {e}" for e, n in sp["start_errors"].items()) + ")")
        if sp["replayed_batches"]:
            out += (f"; {sp['replayed_batches']} batch(es) ({sp['replayed_rows']} messages) run "
                    "again from the checkpoint, published once by the exactly-once sink")
    return out


RULES = (f"Lost: a message whose send committed (the commit returned, or its id is in "
         f"chaos.produced) found nowhere. Beyond rules: a message in two places, recorded as "
         f"consumed twice, delivered more than 1 + max_retries = {1 + MAX_RETRIES} times, or a "
         f"failed send that committed. Redeliveries: deliveries after the first (poison "
         f"messages' planned retries excluded). Recovery: seconds from the end of each fault "
         f"until {RECOVERY_RUN} seconds in a row produce and consume at least "
         f"{1 - RECOVERY_TOLERANCE:.0%} of the pre-fault rate (limit {RECOVERY_LIMIT:g} s), "
         f"and the Spark query, when it runs, has caught up (its backlog at most its pre-fault "
         f"peak plus one second of its messages). Spark: its source and the exactly-once sink "
         f"are exactly-once end to end, so a message sent to {SPARK_QUEUE} must be in "
         f"{SPARK_QUEUE} or, once, in {SPARK_RESULT}.")


def text(results: list[dict]) -> str:
    table = [HEADER, *rows(results)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines + ["", *_notes(results), "", RULES])


def markdown(results: list[dict], meta: dict) -> str:
    out = [f"# pgmq chaos report ({meta['mode']})", "",
           f"{meta['when']}, {meta['cpus']} CPUs, load average {meta['loadavg_start']} at the "
           f"start, {meta['loadavg_end']} at the end, {meta['seconds']:.0f} s; command: "
           f"`{meta['command']}`", "",
           "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows(results)]
    return "\n".join(out + ["", *_notes(results), "", RULES, ""])


def write(path: str, results: list[dict], meta: dict) -> tuple[Path, Path]:
    """PATH (Markdown) and PATH with the suffix .json."""
    md = Path(path)
    js = md.with_suffix(".json") if md.suffix != ".json" else md.with_suffix(".json.json")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown(results, meta))
    js.write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=str) + "\n")
    return md, js


def meta(mode: str, command: str, seconds: float, load_start: tuple, when: str) -> dict:
    return {"mode": mode, "command": command, "seconds": round(seconds, 1),
            "cpus": os.cpu_count(), "python": platform.python_version(), "when": when,
            "loadavg_start": " ".join(f"{x:.2f}" for x in load_start),
            "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg())}
