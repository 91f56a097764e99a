"""Regenerate docs/dashboard.png, the README's screenshot: a throwaway server with the tests'
demo database and a little traffic, the dashboard sampling it, Chromium capturing the queue
list and a queue's charts (stacked into one PNG).

    python3 -m tests.dashboard.screenshot [--out docs/dashboard.png] [--seconds 40]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import psycopg
from selenium.webdriver.common.by import By

from pgmq_build import install
from pgmq_build.cluster import TempCluster
from pgmq_build.dashboard import Dashboard
from tests.dashboard.browser import chromium, read_png, stack, write_png
from tests.dashboard.demo_db import populate
from tests.helpers import send_n


def traffic(conn: psycopg.Connection, seconds: float) -> None:
    """A producer with a daily-ish wave and a steady consumer on orders; a trickle on emails."""
    start = time.monotonic()
    n = 1000
    while (elapsed := time.monotonic() - start) < seconds:
        burst = int(6 + 5 * math.sin(elapsed / seconds * 2 * math.pi))
        send_n(conn, "orders", burst, start=n, customer="ada", total=12.5)
        n += burst
        conn.execute("SELECT * FROM pgmq.pop('orders', 6)")
        if int(elapsed) % 3 == 0:
            send_n(conn, "emails", 1, start=n, to="ops@example.com")
            conn.execute("SELECT * FROM pgmq.pop('emails', 1)")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--seconds", type=float, default=40.0, help="traffic before the capture")
    args = parser.parse_args()
    install.install_files()
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgmq")
        populate(conn)
        app = Dashboard(cluster.dsn(), sample_interval=1.0, refresh=0)
        server, url = app.serve_in_thread()
        browser = chromium()
        try:
            traffic(conn, args.seconds)
            shots = []
            for path, element in (("/", "main"), ("/queues/orders", "main")):
                browser.get(url + path)
                shot = read_png(browser.get_screenshot_as_png())
                bottom = browser.find_element(By.CSS_SELECTOR, element).rect
                if path == "/":  # the list is short: down to the end of its table
                    cut = int(bottom["y"] + bottom["height"]) + 8
                else:  # the detail page: down to the charts' end
                    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
                    cut = int(max(c.rect["y"] + c.rect["height"] for c in charts)) + 16
                shots.append(shot.crop(0, 0, shot.width, min(cut, shot.height)))
            data = write_png(stack(shots))
        finally:
            browser.quit()
            server.shutdown()
            server.server_close()
            app.close()
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data) // 1024} KB)")


if __name__ == "__main__":
    main()
