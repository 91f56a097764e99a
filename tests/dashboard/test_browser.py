"""The dashboard in a real headless Chromium: the pages render, the charts are visible in
screenshots (the series' colours, in amounts a line makes), the tables are not blank, and the
redrive form works when clicked."""

from __future__ import annotations

import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from pgmq_build.dashboard.charts import COLOURS
from tests.dashboard.browser import element_image
from tests.dashboard.demo_db import streams_and_exchanges
from tests.helpers import column, scalar, send_n, wait_for


def busy_history(dash, conn, queue: str, rounds: int = 6) -> None:
    """Send and consume between samples, so the charts have lines that move."""
    for i in range(rounds):
        send_n(conn, queue, 3 + i, start=100 + 10 * i)
        conn.execute("SELECT * FROM pgmq.pop(%s, 2)", (queue,))
        time.sleep(dash.app.sampler.interval)
    wait_for(lambda: len(dash.app.sampler.history(queue)) >= rounds, what="samples")


def test_queue_list_in_the_browser(dashboard, demo, conn, browser):
    dash = dashboard()
    busy_history(dash, conn, "orders", rounds=4)
    browser.get(dash.url + "/")
    table = browser.find_element(By.ID, "queues")
    names = [a.text for a in table.find_elements(By.CSS_SELECTOR, "td:first-child a")]
    assert names == list(demo.queues)
    paused = table.find_element(By.XPATH, f".//tr[td/a[text()='{demo.paused}']]")
    assert "paused" in paused.text
    shot = element_image(browser, table)
    assert shot.width > 800 and shot.ink() > 0.05 and shot.dark() > 1500  # text on a table
    spark = table.find_element(By.XPATH, ".//tr[td/a[text()='orders']]//*[local-name()='svg']")
    assert element_image(browser, spark).count_near(COLOURS["depth"]) > 60  # a drawn line


def test_queue_detail_charts_are_drawn(dashboard, demo, conn, browser):
    dash = dashboard()
    busy_history(dash, conn, "orders")
    browser.get(dash.url + "/queues/orders")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 3
    expected = [("Depth", "messages", ["depth", "in_flight"]),
                ("Oldest message age", "seconds", ["oldest_age"]),
                ("Throughput", "messages / s", ["sent", "consumed"])]
    for chart, (title, y_label, series) in zip(charts, expected, strict=True):
        assert chart.get_attribute("aria-label") == title
        assert y_label in chart.text and "time" in chart.text  # axis labels
        image = element_image(browser, chart)
        assert (image.width, image.height) == (400, 220)
        for name in series:
            # A 2.5-px line across a 330-px plot: hundreds of pixels; a blank chart has none.
            assert image.count_near(COLOURS[name], tolerance=30) > 250, (title, name)
        assert image.dark(limit=450) > 300  # tick and axis labels (#444 text)
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr")
    assert len(rows) == 21  # header + a page of 20
    assert '"customer": "ada"' in rows[1].text


def test_redrive_from_the_dead_letter_view(dashboard, demo, conn, browser):
    dash = dashboard(allow_actions=True)
    browser.get(dash.url + "/dead-letters")
    section = browser.find_element(By.CSS_SELECTOR, f"section[data-queue='{demo.dlq}']")
    reasons = [td.text for td in section.find_elements(By.CSS_SELECTOR, "table.letters tr td:nth-child(2)")]
    assert sorted(reasons) == ["nack"] * 3 + ["rollback"] * 2
    assert element_image(browser, section).dark() > 1000
    before = set(column(conn, f"SELECT message->>'n' FROM pgmq.q_{demo.source}"))
    dead = set(column(conn, f"SELECT message->>'n' FROM pgmq.q_{demo.dlq}"))
    section.find_element(By.CSS_SELECTOR, "form.redrive button").click()
    WebDriverWait(browser, 10).until(lambda b: "notice=redriven" in b.current_url)
    assert f"Redrive moved {demo.dead} message(s)." in browser.find_element(By.CLASS_NAME, "notice").text
    assert scalar(conn, f"SELECT count(*) FROM pgmq.q_{demo.dlq}") == 0
    assert set(column(conn, f"SELECT message->>'n' FROM pgmq.q_{demo.source}")) == before | dead
    section = browser.find_element(By.CSS_SELECTOR, f"section[data-queue='{demo.dlq}']")
    assert section.find_element(By.CLASS_NAME, "depth").text == "0"


