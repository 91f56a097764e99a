"""The benchmark's pure parts, without a server and without running it: /proc/<pid>/stat parsing,
the systems' round order, the per-message metrics, the three-way table, the options, and which
workloads upstream PGMQ can run."""

from __future__ import annotations

import inspect
import re

import pytest

from bench import run as bench_run
from bench import server
from bench.report import (
    NOT_APPLICABLE,
    OURS,
    RAW,
    SYSTEMS,
    UNAVAILABLE,
    UNKNOWN,
    UPSTREAM,
    Cell,
    Segment,
    format_table,
    ratio,
)
from bench.run import PREFILL, UPSTREAM_PACKAGE, parse_args, round_order
from bench.workloads import BY_NAME, WORKLOADS

# A real backend's line (PostgreSQL 15), fields 14 and 15 (utime, stime) = 1234 and 56.
STAT = ("4242 (postgres) S 4100 4100 4100 0 -1 4194560 1093 0 0 0 1234 56 0 0 20 0 1 0 "
        "123456 230000000 5000 18446744073709551615 1 1 0 0 0 0 4194304 19935232 84487 0 0 0 17 "
        "1 0 0 0 0 0 0 0 0 0 0 0 0 0")


def test_proc_stat_utime_plus_stime():
    assert server.parse_proc_stat(STAT) == ("postgres", 1234 + 56)


def test_proc_stat_comm_with_spaces_and_parentheses():
    # comm may hold anything but is cut at 15 characters: fields count from the last ')'
    line = STAT.replace("(postgres)", "(a b) c (d) e)")
    assert server.parse_proc_stat(line) == ("a b) c (d) e", 1290)


@pytest.mark.parametrize("bad", ["", "4242 postgres S 1", "4242 (postgres) S 1 2 3"])
def test_proc_stat_rejects_what_is_not_one(bad):
    with pytest.raises(ValueError):
        server.parse_proc_stat(bad)


def test_ticks_to_microseconds():
    assert server.ticks_to_us(250, clk_tck=100) == 2_500_000
    assert server.ticks_to_us(1, clk_tck=1000) == 1000


def _proc(tmp_path, pid: int, comm: str, utime: int, stime: int) -> None:
    (tmp_path / str(pid)).mkdir()
    line = STAT.replace("(postgres)", f"({comm})").replace(" 1234 56 ", f" {utime} {stime} ")
    (tmp_path / str(pid) / "stat").write_text(line + "\n")


def test_backend_ticks_sums_postgres_processes_only(tmp_path):
    _proc(tmp_path, 10, "postgres", 100, 5)
    _proc(tmp_path, 11, "postgres", 7, 3)
    _proc(tmp_path, 12, "python3", 1, 1)
    assert server.backend_ticks([10, 11], proc=str(tmp_path)) == 115
    assert server.backend_ticks([], proc=str(tmp_path)) == 0
    # another program holding the pid (the server is elsewhere), or the backend gone: unknown
    assert server.backend_ticks([10, 12], proc=str(tmp_path)) is None
    assert server.backend_ticks([10, 13], proc=str(tmp_path)) is None


def test_rounds_alternate_the_systems():
    systems = [RAW, UPSTREAM, OURS]
    assert [round_order(systems, r) for r in range(3)] == [
        [RAW, UPSTREAM, OURS], [OURS, UPSTREAM, RAW], [RAW, UPSTREAM, OURS]]
    assert round_order([RAW, OURS], 1) == [OURS, RAW]


def _seg(system: str, msgs: int, cpu_us: float | None, wal: int | None, elapsed: float = 1.0,
         dry: int = 0, rnd: int = 1) -> Segment:
    return Segment(system, rnd, 0, msgs, msgs, dry, elapsed, msgs / elapsed, 0.5, cpu_us, wal)


