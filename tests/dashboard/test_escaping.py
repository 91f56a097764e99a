"""Hostile names in the dashboard, in a real headless Chromium: queues made before 2.9.0 whose
names hold ESC, CR/LF, C1 controls or markup (tests/hostile_names.py) are shown escaped
(`\\x1b`, `\\r\\n`) in the list, the queue page and the dead-letter view, every row intact; links
and the redrive form carry the exact name back."""

from __future__ import annotations

from urllib.parse import quote

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.helpers import column, scalar, send_n
from tests.hostile_names import HOSTILE, SHOWN, legacy_queues

RAW = ("\x1b", "\r", "\x9b", "\x7f")


def seen(text: str) -> str:
    """How a browser shows text: runs of white space as one space."""
    return " ".join(text.split())


def test_hostile_names_in_the_browser(dashboard, conn, browser):
    legacy_queues(conn, list(HOSTILE.values()))
    esc, target = HOSTILE["esc"], HOSTILE["c1"]
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => %s)", (esc,))
    for msg_id in send_n(conn, "jobs", 3):
        conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
        conn.execute("SELECT pgmq.nack('jobs', %s)", (msg_id,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.browse(%s)", (esc,)) == 3
    dash = dashboard(allow_actions=True)

    # the list: one row per queue, each name escaped, the markup literal
    browser.get(dash.url + "/")
    assert not any(c in browser.page_source for c in RAW)
    table = browser.find_element(By.ID, "queues")
    names = [a.text for a in table.find_elements(By.CSS_SELECTOR, "tr td:first-child a")]
    assert sorted(names) == sorted([seen(s) for s in SHOWN.values()] + ["jobs"])
    assert len(table.find_elements(By.CSS_SELECTOR, "tr")) == len(HOSTILE) + 2  # + header, jobs
    dlq_cell = table.find_element(By.XPATH, ".//tr[td/a[text()='jobs']]/td[8]")
    assert dlq_cell.text == f"{SHOWN['esc']}: 3"

    # a queue's page, reached through its link (the URL carries the exact name)
    table.find_element(By.LINK_TEXT, seen(SHOWN["crlf"])).click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.TAG_NAME, "h1"))
    assert browser.current_url.endswith("/queues/" + quote(HOSTILE["crlf"], safe=""))
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith(f"Queue {seen(SHOWN['crlf'])}")
    assert browser.title.startswith(seen(SHOWN["crlf"]))
    assert "No messages." in browser.find_element(By.TAG_NAME, "main").text

    # the dead letters: the section of the ESC queue; redrive into the C1 queue, picked by its
    # escaped name (the option's value is the name percent-encoded)
    browser.get(dash.url + "/dead-letters")
    assert not any(c in browser.page_source for c in RAW)
    section = browser.find_element(By.CSS_SELECTOR, "section.dlq")
    assert section.find_element(By.TAG_NAME, "h2").text.startswith(f"{SHOWN['esc']}: 3 message(s)")
    Select(section.find_element(By.NAME, "target")).select_by_visible_text(seen(SHOWN["c1"]))
    section.find_element(By.CSS_SELECTOR, "form.redrive button").click()
    WebDriverWait(browser, 10).until(lambda b: "notice=redriven" in b.current_url)
    assert "Redrive moved 3 message(s)." in browser.find_element(By.CLASS_NAME, "notice").text
    assert scalar(conn, "SELECT count(*) FROM pgmq.browse(%s)", (esc,)) == 0
    assert sorted(column(conn, "SELECT message->>'n' FROM pgmq.browse(%s)", (target,))) == ["1", "2", "3"]