def test_outage_page_reloads_by_itself(dashboard, browser):
    down = dashboard("host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=1",
                     pool_timeout=0.5)
    browser.get(down.url + "/")
    assert "503 Service Unavailable" in browser.find_element(By.TAG_NAME, "h1").text
    notice = browser.find_element(By.ID, "retrying")
    assert "reloads by itself" in notice.text
    assert element_image(browser, browser.find_element(By.CLASS_NAME, "warn")).dark() > 300  # the message, drawn
    browser.execute_script("window.__before_reload = true")
    # OUTAGE_RETRY (5 s) later the page loads again: the marker of this load is gone
    WebDriverWait(browser, 15).until(lambda b: b.execute_script("return window.__before_reload !== true"))
    assert "503" in browser.find_element(By.TAG_NAME, "h1").text


def test_queue_list_sorts_filters_and_compares_in_the_browser(dashboard, demo, conn, browser):
    dash = dashboard()
    busy_history(dash, conn, "orders", rounds=3)
    browser.get(dash.url + "/")
    browser.find_element(By.CSS_SELECTOR, "th a[data-sort='depth']").click()
    WebDriverWait(browser, 10).until(lambda b: "sort=depth" in b.current_url)
    table = browser.find_element(By.ID, "queues")
    names = [a.text for a in table.find_elements(By.CSS_SELECTOR, "td:first-child a")]
    assert names[0] == "orders" and set(names) == set(demo.queues)  # deepest first
    # every sparkline on one scale: the small queues' lines sit lower than orders', all drawn
    sparks = {n: table.find_element(By.XPATH, f".//tr[td/a[text()='{n}']]//*[local-name()='svg']")
              for n in ("orders", "reports")}
    assert element_image(browser, sparks["orders"]).count_near(COLOURS["depth"]) > 60
    assert element_image(browser, sparks["reports"]).count_near(COLOURS["depth"]) > 60
    box = browser.find_element(By.ID, "filter")
    box.send_keys("pay")
    box.submit()
    WebDriverWait(browser, 10).until(lambda b: "q=pay" in b.current_url)
    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#queues td:first-child a")]
    assert names == [demo.dlq, demo.source]  # still by depth, descending


def test_a_sampling_outage_is_a_gap_in_the_charts(dashboard, demo, conn, connect, browser):
    dash = dashboard()  # samples every 0.2 s: 0.6 s without one is a gap
    busy_history(dash, conn, "orders", rounds=3)
    blocker = connect()
    with blocker.transaction():  # queue_metrics() waits on the lock: no sample for 1.5 s
        blocker.execute("LOCK TABLE pgmq.meta IN ACCESS EXCLUSIVE MODE")
        time.sleep(1.5)
    before = len(dash.app.sampler.history("orders"))
    wait_for(lambda: len(dash.app.sampler.history("orders")) >= before + 3, what="samples after the outage")
    browser.get(dash.url + "/queues/orders")
    depth = browser.find_elements(By.CSS_SELECTOR, "svg.chart")[0]
    lines = depth.find_elements(By.XPATH, f".//*[local-name()='polyline'][@stroke='{COLOURS['depth']}']")
    assert len(lines) == 2  # before and after the outage, not one line across it
    assert element_image(browser, depth).count_near(COLOURS["depth"], tolerance=30) > 150


def test_streams_and_exchanges_pages_in_the_browser(dashboard, demo, conn, browser):
    streams_and_exchanges(conn)
    dash = dashboard()
    browser.get(dash.url + "/streams")
    section = browser.find_element(By.CSS_SELECTOR, "section[data-stream='ev']")
    rows = {r.find_elements(By.TAG_NAME, "td")[0].text: r.text
            for r in section.find_elements(By.CSS_SELECTOR, "table.subscriptions tr")[1:]}
    assert set(rows) == {"a", "b"} and " 3 " in rows["a"]
    assert element_image(browser, section).dark() > 1000  # a drawn table, not a blank
    browser.find_element(By.LINK_TEXT, "Exchanges").click()
    WebDriverWait(browser, 10).until(lambda b: b.current_url.endswith("/exchanges"))
    row = browser.find_element(By.CSS_SELECTOR, "#exchanges tr[data-exchange='orders']")
    assert "direct" in row.text and "orders [eu]" in row.text and "stream ev [us]" in row.text
    assert element_image(browser, browser.find_element(By.ID, "exchanges")).dark() > 1000