def test_cell_metrics_are_totals_over_segments():
    c = Cell("send", 1, systems=list(SYSTEMS), segments=[
        _seg(RAW, 1000, 40_000, 450_000), _seg(RAW, 3000, 120_000, 1_350_000, elapsed=2.0),
        _seg(OURS, 500, 60_000, 260_000), _seg(OURS, 500, 62_000, 270_000)])
    assert c.rate(RAW) == pytest.approx(4000 / 3.0)
    assert c.cpu_us_per_msg(RAW) == pytest.approx(40.0)
    assert c.wal_per_msg(RAW) == pytest.approx(450.0)
    assert c.cpu_us_per_msg(OURS) == pytest.approx(122.0)
    assert c.cpu_ratio(OURS, RAW) == pytest.approx(122.0 / 40.0)
    assert c.rate(UPSTREAM) is None and c.cpu_ratio(OURS, UPSTREAM) is None
    d = c.as_dict()
    assert d["systems"][UPSTREAM] is None
    assert d["systems"][OURS]["server_cpu_us_per_msg"] == 122.0
    assert d["cpu_ratio_ours_raw"] == 3.05


def test_cpu_unknown_in_any_segment_is_unknown():
    c = Cell("send", 1, systems=[RAW, OURS],
             segments=[_seg(RAW, 100, 1000, 10), _seg(RAW, 100, None, 10)])
    assert c.cpu_us_per_msg(RAW) is None
    assert c.wal_per_msg(RAW) == 0.1


def test_ratio():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(3.0, None) is None and ratio(3.0, 0.0) is None


def _row(table: str, workload: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(workload + " "))
    return [v.strip() for v in line.split("|")]


def test_table_three_way():
    cells = [
        Cell("send", 1, systems=list(SYSTEMS), segments=[
            _seg(RAW, 10_000, 420_000, 4_570_000), _seg(UPSTREAM, 3000, 360_000, 1_368_000),
            _seg(OURS, 3000, 372_000, 1_593_000)]),
        Cell("publish_direct", 4, systems=[RAW, OURS], segments=[
            _seg(RAW, 27_000, 567_000, 11_610_000), _seg(OURS, 6000, 810_000, 3_024_000, dry=1)]),
        Cell("fifo_read_grouped", 1, systems=list(SYSTEMS),
             unavailable={UPSTREAM: "function pgmq.read_grouped(...) does not exist"},
             segments=[_seg(RAW, 100, 1000, 40_000), _seg(OURS, 100, 2500, 100_000)]),
        Cell("pop", 1, systems=list(SYSTEMS), segments=[
            _seg(RAW, 100, None, 41_000), _seg(UPSTREAM, 100, None, 41_000),
            _seg(OURS, 100, None, 41_000)]),
    ]
    table = format_table(cells)
    lines = table.splitlines()
    assert "server CPU µs/msg" in lines[0] and "WAL bytes/msg" in lines[0] and "msgs/s" in lines[0]
    assert [v.strip() for v in lines[1].split("|")] == [
        "workload", "clients", "raw", "upstream", "ours", "ours/upstream", "ours/raw",
        "raw", "upstream", "ours", "raw", "upstream", "ours"]
    assert len({len(ln) for ln in lines[1:]}) == 1  # aligned
    assert _row(table, "send") == ["send", "1", "42.0", "120.0", "124.0", "1.03", "2.95",
                                   "457", "456", "531", "10,000", "3,000", "3,000"]
    # upstream lacks exchanges: "–" in all its columns, the ratio to it included; "!" = dry
    assert _row(table, "publish_direct") == [
        "publish_direct", "4", "21.0", NOT_APPLICABLE, "135.0", NOT_APPLICABLE, "6.43",
        "430", NOT_APPLICABLE, "504", "27,000", NOT_APPLICABLE, "6,000!"]
    assert _row(table, "fifo_read_grouped")[2:7] == ["10.0", UNAVAILABLE, "25.0", UNAVAILABLE,
                                                     "2.50"]
    # large and small: thousands separated, small ratios with three decimals
    far = Cell("fifo_read_grouped_rr", 1, systems=list(SYSTEMS), segments=[
        _seg(RAW, 1000, 13_700, 400_000), _seg(UPSTREAM, 40, 1_452_000, 38_000),
        _seg(OURS, 1000, 121_400, 1_000_000)])
    assert _row(format_table([far]), "fifo_read_grouped_rr")[2:7] == [
        "13.7", "36,300", "121.4", "0.003", "8.86"]
    # the server's CPU not measurable here: "?" for CPU and ratios, WAL and rates still shown
    assert _row(table, "pop")[2:8] == [UNKNOWN] * 5 + ["410"]


