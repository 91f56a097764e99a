"""The command: run the scenarios (short by default, --long for minutes-long faults), the soak,
print the report and write it (--out); --spark adds a Spark streaming query to the load (on by
default with --long; it needs pyspark and java, checked first). Exit codes: 0 every check passed, 1 a check failed
(lost messages, deliveries beyond the rules, no recovery within the limit), 2 bad options,
3 nothing failed but a scenario could not run on this machine (the report says why)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import time

from . import report, spark_query
from .faults import Unavailable
from .runner import BY_NAME, SCENARIOS, run_scenario, run_soak

SOAK_SHORT = 1.0  # minutes, without --long
SOAK_LONG = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [s.name for s in SCENARIOS] + ["soak"]
    p = argparse.ArgumentParser(
        prog="python3 -m chaos",
        description="Faults under load against throwaway PostgreSQL servers, with a ledger "
                    "check of every message. Scenarios: " + ", ".join(names) + ".")
    p.add_argument("--long", action="store_true",
                   help="the long variants (faults held for minutes; soak 60 min)")
    p.add_argument("--only", metavar="NAME,...",
                   help="run only these (comma-separated; 'soak' is the soak run)")
    p.add_argument("--soak", type=float, metavar="MINUTES",
                   help=f"soak length (default {SOAK_SHORT:g}, {SOAK_LONG:g} with --long; "
                        "0: no soak)")
    p.add_argument("--out", metavar="PATH",
                   help="write the report as Markdown to PATH and as JSON next to it (.json)")
    p.add_argument("--spark", action=argparse.BooleanOptionalAction, default=None,
                   help="add a Spark structured streaming query to the load (local[2]; ~10 s to "
                        "start, once; needs pyspark and java). Default: on with --long")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = p.parse_args(argv)
    args.spark = args.long if args.spark is None else args.spark
    if args.spark and not args.list and (why := spark_query.unavailable()):
        p.error(f"--spark{' (on with --long)' if args.long else ''}: {why}; or --no-spark")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else names
    unknown = [n for n in only if n not in names]
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(unknown)} (known: {', '.join(names)})")
    if args.soak is not None and args.soak < 0:
        p.error("--soak must not be negative")
    args.selected = only
    args.soak_minutes = (args.soak if args.soak is not None
                         else SOAK_LONG if args.long else SOAK_SHORT)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Client.consume logs every failed handler (the poison messages) and every retry, the pool
    # every broken connection it discards: the faults cause them, the report counts them
    for name in ("pgmq_build.client", "psycopg.pool"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:10} {s.title}")
        print(f"{'soak':10} steady mixed load with periodic faults, table sizes sampled")
        return 0
    mode = "long" if args.long else "short"
    t0, load0, when = time.monotonic(), os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results: list[dict] = []
    for name in args.selected:
        if name == "soak":
            if args.soak_minutes > 0:
                results.append(run_soak(args.soak_minutes, long=args.long, spark=args.spark))
            continue
        try:
            results.append(run_scenario(BY_NAME[name], long=args.long, spark=args.spark))
        except Unavailable as exc:
            print(f"[chaos] {name}: cannot run here: {exc}", file=sys.stderr, flush=True)
            results.append({"name": name, "mode": mode, "unavailable": str(exc), "ok": True})
    command = "python3 -m chaos " + shlex.join(argv if argv is not None
                                                          else sys.argv[1:])
    meta = report.meta(mode, command.strip(), time.monotonic() - t0, load0, when)
    print()
    print(report.text(results))
    if args.out:
        md, js = report.write(args.out, results, meta)
        print(f"\nwrote {md} and {js}")
    if not all(r["ok"] for r in results):
        return 1
    return 3 if any(r.get("unavailable") for r in results) else 0
