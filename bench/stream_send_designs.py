"""The designs tried for stream_send, measured side by side (docs/performance.md, streams):
``python3 -m bench.stream_send_designs [--seconds 3] [--rounds 8] [--streams 3]``.

Each candidate is a PL/pgSQL function appending one event to stream 'ev' (made by
pgmq.create_stream, with --streams - 1 others around it), called one event per transaction by
one autocommit connection (psycopg's auto-prepare, after warm-up calls), against a plain INSERT
into a table laid out like a segment. Rounds alternate the order. Reported: server CPU per event
(the backend's utime + stime, server.py) and its ratio to the INSERT, WAL per event.

- raw: INSERT ... RETURNING ev_id into the plain table (the floor);
- execute: what stream_send did first: the stream's row for its segment, then EXECUTE format();
- lookup_static: the row, then the segment's INSERT written in (static), which is also what a
  fixed ring of segment tables costs (the current slot must be looked up);
- partitioned: a per-stream parent partitioned by segment number: one static INSERT into the
  parent with the segment looked up, PostgreSQL routing the row;
- trigger: INSERT into the inheritance parent, a BEFORE trigger redirecting to the segment;
- rule: INSERT into the parent, an INSTEAD rule rewriting it to the segment (names only in the
  tree; rotation replaces the rule: AccessExclusiveLock on the parent, which readers hold);
- tree_pinned: the tree of IFs with each stream's segment written in, SET search_path pinned;
- plpgsql_floor: a function holding nothing but the INSERT (no tree, no SET): the least any
  PL/pgSQL wrapper costs;
- ours: pgmq.stream_send as built (the tree, not pinned).
"""

from __future__ import annotations

import argparse
import json
import time

import psycopg

from pgmq_build.cluster import TempCluster
from pgmq_build.install import install_files

from .run import CLUSTER_SETTINGS
from .server import Meter

MSG = json.dumps({"order_id": 123456, "customer": "c-42", "items": [1, 2, 3], "note": "x" * 64})
PIN = "SET search_path = pg_catalog, pg_temp"
SIG = "(stream_name text, msg jsonb, headers jsonb DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql"
INSERT_SEG = "INSERT INTO pgmq.s_ev_0 (message, headers) VALUES (msg, headers) RETURNING ev_id INTO v"
LOOKUP = "SELECT t.current_segment INTO s FROM pgmq.streams t WHERE t.stream_name = $1;"


def _fn(name: str, body: str, pinned: bool = True, declare: str = "v bigint; s bigint;") -> str:
    return (f"CREATE FUNCTION {name}{SIG} {PIN if pinned else ''} AS $$ DECLARE {declare} BEGIN {body} "
            "END $$;")


SETUP = [
    """CREATE SEQUENCE raw_s_seq;
       CREATE TABLE raw_s (ev_id BIGINT NOT NULL DEFAULT nextval('raw_s_seq'),
           ev_txid XID8 NOT NULL DEFAULT pg_current_xact_id(),
           ev_time TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), message JSONB, headers JSONB);
       CREATE INDEX ON raw_s (ev_txid);""",
    _fn("d_execute", f"""{LOOKUP}
        EXECUTE format('INSERT INTO pgmq.%I (message, headers) VALUES ($1, $2) RETURNING ev_id',
                       pgmq._format_table_name(stream_name, 's') || '_' || (s % 100000)::text)
        INTO v USING msg, headers; RETURN v;"""),
    _fn("d_lookup_static", f"{LOOKUP} IF stream_name = 'ev' AND s = 0 THEN {INSERT_SEG}; RETURN v; END IF; "
                           "RAISE EXCEPTION 'not ev';"),
    """CREATE SEQUENCE pgmq.sp_ev_seq;
       CREATE TABLE pgmq.sp_ev (seg bigint NOT NULL, ev_id BIGINT NOT NULL DEFAULT nextval('pgmq.sp_ev_seq'),
           ev_txid XID8 NOT NULL DEFAULT pg_current_xact_id(), ev_time TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
           message JSONB, headers JSONB) PARTITION BY LIST (seg);
       CREATE TABLE pgmq.sp_ev_0 PARTITION OF pgmq.sp_ev FOR VALUES IN (0);
       CREATE TABLE pgmq.sp_ev_1 PARTITION OF pgmq.sp_ev FOR VALUES IN (1);
       CREATE INDEX ON pgmq.sp_ev (ev_txid);""",
    _fn("d_partitioned", f"{LOOKUP} IF stream_name = 'ev' THEN INSERT INTO pgmq.sp_ev (seg, message, headers) "
                         "VALUES (s, msg, headers) RETURNING ev_id INTO v; RETURN v; END IF; RAISE EXCEPTION 'not ev';"),
    """CREATE FUNCTION d_redirect() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN INSERT INTO pgmq.s_trg_0 VALUES (NEW.*); RETURN NULL; END $$;
       CREATE TRIGGER redirect BEFORE INSERT ON pgmq.s_trg FOR EACH ROW EXECUTE FUNCTION d_redirect();""",
    _fn("d_trigger", "IF stream_name = 'trg' THEN INSERT INTO pgmq.s_trg (message, headers) VALUES (msg, headers); "
                     "RETURN 0; END IF; RAISE EXCEPTION 'not trg';"),
    """CREATE RULE to_current AS ON INSERT TO pgmq.s_rul DO INSTEAD
       INSERT INTO pgmq.s_rul_0 VALUES (NEW.*) RETURNING pgmq.s_rul_0.*;""",
    _fn("d_rule", "IF stream_name OPERATOR(pg_catalog.=) 'rul' THEN INSERT INTO pgmq.s_rul (message, headers) "
                  "VALUES (msg, headers) RETURNING ev_id INTO v; RETURN v; END IF; RAISE EXCEPTION 'not rul';",
        pinned=False),
    _fn("d_tree_pinned", f"IF stream_name < 'f' COLLATE \"C\" THEN IF stream_name = 'ev' THEN {INSERT_SEG}; "
                         "RETURN v; END IF; END IF; RAISE EXCEPTION 'not ev';"),
    _fn("d_plpgsql_floor", f"{INSERT_SEG}; RETURN v;", pinned=False),
]