def test_table_without_upstream():
    cells = [Cell("send", 1, systems=[RAW, OURS], segments=[
        _seg(RAW, 1000, 40_000, 450_000), _seg(OURS, 1000, 120_000, 530_000)])]
    head = format_table(cells, (RAW, OURS)).splitlines()[1]
    assert [v.strip() for v in head.split("|")] == [
        "workload", "clients", "raw", "ours", "ours/raw", "raw", "ours", "raw", "ours"]


def test_options():
    args = parse_args([])
    assert args.clients == [1, 4] and args.seconds == 3.0 and args.rounds == 2
    assert args.prefill == PREFILL == 200_000 and not args.no_upstream
    assert args.workloads == WORKLOADS
    args = parse_args(["--only", "send,pop", "--clients", "1", "--prefill", "5000",
                       "--no-upstream", "--spark-rows", "0", "--json", "out.json"])
    assert [w.name for w in args.workloads] == ["send", "pop"]
    assert (args.clients, args.prefill, args.no_upstream, args.spark_rows, args.json) == (
        [1], 5000, True, 0, "out.json")
    for bad in (["--only", "nope"], ["--clients", "0"], ["--prefill", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def _pgmq_calls(workload) -> set[str]:
    """The pgmq.* functions a workload's pgmq side calls: in the source of its op, reset and
    fill, and in the strings its closures hold (SQL built from a function name)."""
    texts = []
    for fn in (workload.pgmq_op, workload.reset, workload.fill):
        texts.append(inspect.getsource(fn))
        for cell in fn.__closure__ or ():
            value = cell.cell_contents
            values = value if isinstance(value, tuple) else (value,)
            texts += [v for v in values if isinstance(v, str)]
    return set(re.findall(r"\bpgmq\.(\w+)\(", "\n".join(texts)))


def test_upstream_runs_exactly_the_workloads_it_has_the_functions_for():
    from pgmq_build.migrate import MigrateError, upstream_sql

    try:
        _, text = upstream_sql()
    except MigrateError:
        pytest.skip("the PyPI package pgmq (upstream's SQL) is not installed")
    upstream_functions = set(re.findall(r"FUNCTION\s+pgmq\.(\w+)\s*\(", text))
    for w in WORKLOADS:
        calls = _pgmq_calls(w)
        assert calls, w.name
        assert w.upstream == (calls <= upstream_functions), (w.name, calls - upstream_functions)
    assert not BY_NAME["worker_dispatch"].upstream and BY_NAME["worker_dispatch"].unit == "callbacks"


def test_upstream_sql_pip_installs_the_package_when_missing(monkeypatch):
    from pgmq_build import migrate

    calls = []
    answers = iter([migrate.MigrateError("no package pgmq"), ("1.13.0", "CREATE SCHEMA pgmq;")])

    def upstream_sql():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(migrate, "upstream_sql", upstream_sql)
    monkeypatch.setattr(bench_run.subprocess, "run", lambda cmd, check: calls.append(cmd))
    assert bench_run.upstream_pgmq_sql() == ("1.13.0", "CREATE SCHEMA pgmq;")
    assert calls == [[bench_run.sys.executable, "-m", "pip", "install", "-q", UPSTREAM_PACKAGE]]


def test_the_worker_row_runs_the_real_worker_with_its_default_pool_on_ours_only():
    from bench import workloads
    from pgmq_build.worker import MIN_WORKERS

    w = BY_NAME["worker"]
    assert w.runner is workloads.run_worker_pool and w.clients == (MIN_WORKERS,)
    assert w.consumes and not w.raw and not w.upstream and w.unit == "callbacks"
    bench = bench_run.Bench({s: None for s in SYSTEMS}, {}, None, None, 1.0, 1, 0)
    assert bench.systems_for(w) == [OURS]
    assert bench.systems_for(BY_NAME["worker_dispatch"]) == [RAW, OURS]
    assert bench.runner(w) is workloads.run_worker_pool
    with pytest.raises(RuntimeError, match="runner"):
        w.op(OURS)(None)
    cell = Cell("worker", MIN_WORKERS, unit="callbacks", systems=[OURS],
                segments=[_seg(OURS, 5000, 1_500_000, 2_000_000)])
    assert _row(format_table([cell], (RAW, OURS)), "worker") == [
        "worker", "3", NOT_APPLICABLE, "300.0", NOT_APPLICABLE, NOT_APPLICABLE, "400",
        NOT_APPLICABLE, "5,000"]


def test_the_stream_rows_run_on_raw_and_ours_and_show_a_dash_for_upstream():
    from bench import streams

    names = ["stream_send", "stream_send_batch", "stream_consume", "stream_fanout"]
    assert [w.name for w in WORKLOADS if w.name.startswith("stream_")] == names
    bench = bench_run.Bench({s: None for s in SYSTEMS}, {}, None, None, 1.0, 1, 0)
    for name in names:
        w = BY_NAME[name]
        assert not w.upstream and w.raw and bench.systems_for(w) == [RAW, OURS], name
    for name in ("stream_consume", "stream_fanout"):  # the consumers of a subscription take turns
        w = BY_NAME[name]
        assert w.consumes and w.clients == (1,) and w.stored is streams.stored_rows
        assert w.msgs_per_op == streams.BATCH
    assert BY_NAME["stream_send"].stored is None and not BY_NAME["stream_send"].consumes
    cell = Cell("stream_fanout", 1, systems=[RAW, OURS], stored={RAW: 1.0, OURS: 1.0},
                segments=[_seg(RAW, 10_000, 22_000, 20_000), _seg(OURS, 10_000, 65_500, 70_000)])
    assert _row(format_table([cell]), "stream_fanout") == [
        "stream_fanout", "1", "2.20", NOT_APPLICABLE, "6.55", NOT_APPLICABLE, "2.98",
        "2", NOT_APPLICABLE, "7", "10,000", NOT_APPLICABLE, "10,000"]
    assert cell.as_dict()["stored_rows_per_msg"] == {RAW: 1.0, OURS: 1.0}


def test_rows_stored_per_message_are_reported_for_the_cells_that_count_them():
    from bench.report import format_stored

    cells = [Cell("send", 1, systems=[RAW, OURS]),
             Cell("stream_fanout", 1, systems=[RAW, OURS], stored={OURS: 1.0, RAW: 10.0})]
    assert format_stored(cells) == ["stream_fanout x1: rows stored per message: raw 10.00, ours 1.00"]
    assert format_stored(cells, (OURS,)) == ["stream_fanout x1: rows stored per message: ours 1.00"]


def test_the_fanout_ops_take_the_subscriptions_in_turn():
    """Each op of stream_fanout reads the next subscription's batch (ours and the baseline)."""
    from bench import streams

    class Cursor:
        def __init__(self):
            self.calls = []
            self.connection = self

        def transaction(self):
            import contextlib
            return contextlib.nullcontext()

        def execute(self, sql, params=None):
            self.calls.append(params)

        def fetchall(self):
            return []

    for op, sub_of in ((streams._pgmq_consume(streams.FANOUT), lambda p: p[1]),
                       (streams._raw_consume(streams.FANOUT), lambda p: p["sub"])):
        cur = Cursor()
        assert [op(cur) for _ in range(12)] == [0] * 12
        assert [sub_of(p) for p in cur.calls] == [f"fan{i % 10}" for i in range(12)]
    assert streams._subscriptions(1) == [streams.SUB]


def test_scrape_compares_the_counters_a_workload_moves():
    """--scrape's verdict: the counters the workload moves must rise by the bench's count
    (timed + warm-up); a short one is reported as differing."""
    from bench.scrape import compare, format_lines

    before = {"sent": 5, "deleted": 0, "updated": 0, "archived": 0}
    good = compare("read_delete", before, {"sent": 5, "deleted": 110, "updated": 110}, 100, 10)
    assert good["agree"] is True and good["counters"] == {"sent": 0, "deleted": 110, "updated": 110,
                                                          "archived": 0, "delivered": 0}
    # a counting queue's delivered counter is checked too
    counted = compare("pop_counted", before, {"sent": 5, "deleted": 110, "delivered": 109}, 100, 10)
    assert counted["agree"] is False and counted["checked"] == ["deleted", "delivered"]
    short = compare("read_delete", before, {"sent": 5, "deleted": 110, "updated": 109}, 100, 10)
    assert short["agree"] is False
    lines = format_lines([("read_delete x1 round 1", good), ("read_delete x1 round 2", short)])
    assert lines[1].endswith("updated/deleted: agree") and lines[2].endswith("updated/deleted: DIFFER")
    assert format_lines([]) == []
