"""Operating queues from outside the database: the Prometheus exporter (metrics), the admin
commands (`pgmq-build queues`, `queue ...`, `exchange ...`, `dlq ...`, `stream ...`) and
`pgmq-build top`.

Every command reads through ``pgmq.queue_metrics()`` and the extension's other routines; none
of them touches queue tables directly.
"""

from __future__ import annotations

import importlib

import click

from ..extras import MissingExtra, missing_extra

# command name -> (module of pgmq_build.ops, attribute)
COMMANDS = {
    "metrics": ("metrics", "metrics_command"),
    "queues": ("queues", "queues_command"),
    "queue": ("queues", "queue_group"),
    "exchange": ("exchanges", "exchange_group"),
    "dlq": ("dlq", "dlq_group"),
    "stream": ("streams", "stream_group"),
    "top": ("top", "top_command"),
}


class LazyGroup(click.Group):
    """`pgmq-build`'s group: the operations commands are imported when used, so that the
    other commands do not pay for rich, psycopg and prometheus_client (~0.2 s) at start-up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:
            module, attr = COMMANDS[name]
            try:
                return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
            except ImportError as exc:
                missing = missing_extra(exc, f"pgmq-build {name}", name)
                if missing is None:
                    raise
                return _unavailable(name, missing)
        return super().get_command(ctx, name)


def _unavailable(name: str, missing: MissingExtra) -> click.Command:
    """A stand-in for a command whose extra is not installed: listed in --help, and running it
    (with any arguments) says which extra to install."""

    def fail() -> None:
        raise missing

    return click.Command(name, callback=fail, help=str(missing),
                         short_help=f"(not installed: pip install 'pgmq-build[{missing.extra}]')",
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