CANDIDATES = {
    "raw": "INSERT INTO raw_s (message, headers) VALUES (%s::jsonb, NULL) RETURNING ev_id",
    "execute": "SELECT d_execute('ev', %s::jsonb)",
    "lookup_static": "SELECT d_lookup_static('ev', %s::jsonb)",
    "partitioned": "SELECT d_partitioned('ev', %s::jsonb)",
    "trigger": "SELECT d_trigger('trg', %s::jsonb)",
    "rule": "SELECT d_rule('rul', %s::jsonb)",
    "tree_pinned": "SELECT d_tree_pinned('ev', %s::jsonb)",
    "plpgsql_floor": "SELECT d_plpgsql_floor('ev', %s::jsonb)",
    "ours": "SELECT pgmq.stream_send('ev', %s::jsonb)",
}


def measure(dsn: str, meter: Meter, sql: str, seconds: float) -> tuple[int, float, int]:
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.cursor()
        for _ in range(20):  # compile, prepare
            cur.execute(sql, (MSG,))
            cur.fetchall()
        pid = c.info.backend_pid
        before = meter.sample([pid])
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            cur.execute(sql, (MSG,))
            cur.fetchall()
            n += 1
        usage = meter.usage(before, meter.sample([pid]))
        return n, usage.cpu_us or 0.0, usage.wal_bytes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.stream_send_designs",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="per candidate per round (default 3)")
    p.add_argument("--rounds", type=int, default=8, help="alternating rounds (default 8)")
    p.add_argument("--streams", type=int, default=3, help="streams in the tree, 'ev' among them (default 3)")
    args = p.parse_args(argv)
    install_files()
    with TempCluster(settings=dict(CLUSTER_SETTINGS)) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            for name in ("ev", "trg", "rul", *(f"other{i:03d}" for i in range(max(0, args.streams - 3)))):
                admin.execute("SELECT pgmq.create_stream(%s)", (name,))
            for sql in SETUP:
                admin.execute(sql)
            meter = Meter(admin)
            totals = {name: [0, 0.0, 0] for name in CANDIDATES}
            for rnd in range(args.rounds):
                for name in (list(CANDIDATES) if rnd % 2 == 0 else list(reversed(CANDIDATES))):
                    admin.execute("CHECKPOINT")
                    n, cpu, wal = measure(cluster.dsn(), meter, CANDIDATES[name], args.seconds)
                    t = totals[name]
                    t[0], t[1], t[2] = t[0] + n, t[1] + cpu, t[2] + wal
    base = totals["raw"][1] / totals["raw"][0]
    print(f"stream_send designs: {args.streams} streams, {args.rounds} rounds of {args.seconds:g} s, "
          "one event per transaction; server CPU per event (ratio to raw), WAL per event")
    for name, (n, cpu, wal) in totals.items():
        print(f"  {name:<14} {cpu / n:7.1f} µs  x{cpu / n / base:.2f}  {wal / n:5.0f} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
