"""The SVG charts, the sampler's rate arithmetic and the router: pure code, no server."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from pgmq_build.dashboard import charts
from pgmq_build.dashboard.sampler import Sample, rates, window_rates
from pgmq_build.dashboard.web import HTTPError, Router

SVG = "{http://www.w3.org/2000/svg}"


def parse(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))  # well-formed XML, or this raises


def polylines(svg: ET.Element) -> list[ET.Element]:
    return svg.findall(f"{SVG}polyline")


def texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text")]


def points(line: ET.Element) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


@pytest.mark.parametrize(("value", "ceiling"), [
    (0, 1), (-3, 1), (0.3, 0.5), (1, 1), (7, 10), (11, 20), (2.1, 2.5), (45, 50), (100, 100), (1234, 2000)])
def test_nice_ceiling(value, ceiling):
    assert charts.nice_ceiling(value) == pytest.approx(ceiling)


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (2.5, "2.5"), (40, "40"), (1200, "1.2k"),
                                             (3_000_000, "3M")])
def test_fmt_number(value, text):
    assert charts.fmt_number(value) == text


def test_line_chart_draws_each_series_inside_the_plot_with_axes_and_legend():
    t0 = 1_700_000_000.0
    depth = charts.Series("depth", "#1f6fd1", [(t0 + i, v) for i, v in enumerate([0, 4, 9, 3])])
    sent = charts.Series("sent", "#1f9d55", [(t0 + i, 1.0) for i in range(4)])
    svg = parse(charts.line_chart([depth, sent], title="Depth", y_label="messages",
                                  width=600, height=220))
    lines = polylines(svg)
    assert [line.get("stroke") for line in lines] == ["#1f6fd1", "#1f9d55"]
    plot = svg.find(f"{SVG}rect[@stroke]")  # the plot area's frame
    x0, y0 = float(plot.get("x")), float(plot.get("y"))
    x1, y1 = x0 + float(plot.get("width")), y0 + float(plot.get("height"))
    pts = points(lines[0])
    assert len(pts) == 4
    assert all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in pts)
    assert pts[0] == (x0, y1)  # the first sample at the left, value 0 on the bottom
    assert pts[-1][0] == x1  # the last at the right
    assert pts[2][1] == pytest.approx(y1 - 9 / 10 * (y1 - y0))  # 9 of an axis up to 10
    labels = texts(svg)
    assert {"messages", "time", "depth", "sent"} <= set(labels)
    assert {"0", "2.5", "5", "7.5", "10"} <= set(labels)  # y ticks
    clock = [t for t in labels if t.count(":") == 2]
    assert len(clock) == 4  # HH:MM:SS time ticks for a short span


def test_line_chart_gaps_and_lone_points():
    t = 1_700_000_000.0
    s = charts.Series("oldest message age", "#d8412f",
                      [(t, 5.0), (t + 1, 6.0), (t + 2, None), (t + 3, 2.0), (t + 4, None),
                       (t + 5, 1.0), (t + 6, 1.5)])
    svg = parse(charts.line_chart([s], title="Oldest", y_label="seconds"))
    assert [len(points(p)) for p in polylines(svg)] == [2, 2]
    assert len(svg.findall(f"{SVG}circle")) == 1  # the lone sample at t+3


def test_line_chart_without_enough_samples_says_so():
    one = charts.Series("depth", "#1f6fd1", [(1_700_000_000.0, 3)])
    for series in ([], [one]):
        svg = parse(charts.line_chart(series, title="Depth", y_label="messages"))
        assert polylines(svg) == []
        assert "collecting samples…" in texts(svg)


def test_line_chart_escapes_its_text():
    s = charts.Series("<b>&", "#000", [(1.0, 1), (2.0, 2)])
    markup = str(charts.line_chart([s], title='"><script>', y_label="<i>"))
    assert "<script>" not in markup and "<b>" not in markup and "<i>" not in markup
    svg = parse(markup)
    assert "<b>&" in texts(svg) and "<i>" in texts(svg)


def test_sparkline():
    assert "svg" not in charts.sparkline([(1.0, 3)])
    svg = parse(charts.sparkline([(1.0, 0), (2.0, 5), (3.0, 10)], width=100, height=20))
    pts = points(polylines(svg)[0])
    assert pts[0][1] == 18 and pts[-1][1] == 2  # 0 at the bottom, the maximum at the top (2px pad)
    flat = points(polylines(parse(charts.sparkline([(1.0, 0), (2.0, 0)], height=20)))[0])
    assert {y for _, y in flat} == {18}


def sample(at: float, depth: int, total_sent: int) -> Sample:
    return Sample(at=at, depth=depth, visible=depth, in_flight=0, delayed=0, oldest_age=None,
                  total_sent=total_sent, dead_letter_depth=None)


def test_rates_from_total_sent_and_depth():
    got = rates([sample(0, 0, 0), sample(2, 6, 10), sample(4, 2, 10), sample(5, 0, 3)])
    assert got[0] == (2, 5.0, 2.0)  # 10 sent, depth +6: 4 consumed, over 2 s
    assert got[1] == (4, 0.0, 2.0)  # nothing sent, depth -4
    assert got[2] == (5, None, None)  # the counter went back: the queue was made again


def test_window_rates_use_the_last_minute():
    history = [sample(0, 0, 0), sample(100, 0, 1000), sample(130, 10, 1030), sample(160, 0, 1060)]
    assert window_rates(history) == (1.0, pytest.approx(60 / 60))  # 100 -> 160: 60 sent, 60 left
    assert window_rates(history[:1]) is None
    assert window_rates([sample(0, 0, 0), sample(500, 5, 50)]) == (0.1, 0.09)


def test_router_matches_percent_decoded_segments():
    router = Router()
    router.add("GET", "/", lambda r: "list")
    router.add("GET", "/queues/{}", lambda r, q: q)
    router.add("POST", "/queues/{}/pause", lambda r, q: q)
    assert router.match("GET", "/")[1] == []
    assert router.match("GET", "/queues/a%2Fb%20c")[1] == ["a/b c"]
    assert router.match("GET", "/queues/x/")[1] == ["x"]
    with pytest.raises(HTTPError) as info:
        router.match("GET", "/queues/x/pause")
    assert info.value.status == 405 and info.value.headers == {"Allow": "POST"}
    for path, status in (("/nope", 404), ("/queues/a/b/c", 404), ("/queues/a%00b", 404),
                         ("/queues/%ff", 400)):
        with pytest.raises(HTTPError) as info:
            router.match("GET", path)
        assert info.value.status == status, path


def test_samples_far_apart_are_drawn_apart():
    """A sampling outage (no samples for longer than `longest`) is a gap, not a line across it."""
    points = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (30.0, 4.0), (31.0, 5.0)]
    assert charts.gapped(points, 3.0) == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (2.0, None), (30.0, 4.0), (31.0, 5.0)]
    assert charts.gapped(points, 60.0) == points
    svg = charts.line_chart([charts.Series("depth", "#123456", charts.gapped(points, 3.0))], title="t", y_label="y")
    assert svg.count("<polyline") == 2
