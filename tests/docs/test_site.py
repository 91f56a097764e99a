"""The documentation site as a reader sees it: `mkdocs build --strict` into a tmp dir, served by
the standard library's HTTP server on a free port, looked at in headless Chromium (Debian's
chromium + chromium-driver, as the dashboard's browser tests). Screenshots of the home page, a
guide and the reference landing page are written under the test's tmp dir."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.dashboard.browser import chromium, read_png

ROOT = Path(__file__).resolve().parents[2]

# page -> the title a reader sees (the page's H1)
PAGES = {
    "index.html": "pgmq-build",
    "guides/callbacks-and-worker.html": "Callbacks and the worker",
    "reference/index.html": "Reference",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, build.stderr
    return out


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def browser():
    b = chromium()
    yield b
    b.quit()


def test_the_build_fetches_no_fonts_and_finds_every_page(site):
    """Offline: no Google fonts in any page; every page of the nav was built."""
    for page in PAGES:
        html = (site / page).read_text()
        assert "fonts.googleapis.com" not in html and "fonts.gstatic.com" not in html
    assert (site / "api.txt").is_file() and (site / "dashboard.png").is_file()


@pytest.mark.parametrize("page,title", PAGES.items())
def test_a_page_in_the_browser(served, browser, tmp_path, page, title):
    browser.get(f"{served}/{page}")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "404" not in browser.title and "Not Found" not in body
    h1 = browser.find_element(By.CSS_SELECTOR, "article h1")
    assert h1.is_displayed() and h1.text.strip().rstrip("¶").strip() == title
    nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary")
    labels = nav.get_attribute("textContent")
    assert "Getting started" in labels and "Guides" in labels and "Reference" in labels
    if page != "reference/index.html":  # the reference landing page has links and a table, no code
        code = browser.find_elements(By.CSS_SELECTOR, "article pre code")
        assert code and code[0].is_displayed() and "pgmq." in code[0].text
    else:
        assert browser.find_element(By.CSS_SELECTOR, "article table").is_displayed()
    png = browser.get_screenshot_as_png()
    name = page.replace("/", "_").replace(".html", ".png")
    (tmp_path / name).write_bytes(png)
    if os.environ.get("PGMQ_DOCS_SCREENSHOTS"):  # refresh the committed copies (CONTRIBUTING.md)
        keep = ROOT / os.environ["PGMQ_DOCS_SCREENSHOTS"]
        keep.mkdir(parents=True, exist_ok=True)
        (keep / name).write_bytes(png)
    image = read_png(png)
    assert len(png) > 20_000, len(png)
    assert image.ink() > 0.05, "the screenshot is nearly one colour"
    assert image.dark() > 2_000, "no text to be seen"
