"""Exit codes of the admin commands, in one place (README: Admin CLI), and the error that
carries one up to the command line."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    DATABASE = 1  # the server refused or failed (its SQLSTATE is printed), or was unreachable
    USAGE = 2  # bad options or arguments (click's own usage errors exit 2 too)
    NOT_FOUND = 3  # no such queue, exchange, binding or dead-letter queue
    ABORTED = 4  # the confirmation of a destructive command was refused, or Ctrl-C


# SQLSTATEs that mean "no such thing": an unknown queue (42P01) or exchange (42704).
NOT_FOUND_SQLSTATES = frozenset({"42P01", "42704"})


class OpsError(Exception):
    """A failure to report on stderr (and in --json output) and exit with ``code``."""

    def __init__(self, message: str, code: Exit, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.sqlstate = sqlstate


def not_found(what: str) -> OpsError:
    return OpsError(f"{what} does not exist", Exit.NOT_FOUND)
