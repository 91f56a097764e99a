"""Fixtures of the dashboard tests: the demo-like database, a dashboard server on a free
port (stopped at teardown), and one headless Chromium for the module."""

from __future__ import annotations

import http.client
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest

from pgmq_build.dashboard import Dashboard
from tests.dashboard.browser import chromium
from tests.dashboard.demo_db import Demo, populate


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: str


@dataclass
class Running:
    """A dashboard being served: its base URL and a raw HTTP client (no redirects followed)."""

    app: Dashboard
    url: str

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    def request(self, method: str, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        conn = http.client.HTTPConnection(self.host, timeout=20)
        body = urlencode(form) if form is not None else None
        sent = dict(headers or {})
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        try:
            conn.request(method, path, body=body, headers=sent)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                         resp.read().decode())
        finally:
            conn.close()

    def get(self, path: str, **kw) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, form: dict[str, str], origin: bool = True, **kw) -> Reply:
        """A form POST as a browser on the dashboard's page sends it (Origin = the dashboard)."""
        headers = kw.pop("headers", {})
        if origin:
            headers.setdefault("Origin", self.url)
        return self.request("POST", path, form=form, headers=headers, **kw)


@pytest.fixture
def demo(conn: psycopg.Connection) -> Demo:
    return populate(conn)


@pytest.fixture
def dashboard(dsn: str) -> Iterator[Callable[..., Running]]:
    """dashboard(dsn=None, **options) -> a Running dashboard (default: the test database,
    read-only, sampling every 0.2 s, no page reloads)."""
    started = []

    def _start(target: str | None = None, **options) -> Running:
        options = {"sample_interval": 0.2, "refresh": 0, "pool_timeout": 2.0, **options}
        app = Dashboard(target or dsn, **options)
        server, url = app.serve_in_thread()
        started.append((app, server))
        return Running(app, url)

    yield _start
    for app, server in started:
        server.shutdown()
        server.server_close()
        app.close()


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()
