"""The connector's one exception type: a usage error whose message is meant for the user."""

from __future__ import annotations


class PgmqSparkError(RuntimeError):
    """A usage error of the connector with a message meant for the user."""
