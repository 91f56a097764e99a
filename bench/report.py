"""The benchmark's results and the three-way table (no server needed: pure data and formatting)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

RAW, UPSTREAM, OURS = "raw", "upstream", "ours"
SYSTEMS = (RAW, UPSTREAM, OURS)
SHORT = {RAW: "raw", UPSTREAM: "upstream", OURS: "ours"}
NOT_APPLICABLE = "–"  # the system lacks the workload's functions (upstream: exchanges, worker)
UNAVAILABLE = "n/a"  # the workload failed on that system (see the notes under the table)
UNKNOWN = "?"  # not measurable here (server CPU of a server on another machine)


@dataclass
class Segment:
    system: str
    round: int
    prefill: int
    msgs: int
    ops: int
    dry_ops: int
    elapsed: float
    rate: float
    client_cpu: float  # cores the client side kept busy (thread mode: bounded by the GIL at ~1)
    server_cpu_us: float | None = None  # the clients' backends, utime + stime (None: unknown)
    wal_bytes: int | None = None
    scrape: dict | None = None  # --scrape: the exporter's counters over the segment (scrape.py)


@dataclass
class Cell:
    workload: str
    clients: int
    unit: str = "msgs"
    prefill: int = 0
    systems: list[str] = field(default_factory=list)  # those the workload runs on
    segments: list[Segment] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # system -> why it failed
    stored: dict[str, float] = field(default_factory=dict)  # system -> rows per prefilled message

    def _segs(self, system: str) -> list[Segment]:
        return [s for s in self.segments if s.system == system]

    def measured(self, system: str) -> bool:
        return system not in self.unavailable and bool(self._segs(system))

    def msgs(self, system: str) -> int:
        return sum(s.msgs for s in self._segs(system))

    def rate(self, system: str) -> float | None:
        if not self.measured(system):
            return None
        elapsed = sum(s.elapsed for s in self._segs(system))
        return self.msgs(system) / elapsed if elapsed else 0.0

    def _per_msg(self, system: str, attr: str) -> float | None:
        """A segment measure (`attr`) summed over the system's segments, per message; None when
        any segment could not measure it."""
        values = [getattr(s, attr) for s in self._segs(system)]
        if not self.measured(system) or any(v is None for v in values):
            return None
        msgs = self.msgs(system)
        return sum(values) / msgs if msgs else None

    def cpu_us_per_msg(self, system: str) -> float | None:
        return self._per_msg(system, "server_cpu_us")

    def wal_per_msg(self, system: str) -> float | None:
        return self._per_msg(system, "wal_bytes")

    def cpu_ratio(self, system: str, baseline: str) -> float | None:
        """CPU per message of `system` / that of `baseline` (> 1: `system` costs more)."""
        return ratio(self.cpu_us_per_msg(system), self.cpu_us_per_msg(baseline))

    def dry(self, system: str) -> int:
        return sum(s.dry_ops for s in self._segs(system))

    def client_cpu(self) -> float:
        return max((s.client_cpu for s in self.segments), default=0.0)

    def as_dict(self) -> dict:
        def rounded(v: float | None, nd: int) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "workload": self.workload, "clients": self.clients, "unit": self.unit,
            "prefill": self.prefill,
            "systems": {
                s: ({"msgs_per_s": rounded(self.rate(s), 1),
                     "server_cpu_us_per_msg": rounded(self.cpu_us_per_msg(s), 3),
                     "wal_bytes_per_msg": rounded(self.wal_per_msg(s), 1),
                     "msgs": self.msgs(s), "dry_ops": self.dry(s)}
                    if self.measured(s) else None)
                for s in SYSTEMS},
            "cpu_ratio_ours_upstream": rounded(self.cpu_ratio(OURS, UPSTREAM), 4),
            "cpu_ratio_ours_raw": rounded(self.cpu_ratio(OURS, RAW), 4),
            "unavailable": dict(self.unavailable),
            "stored_rows_per_msg": {k: round(v, 3) for k, v in self.stored.items()},
            "not_applicable": [s for s in SYSTEMS if s not in self.systems],
            "segments": [asdict(s) for s in self.segments],
        }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _num(v: float | None, fmt: str) -> str:
    return UNKNOWN if v is None else format(v, fmt)


def _cpu(v: float | None) -> str:
    return _num(v, ".2f" if v is not None and v < 10 else ".1f" if v is not None and v < 1000
                else ",.0f")


def _ratio(v: float | None) -> str:
    return _num(v, ".3f" if v is not None and v < 0.1 else ".2f")


def _baselines(systems: tuple[str, ...]) -> list[str]:
    """The systems ours is compared with, upstream first: the ratio columns."""
    return [s for s in (UPSTREAM, RAW) if s in systems] if OURS in systems else []


def format_table(cells: list[Cell], systems: tuple[str, ...] = SYSTEMS) -> str:
    """One row per cell: server CPU per message for each system and ours' ratios to upstream
    and raw (the primary metric), then WAL bytes per message and msgs/s for each system."""
    groups: list[tuple[str, list[str]]] = [
        ("", ["workload", "clients"]),
        ("server CPU µs/msg", [SHORT[s] for s in systems]),
        ("CPU ratio", [f"ours/{SHORT[s]}" for s in _baselines(systems)]),
        ("WAL bytes/msg", [SHORT[s] for s in systems]),
        ("msgs/s", [SHORT[s] for s in systems]),
    ]
    groups = [(g, names) for g, names in groups if names]
    head = [n for _, names in groups for n in names]
    rows: list[list[str]] = []
    for c in cells:
        def missing(system: str, c: Cell = c) -> str | None:
            if system in c.unavailable:
                return UNAVAILABLE
            if system not in c.systems or not c.measured(system):
                return NOT_APPLICABLE
            return None

        row = [c.workload, str(c.clients)]
        row += [missing(s) or _cpu(c.cpu_us_per_msg(s)) for s in systems]
        row += [missing(OURS) or missing(s) or _ratio(c.cpu_ratio(OURS, s))
                for s in _baselines(systems)]
        row += [missing(s) or _num(c.wal_per_msg(s), ",.0f") for s in systems]
        row += [missing(s) or _num(c.rate(s), ",.0f") + ("!" if c.dry(s) else "") for s in systems]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    # A group's title spans its columns: widen the last one if the title is longer.
    i = 0
    spans = []
    for title, names in groups:
        span = sum(widths[i:i + len(names)]) + 3 * (len(names) - 1)
        if len(title) > span:
            widths[i + len(names) - 1] += len(title) - span
            span = len(title)
        spans.append((title, span))
        i += len(names)
    align = ["<"] + [">"] * (len(head) - 1)

    def line(r: list[str]) -> str:
        return " | ".join(f"{v:{a}{w}}" for v, a, w in zip(r, align, widths, strict=True))

    top = " | ".join(f"{t:^{w}}" for t, w in spans)
    return "\n".join([top.rstrip(), line(head), "-+-".join("-" * w for w in widths),
                      *map(line, rows)])


def format_stored(cells: list[Cell], systems: tuple[str, ...] = SYSTEMS) -> list[str]:
    """A line per cell that counted its storage: how many rows hold one prefilled message."""
    return [f"{c.workload} x{c.clients}: rows stored per message: "
            + ", ".join(f"{SHORT[s]} {c.stored[s]:.2f}" for s in systems if s in c.stored)
            for c in cells if c.stored]
