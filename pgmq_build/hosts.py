"""The Host rule of our HTTP servers (the dashboard, the metrics exporter): a request must name
the address the server listens on. A page on another site that points its own name at this
address (DNS rebinding) sends that name as Host, so it is refused before anything is read."""

from __future__ import annotations


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """The Host values accepted by a server bound to HOST:PORT; None (any) for a wildcard
    address, which has no name to check against."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {f"[{host}]" if ":" in host else host, "localhost"}
    if host in ("127.0.0.1", "::1", "localhost"):
        names |= {"127.0.0.1", "[::1]"}
    return {f"{n}:{port}" for n in names}


def host_allowed(host_header: str, allowed: set[str] | None) -> bool:
    """Whether a request's Host header passes the rule (None: any)."""
    return allowed is None or host_header in allowed
