"""HTTP plumbing on the standard library's ThreadingHTTPServer: requests, responses, path
routing and the handler that turns every exception into a response, so one bad request (or
a database outage) never stops the server."""

from __future__ import annotations

import logging
import re
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from ..printable import printable

log = logging.getLogger("pgmq_build.dashboard")

MAX_BODY = 64 * 1024  # forms here are a few fields


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    form: dict[str, str] = field(default_factory=dict)

    def int_param(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.query.get(name, "")
        if raw == "":
            return default
        if not re.fullmatch(r"\d{1,18}", raw) or not lo <= int(raw) <= hi:
            raise HTTPError(400, f"{name} must be a whole number from {lo} to {hi}")
        return int(raw)


@dataclass
class Response:
    body: str | bytes = b""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def redirect(location: str) -> Response:
    """303 See Other: after a POST the browser GETs the page (reloading it repeats nothing)."""
    return Response(status=303, headers={"Location": location})


def _first(values: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in values.items()}


class Router:
    """Routes are (method, path pattern); a pattern is segments, `{}` matching one segment
    (percent-decoded, so a queue name may hold any character)."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, tuple[str, ...], Callable[..., Response]]] = []

    def add(self, method: str, pattern: str, handler: Callable[..., Response]) -> None:
        self._routes.append((method, tuple(pattern.strip("/").split("/")) if pattern != "/" else (),
                             handler))

    def match(self, method: str, path: str) -> tuple[Callable[..., Response], list[str]]:
        raw = path.strip("/")
        try:
            segments = [unquote(s, errors="strict") for s in raw.split("/")] if raw else []
        except UnicodeDecodeError:
            raise HTTPError(400, "the path is not UTF-8") from None
        if any("\x00" in s for s in segments):  # no name holds NUL (PostgreSQL text cannot)
            raise HTTPError(404, "no such page")
        allowed = []
        for m, pattern, handler in self._routes:
            if len(pattern) != len(segments):
                continue
            if all(p == "{}" or p == s for p, s in zip(pattern, segments, strict=True)):
                args = [s for p, s in zip(pattern, segments, strict=True) if p == "{}"]
                if m == method:
                    return handler, args
                allowed.append(m)
        if allowed:
            raise HTTPError(405, "method not allowed", {"Allow": ", ".join(sorted(set(allowed)))})
        raise HTTPError(404, "no such page")


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer

    def version_string(self) -> str:
        return "pgmq-dashboard"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        try:
            try:
                response = self.server.app.handle(self._request(method))
            except HTTPError as exc:
                response = self.server.app.error_page(exc.status, exc.message, exc.headers,
                                                      urlsplit(self.path).path)
        except Exception:  # a bug: log it, answer 500, keep serving
            log.error("unhandled error on %s %s\n%s", method, printable(self.path), traceback.format_exc())
            response = Response("internal error\n", 500, "text/plain; charset=utf-8")
        self._send(response)

    def _request(self, method: str) -> Request:
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            query = _first(parse_qs(url.query, keep_blank_values=True, max_num_fields=20,
                                    errors="strict"))
        except ValueError as exc:
            raise HTTPError(400, f"bad query string: {exc}") from None
        req = Request(method, url.path, query, headers)
        if method == "POST":
            length = int(headers.get("content-length") or 0)
            if length > MAX_BODY:
                raise HTTPError(413, "request body too large")
            body = self.rfile.read(length).decode("utf-8", errors="strict") if length else ""
            if body and not headers.get("content-type", "").startswith(
                    "application/x-www-form-urlencoded"):
                raise HTTPError(415, "expected a form (application/x-www-form-urlencoded)")
            try:
                req.form = _first(parse_qs(body, keep_blank_values=True, max_num_fields=20,
                                           errors="strict"))
            except ValueError as exc:
                raise HTTPError(400, f"bad form: {exc}") from None
        return req

    def _send(self, response: Response) -> None:
        body = response.body.encode() if isinstance(response.body, str) else response.body
        self.send_response(response.status)
        headers = {"Content-Type": response.content_type, "Content-Length": str(len(body)),
                   "Cache-Control": "no-store", **self.server.app.security_headers(),
                   **response.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        log.info("%s %s", self.address_string(), printable(format % args))  # the request line as sent


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow client never blocks shutdown
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app) -> None:
        self.app = app
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
