"""The contention sweep's results as Markdown tables and a PNG plot (no server needed).

A point is one series (a system's way of consuming) at one consumer count; the tables have a
row per series and a column per consumer count: msgs/s, server CPU per message (the consumers'
backends, as the main bench measures it) and p99 latency of a transaction (pgbench's log).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Point:
    series: str
    consumers: int
    msgs: int  # transactions completed inside the measured window (one message each)
    window_s: float
    cpu_us_per_msg: float | None  # None: the backends' CPU was not measurable
    p99_ms: float
    p50_ms: float
    failed: int = 0  # transactions pgbench logged as failed in the window
    waits: dict[str, int] = field(default_factory=dict)  # consumers' wait events, sampled

    @property
    def rate(self) -> float:
        return self.msgs / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "msgs_per_s": round(self.rate, 1)}


def _grid(points: list[Point]) -> tuple[list[str], list[int], dict[tuple[str, int], Point]]:
    series = list(dict.fromkeys(p.series for p in points))
    counts = sorted({p.consumers for p in points})
    return series, counts, {(p.series, p.consumers): p for p in points}


def _table(points: list[Point], title: str, cell) -> list[str]:
    series, counts, at = _grid(points)
    lines = [f"| {title} | " + " | ".join(str(n) for n in counts) + " |",
             "|---|" + "---:|" * len(counts)]
    for s in series:
        lines.append(f"| {s} | " + " | ".join(
            cell(at[s, n]) if (s, n) in at else "–" for n in counts) + " |")
    return lines


def peak_share(points: list[Point], series: str) -> float | None:
    """msgs/s at the series' largest consumer count as a share of its best point."""
    mine = sorted((p for p in points if p.series == series), key=lambda p: p.consumers)
    best = max((p.rate for p in mine), default=0.0)
    return mine[-1].rate / best if mine and best > 0 else None


def markdown(points: list[Point], header: str) -> str:
    series, _, _ = _grid(points)
    parts = [header, ""]
    parts += _table(points, "msgs/s by consumers", lambda p: f"{p.rate:,.0f}"
                    + (f" ({p.failed} failed)" if p.failed else ""))
    parts += [""]
    parts += _table(points, "server CPU µs/msg", lambda p: "?" if p.cpu_us_per_msg is None
                    else f"{p.cpu_us_per_msg:,.0f}")
    parts += [""]
    parts += _table(points, "p99 ms (p50)", lambda p: f"{p.p99_ms:,.1f} ({p.p50_ms:,.1f})")
    parts += ["", "At the largest consumer count, share of the series' own peak: " + ", ".join(
        f"{s} {share:.0%}" for s in series if (share := peak_share(points, s)) is not None) + "."]
    parts += ["", "What the consumers' backends were doing (pg_stat_activity, sampled every "
              "0.1 s in the window; share of samples, top 4):", ""]
    parts += [f"- {p.series} x{p.consumers}: " + ", ".join(
        f"{what} {n / sum(p.waits.values()):.0%}" for what, n in list(p.waits.items())[:4])
        for p in points if p.waits]
    return "\n".join(parts) + "\n"


def plot(points: list[Point], path: str, title: str) -> None:
    """msgs/s and p99 against consumers, one line per series (log-scaled consumer axis)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    series, counts, at = _grid(points)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    for s in series:
        xs = [n for n in counts if (s, n) in at]
        style = "-o" if s.startswith("ours") else "--s" if s.startswith("upstream") else ":^"
        top.plot(xs, [at[s, n].rate for n in xs], style, label=s)
        bottom.plot(xs, [at[s, n].p99_ms for n in xs], style, label=s)
    top.set_ylabel("messages / s")
    top.set_title(title, fontsize=9)
    top.grid(True, alpha=0.3)
    top.legend(fontsize=8)
    bottom.set_ylabel("p99 latency of a transaction (ms)")
    bottom.set_xlabel("consumers (connections)")
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(counts, [str(n) for n in counts])
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
