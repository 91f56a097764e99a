"""What every admin command shares: --dsn (or env PGMQ_DSN), --json, --yes, and one place that
turns failures into the documented exit codes (exits.py)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import psycopg

from ..printable import printable
from .db import READ_ONLY, database_error, in_recovery
from .exits import Exit, OpsError
from .render import Output

F = TypeVar("F", bound=Callable[..., Any])

dsn_option = click.option("--dsn", envvar="PGMQ_DSN", required=True, metavar="DSN",
                          help="Database (libpq DSN or URI); default: env PGMQ_DSN.")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document on stdout (stable keys) instead of tables.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


def report(exc: OpsError, as_json: bool) -> None:
    """The error on stderr (with its SQLSTATE); with --json also as the document on stdout."""
    state = f" (SQLSTATE {exc.sqlstate})" if exc.sqlstate else ""
    click.echo(printable(f"error: {exc.message}{state}"), err=True)
    if as_json:
        Output(True).json({"error": exc.message, "sqlstate": exc.sqlstate, "exit_code": int(exc.code)})


def handled(fn: F) -> F:
    """Run a command body: OpsError and psycopg errors exit with their code, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except OpsError as exc:
            report(exc, as_json)
            sys.exit(int(exc.code))
        except psycopg.Error as exc:
            # a write refused as read-only: say so when it is because the server is a standby
            standby = exc.sqlstate == READ_ONLY and in_recovery(kwargs.get("dsn"))
            err = database_error(exc, standby=standby)
            report(err, as_json)
            sys.exit(int(err.code))
        except KeyboardInterrupt:  # Ctrl-C: what was committed stays, like a refused prompt
            report(OpsError("interrupted", Exit.ABORTED), as_json)
            sys.exit(int(Exit.ABORTED))

    return wrapper  # type: ignore[return-value]


def confirm(question: str, yes: bool) -> None:
    """Ask on stderr unless --yes; anything but yes (EOF and Ctrl-C too) aborts with exit 4."""
    if yes:
        return
    try:
        ok = click.confirm(printable(question), default=False, err=True)
    except click.Abort:  # EOF or Ctrl-C at the prompt
        click.echo(err=True)
        ok = False
    if not ok:
        raise OpsError("aborted: nothing was changed", Exit.ABORTED)
