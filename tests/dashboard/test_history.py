"""The dashboard's history in the database (pgmq.metrics_history): a role that may call
pgmq.sample_metrics() samples into the table and the charts read it back, so they survive a
restart; the range selector reads the table; a period without samples is a gap. A role that
may not keeps the in-memory ring and the pages say so. Screenshots in headless Chromium."""

from __future__ import annotations

import re
import time

from selenium.webdriver.common.by import By

from pgmq_build.dashboard.charts import COLOURS
from tests.dashboard.browser import element_image
from tests.helpers import column, scalar, send_n, wait_for

DEPTH_LINE = f".//*[local-name()='polyline'][@stroke='{COLOURS['depth']}']"


def _samples(conn, queue: str) -> int:
    return scalar(conn, "SELECT count(*) FROM pgmq.metrics_history WHERE queue_name = %s", (queue,))


def _depth_lines(body: str) -> list[int]:
    """The depth chart's lines in a queue page: the number of points of each."""
    depth_chart = body[body.index('aria-label="Depth"'):body.index('aria-label="Oldest message age"')]
    return [len(m.group(1).split()) for m in
            re.finditer(rf'<polyline points="([^"]*)" fill="none" stroke="{COLOURS["depth"]}"', depth_chart)]


def test_history_survives_a_restart_and_the_downtime_is_a_gap(dashboard, demo, conn, browser):
    first = dashboard()  # samples every 0.2 s: 0.6 s without one is a gap
    for i in range(4):
        send_n(conn, "orders", 2 + i, start=100 + 10 * i)
        time.sleep(first.app.sampler.interval)
    wait_for(lambda: _samples(conn, "orders") >= 4, what="samples in the table")
    assert first.app.sampler.persistent is True
    first.app.close()  # the dashboard stops: its samples stay in the database
    kept = column(conn, "SELECT depth FROM pgmq.metrics_history WHERE queue_name = 'orders' ORDER BY sampled_at")
    before = len(kept)
    time.sleep(1.5)  # the downtime
    second = dashboard()
    # right after the restart the old samples are there (the new process sampled at most once)
    assert [s.depth for s in second.app.sampler.history("orders")][:before] == kept
    assert kept[-1] == 26 + 2 + 3 + 4 + 5
    wait_for(lambda: _samples(conn, "orders") >= before + 4, what="samples after the restart")
    page = second.get("/queues/orders")
    assert "kept in the database (pgmq.metrics_history)" in page.body and 'id="memory-history"' not in page.body
    lines = _depth_lines(page.body)
    assert len(lines) == 2 and min(lines) >= 3, lines  # before and after the downtime, not one line
    browser.get(second.url + "/queues/orders")
    depth = browser.find_elements(By.CSS_SELECTOR, "svg.chart")[0]
    assert len(depth.find_elements(By.XPATH, DEPTH_LINE)) == 2
    assert element_image(browser, depth).count_near(COLOURS["depth"], tolerance=30) > 150


def _seed(conn, queue: str, minutes: int, hole: tuple[int, int] | None = None) -> None:
    """Samples of `queue` a minute apart over the last `minutes` (none within `hole`, minutes
    ago), oldest first: depth rising, total_sent growing. As the table's owner (the test's
    superuser): what an earlier sampler would have left."""
    lo, hi = hole or (-1, -1)
    conn.execute(
        "INSERT INTO pgmq.metrics_history (sample_id, sampled_at, queue_name, depth, visible, in_flight, delayed, "
        "oldest_msg_age_sec, total_sent, dead_letter_depth) "
        "SELECT nextval('pgmq.metrics_history_sample_seq'), now() - make_interval(mins => m), %s, "
        "  200 - m, 200 - m, 0, 0, m * 60, 10000 - m, NULL "
        "FROM generate_series(%s, 1, -1) m WHERE NOT m BETWEEN %s AND %s", (queue, minutes, lo, hi))


def test_the_range_selector_reads_the_table(dashboard, demo, conn, browser):
    _seed(conn, "orders", 180)
    dash = dashboard(sample_interval=30)  # gaps are > 90 s: the seeded minutes are one line
    wait_for(lambda: _samples(conn, "orders") >= 181, what="the dashboard's own sample")
    points = {}
    for span in ("15m", "1h", "6h"):
        page = dash.get(f"/queues/orders?range={span}")
        lines = _depth_lines(page.body)
        assert len(lines) == 1, (span, lines)
        points[span] = lines[0]
    # a minute apart, plus the dashboard's sample: each range draws what it covers
    assert 14 <= points["15m"] <= 17 and 59 <= points["1h"] <= 62 and 180 <= points["6h"] <= 182, points
    shots = {}
    for span in ("15m", "6h"):
        browser.get(f"{dash.url}/queues/orders?range={span}")
        depth = browser.find_elements(By.CSS_SELECTOR, "svg.chart")[0]
        ticks = [t.text for t in depth.find_elements(By.CSS_SELECTOR, "text.tick")]
        shots[span] = (element_image(browser, depth).count_near(COLOURS["depth"], tolerance=30), ticks[5:])
    assert shots["15m"][0] > 250 and shots["6h"][0] > 250  # a line across either chart
    assert shots["15m"][1] != shots["6h"][1]  # the time axis: 15 minutes, then 3 hours


def test_a_period_without_samples_is_a_gap(dashboard, demo, conn, browser):
    _seed(conn, "orders", 60, hole=(20, 40))  # nothing between 40 and 20 minutes ago
    dash = dashboard(sample_interval=30)
    page = dash.get("/queues/orders?range=1h")
    lines = _depth_lines(page.body)
    assert len(lines) == 2 and sorted(lines)[0] >= 19, lines
    browser.get(f"{dash.url}/queues/orders?range=1h")
    depth = browser.find_elements(By.CSS_SELECTOR, "svg.chart")[0]
    shot = element_image(browser, depth)
    assert len(depth.find_elements(By.XPATH, DEPTH_LINE)) == 2
    # the middle third of the plot (the hole) holds no depth pixel; either side does
    third = (shot.width - 70) // 3
    left, middle, right = (shot.crop(58 + i * third, 30, third, shot.height - 68) for i in range(3))
    assert left.count_near(COLOURS["depth"], 30) > 50 and right.count_near(COLOURS["depth"], 30) > 50
    assert middle.count_near(COLOURS["depth"], 30) == 0


def test_a_role_that_may_not_sample_keeps_memory_and_says_so(dashboard, demo, conn, make_role, dsn):
    name = make_role("viewer", login=True)
    conn.execute(f"CALL pgmq.grant_queue_access('orders', '{name}')")
    dash = dashboard(" ".join(f"user={name}" if p.startswith("user=") else p for p in dsn.split()))
    wait_for(lambda: len(dash.app.sampler.history("orders")) >= 2, what="samples in memory")
    assert dash.app.sampler.persistent is False
    page = dash.get("/queues/orders")
    assert 'id="memory-history"' in page.body and "kept in memory" in page.body
    assert _samples(conn, "orders") == 0  # nothing written
