"""The `pgmq-build` command line: a thin click layer over the modules that do the work."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from . import history, ops
from .extras import MissingExtra, missing_extra
from .manifest import MANIFEST
from .paths import extension_dir, history_dir
from .printable import printable

ENVVAR_PREFIX = "PGMQ_BUILD"


def _fail(message: str, code: int = 1) -> None:
    click.echo(printable(f"error: {message}"), err=True)
    sys.exit(code)


def _envvar_note(ctx: click.Context, param: click.Parameter | None, given: list[str] | None = None) -> str:
    """' (from the environment variable X)' when the option's value came from the environment
    (not on the command line: `given`, else what click recorded), else ''."""
    if not isinstance(param, click.Option) or param.name is None:
        return ""
    if given is not None:
        if any(a == o or a.startswith(o + "=") for a in given for o in param.opts):
            return ""
    elif ctx.get_parameter_source(param.name) is not click.core.ParameterSource.ENVIRONMENT:
        return ""
    names = param.envvar or f"{ctx.auto_envvar_prefix}_{param.name.upper()}"
    found = [n for n in ([names] if isinstance(names, str) else names) if os.environ.get(n)]
    return f" (from the environment variable {found[0]})" if found else ""


class _Command(click.Command):
    """Usage errors about a value taken from the environment say which variable it was in
    (PGMQ_BUILD_<COMMAND>_<OPTION>), since the command line does not show it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # parsing consumes args
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as exc:
            exc.message += _envvar_note(ctx, exc.param, given)
            raise


def _bad_option(ctx: click.Context, option: str, message: str) -> click.BadParameter:
    """A usage error (exit 2) for a value found bad after parsing, e.g. by the worker's checks."""
    param = next((p for p in ctx.command.params if option in getattr(p, "opts", ())), None)
    return click.BadParameter(message + _envvar_note(ctx, param), ctx=ctx, param_hint=option)


# The build tools (need the [build] extra); every other command operates a database.
BUILD_COMMANDS = ("generate", "check", "lint", "pgspot", "explain", "release")


class _Group(ops.LazyGroup):
    """`pgmq-build`: --help lists the operator commands apart from the build tools; a command
    whose extra is not installed names the extra instead of an ImportError traceback."""

    command_class = _Command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)  # as click.Group's listing
        for name in names:
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows[name in BUILD_COMMANDS].append((name, cmd.get_short_help_str(limit)))
        for build, title in ((False, "Operator commands (a database: PGMQ_DSN or --dsn)"),
                             (True, "Build commands (templates/ -> extension/; the [build] extra)")):
            if rows[build]:
                with formatter.section(title):
                    formatter.write_dl(rows[build])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            _fail(str(exc))
        except ImportError as exc:
            name = ctx.invoked_subcommand
            missing = missing_extra(exc, f"pgmq-build {name}", name)
            if missing is None:
                raise
            _fail(str(missing))


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (FloatRange lets nan through every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


class DsnType(click.ParamType):
    """A libpq connection string or URI, parsed (not connected to): a typo is a usage error."""

    name = "dsn"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(value)
        except ProgrammingError as exc:
            self.fail(f"not a libpq connection string or URI: {str(exc).strip()}", param, ctx)
        return value


DSN = DsnType()


@click.group(cls=_Group,  # + metrics, queues, queue, exchange, dlq, stream, top (pgmq_build/ops/)
             context_settings={"auto_envvar_prefix": ENVVAR_PREFIX, "help_option_names": ["-h", "--help"]})
@click.version_option(MANIFEST.version, prog_name="pgmq-build")
def main() -> None:
    """Generate, check, install and run the pgmq PostgreSQL extension."""


@main.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: the checkout's extension/).")
def generate(out: Path | None) -> None:
    """Render templates/ into extension/: control file, install and standalone scripts of the
    current version, and the upgrade scripts into it (released scripts are never rewritten);
    and the API listing docs/api.txt and the reference pages docs/reference/ (not with --out)."""
    from . import reference, render, surface

    source = extension_dir()
    outdir = out or source
    try:  # before the render (seconds): a bad --out fails at once
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"cannot write into {outdir}: {exc}")
    problems = render.release_problems(source, MANIFEST)
    if problems:
        for p in problems:
            click.echo(p, err=True)
        _fail("the manifest's releases do not match extension/ and templates/upgrades/")
    if outdir.resolve() == source.resolve():  # after a release: what it superseded goes to history/
        for name in history.move_superseded(MANIFEST.released, source):
            click.echo(f"moved {name} to {history_dir()}/ (superseded: no upgrade path needs it)")
    try:
        files = render.render_all(MANIFEST, source)
        api = _listing(files)
    except render.RenderError as exc:
        _fail(f"render failed: {exc}")
    try:
        written = [outdir / name for name in render.write_outputs(outdir, files)]
    except OSError as exc:
        _fail(f"cannot write into {outdir}: {exc}")
    if outdir.resolve() != source.resolve():  # a complete, installable copy: the shipped frozen scripts too
        for name in history.chain(MANIFEST.released) & history.released_names(MANIFEST.released):
            if not (outdir / name).exists():
                shutil.copyfile(source / name, outdir / name)
                written.append(outdir / name)
    if out is None:
        listing = surface.listing_path()
        written += [listing.parent / n for n in render.write_outputs(listing.parent, {listing.name: api})]
        where = reference.reference_dir()
        written += [where / n for n in render.write_outputs(where, _reference(files))]
    for path in written:
        click.echo(f"wrote {path}")
    if not written:
        click.echo(f"{outdir} is up to date")


@main.command()
def check() -> None:
    """Exit non-zero when the committed extension/, docs/api.txt or docs/reference/ differs from
    a fresh render, a released script is missing or altered, the current version is already
    released, or an upgrade step lacks its templates."""
    from . import reference, render, surface

    problems = render.release_problems(extension_dir(), MANIFEST)
    if problems:
        for p in problems:
            click.echo(p, err=True)
        _fail("the manifest's releases do not match extension/ and templates/upgrades/")
    try:
        files = render.render_all(MANIFEST, extension_dir())
        problems = render.diff_outputs(extension_dir(), files, MANIFEST.released)
        problems += surface.listing_problems(_listing(files))
        problems += reference.problems(_reference(files))
    except render.RenderError as exc:
        _fail(f"render failed: {exc}")
    for p in problems:
        click.echo(p, err=True)
    if problems:
        _fail("extension/, docs/api.txt or docs/reference/ is stale: run `pgmq-build generate` and "
              "commit the result")
    click.echo("extension/, docs/api.txt and docs/reference/ match the templates and the released scripts")


def _listing(files: dict[str, str]) -> str:
    """docs/api.txt's text, from the rendered install script."""
    from . import render, surface

    return surface.listing(files[render.install_name(MANIFEST.version)], MANIFEST)


def _reference(files: dict[str, str]) -> dict[str, str]:
    """docs/reference/*.md, from the rendered install script and the Python declarations."""
    from . import reference, render

    return reference.pages(files[render.install_name(MANIFEST.version)], MANIFEST)


def lint_targets(files: tuple[Path, ...]) -> tuple[list[tuple[Path, str, str | None]], list[Path]]:
    """(path, target, previous install script's text or None) of each script to lint, and the
    released (frozen) scripts that are skipped: they are checked by sha256, and linting them
    against today's manifest would be meaningless."""
    from . import render

    paths = files or tuple(sorted(extension_dir().glob("*.sql")))
    frozen = render.released_scripts(MANIFEST.released)
    todo, skipped = [], []
    for path in paths:
        if not files and path.name in frozen:
            skipped.append(path)
            continue
        target = "standalone" if path.name.startswith("pgmq-standalone--") else "extension"
        versions = path.name.removesuffix(".sql").split("--")[1:]
        previous = None
        if len(versions) == 2:  # an upgrade script: lint it against the version it starts from
            old = path.parent / render.install_name(versions[0], target)
            if not old.exists():
                old = history.find(old.name)
            previous = old.read_text() if old.exists() else ""
        todo.append((path, target, previous))
    return todo, skipped


@main.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def lint(files: tuple[Path, ...]) -> None:
    """Lint the rendered scripts (or FILES) with the PGMQ0xx rules: install scripts and upgrade
    scripts (an upgrade script pgmq--A--B.sql is linted against pgmq--A.sql). Released scripts
    are skipped unless named."""
    from .lint import lint_script

    targets, skipped = lint_targets(files)
    if not targets:
        _fail("nothing to lint: extension/ has no .sql files")
    total = 0
    for path, target, previous in targets:
        problems = lint_script(path.read_text(), MANIFEST, target=target, previous=previous)
        for p in problems:
            click.echo(f"{path.name}:{p.line}: {p.code} {p.obj}: {p.message}")
        total += len(problems)
    if total:
        _fail(f"{total} problem(s)")
    note = f" ({len(skipped)} released script(s) skipped: frozen, checked by sha256)" if skipped else ""
    click.echo(f"lint clean: {len(targets)} file(s){note}")


@main.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pgspot", "exe", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="pgspot executable (default: the pinned version in .venv-pgspot, installed on first use).")
def pgspot(files: tuple[Path, ...], exe: Path | None) -> None:
    """Check the generated scripts (or FILES) with pgspot; fail on any finding."""
    from . import pgspot as spot

    targets = files or tuple(sorted(extension_dir().glob("*.sql")))
    if not targets:
        _fail("nothing to check: extension/ has no .sql files")
    try:
        status = spot.run(targets, exe)
    except spot.PgspotError as exc:
        _fail(str(exc))
    if status:
        _fail(f"pgspot found problems (exit status {status})")
    click.echo(f"pgspot clean: {len(targets)} file(s)")


@main.command()
@click.argument("code")
def explain(code: str) -> None:
    """Explain a lint rule, e.g. `pgmq-build explain PGMQ005`."""
    from .lint.codes import CODES

    text = CODES.get(code.upper())
    if text is None:
        _fail(f"unknown rule {code}; known: {', '.join(sorted(CODES))}")
    click.echo(f"{code.upper()}: {text}")


@main.command()
@click.option("--dsn", type=DSN, default=None, envvar=["PGMQ_BUILD_INSTALL_DSN", "PGMQ_DSN"],
              help="Database to install into (libpq DSN or URI); default: env PGMQ_DSN.")
@click.option("--standalone", is_flag=True, help="Apply the standalone SQL script (no extension files needed).")
@click.option("--files-only", is_flag=True, help="Only copy the extension files into pg_config --sharedir.")
@click.option("--pg-config", default="pg_config", show_default=True, help="pg_config to locate the server's sharedir.")
def install(dsn: str | None, standalone: bool, files_only: bool, pg_config: str) -> None:
    """Install the extension files and CREATE EXTENSION, or apply the standalone script."""
    from . import install as inst

    ctx = click.get_current_context()
    if files_only and ctx.get_parameter_source("dsn") is click.core.ParameterSource.ENVIRONMENT:
        dsn = None  # PGMQ_DSN exported for the other commands: --files-only still touches no database
    if files_only and (dsn or standalone):
        raise click.UsageError("--files-only copies files and touches no database: "
                               "drop --dsn / --standalone, or drop --files-only")

    try:
        if standalone:
            if not dsn:
                _fail("--standalone needs --dsn")
            click.echo(str(inst.apply_standalone(dsn)))
            return
        copied = inst.install_files(pg_config)
        click.echo(f"installed {len(copied)} file(s) into {copied[0].parent}")
        if dsn and not files_only:
            click.echo(str(inst.create_or_update_extension(dsn)))
    except inst.InstallError as exc:
        _fail(str(exc))


@main.command()
@click.option("--dsn", type=DSN, required=True, envvar=["PGMQ_BUILD_MIGRATE_DSN", "PGMQ_DSN"],
              help="Database holding upstream PGMQ (libpq DSN or URI); default: env PGMQ_DSN.")
@click.option("--to", "target", type=click.Choice(["extension", "standalone"]), default=None,
              envvar=[f"{ENVVAR_PREFIX}_MIGRATE_TO", f"{ENVVAR_PREFIX}_MIGRATE_TARGET"],
              help="What it becomes: extension pgmq (default when its files are installed on the server) "
                   "or the standalone install.")
@click.option("--dry-run", is_flag=True, help="Print what would be done and change nothing.")
def migrate(dsn: str, target: str | None, dry_run: bool) -> None:
    """Turn upstream PGMQ 1.13 (its SQL-only install, or its extension) into this pgmq in place,
    in one transaction: every queue, message and setting is kept (README: Migrating from PGMQ)."""
    from . import install as inst
    from . import migrate as mig

    try:
        # upstream's queue names may hold control characters: shown escaped
        mig.migrate(dsn, target=target, dry_run=dry_run, echo=lambda line: click.echo(printable(line)))
    except (mig.MigrateError, inst.InstallError) as exc:
        _fail(str(exc))


@main.command()
# not PGMQ_DSN: the tour creates queues, and `make demo` with the variable exported for real work
# would run it there instead of on a throwaway server
@click.option("--dsn", type=DSN, default=None, help="Run against this server instead of a throwaway local one.")
@click.option("--keep", is_flag=True, help="Leave the throwaway server's data directory behind.")
@click.option("--spark", is_flag=True, help="The Spark pipeline tour (needs the spark extra and Java).")
@click.option("--migrate", "migrate_", is_flag=True, envvar=[f"{ENVVAR_PREFIX}_DEMO_MIGRATE", f"{ENVVAR_PREFIX}_DEMO_MIGRATE_"],
              help="Upstream PGMQ (from the PyPI package pgmq) in use, migrated in place (in a scratch database).")
def demo(dsn: str | None, keep: bool, spark: bool, migrate_: bool) -> None:
    """A narrated tour: create, send, read with a lease, archive, pop, metrics."""
    from .demo import run_demo, run_migrate_demo

    try:
        if migrate_:
            run_migrate_demo(dsn=dsn, keep=keep, echo=click.echo)
            return
        if spark:
            from .spark.demo import run as run_spark_demo

            run_spark_demo(dsn=dsn, echo=click.echo, keep=keep)
            return
        run_demo(dsn=dsn, keep=keep, echo=click.echo)
    except Exception as exc:  # the demo's audience wants one clear line, not a traceback
        _fail(f"demo failed: {exc}")


@main.command()
@click.option("--dsn", type=DSN, required=True, envvar=["PGMQ_BUILD_WORKER_DSN", "PGMQ_DSN"],
              help="Database to serve (libpq DSN or URI); default: env PGMQ_DSN.")
@click.option("--queue", "queues", multiple=True, metavar="Q",
              envvar=[f"{ENVVAR_PREFIX}_WORKER_QUEUE", f"{ENVVAR_PREFIX}_WORKER_QUEUES"],
              help="Serve this queue (repeatable; default: every queue in pgmq.list_callbacks(), re-read every 10 s).")
@click.option("--min-workers", type=click.IntRange(min=1), default=3, show_default=True,
              help="Dispatcher threads kept running.")
@click.option("--max-workers", type=click.IntRange(min=1), default=10, show_default=True,
              help="Upper bound of the pool.")
@click.option("--start-delay", type=FiniteFloat(min=0), default=5.0, show_default=True,
              help="Seconds all workers must have been busy before one more starts.")
@click.option("--idle-timeout", type=FiniteFloat(min=0), default=60.0, show_default=True,
              help="Seconds without a message after which a worker above --min-workers retires.")
@click.option("--naptime-ms", type=click.IntRange(min=1, max=3_600_000), default=150, show_default=True,
              help="Poll interval: delayed and retried messages do not notify.")
@click.option("--batch", type=click.IntRange(min=1), default=100, show_default=True,
              help="Messages taken from one queue before moving on to the next.")
@click.option("--tx-batch", type=click.IntRange(min=1, max=1000), default=20, show_default=True,
              help="Most messages dispatched in one transaction (one commit); fewer when "
                   "callbacks are slow (a statement lasts about 50 ms). 1: a transaction per "
                   "message. A crash or an error outside a callback rolls back its batch: "
                   "those messages are delivered again.")
@click.option("--stream", "streams", multiple=True, metavar="STREAM:SUBSCRIPTION",
              envvar=[f"{ENVVAR_PREFIX}_WORKER_STREAM", f"{ENVVAR_PREFIX}_WORKER_STREAMS"],
              help="Run --handler on this subscription's batches (repeatable); without --queue, "
                   "only streams are served.")
@click.option("--handler", "handler_spec", metavar="MODULE:FUNCTION", default=None,
              envvar=f"{ENVVAR_PREFIX}_WORKER_HANDLER",
              help="handler(batch, conn) for --stream: runs with the batch's ack in one "
                   "transaction on conn (the module must be importable).")
@click.option("--lease", "stream_lease", type=click.IntRange(min=1, max=2**31 - 1), default=30,
              envvar=f"{ENVVAR_PREFIX}_WORKER_LEASE",
              show_default=True, help="Seconds a stream batch is leased: handler and ack must fit.")
@click.option("--stream-consumers", type=click.IntRange(min=1, max=100), default=1, show_default=True,
              help="Consumer threads per --stream subscription.")
@click.option("--once", is_flag=True, help="Dispatch until nothing is eligible, then exit (for cron).")
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True,
              help="Log lines on stderr.")
@click.option("--metrics-bind", metavar="HOST:PORT", default=None,
              help="Serve Prometheus /metrics here: the queue series and the worker's counters.")
def worker(dsn: str, queues: tuple[str, ...], min_workers: int, max_workers: int, start_delay: float,
           idle_timeout: float, naptime_ms: int, batch: int, tx_batch: int,
           streams: tuple[str, ...], handler_spec: str | None, stream_lease: int,
           stream_consumers: int, once: bool, log_format: str, metrics_bind: str | None) -> None:
    """Deliver messages to their registered callbacks (pgmq.register_callback), and stream
    batches to --handler, until SIGTERM. Bad options exit 2 before connecting; a --queue or
    --stream that does not exist exits 2 before any thread starts; a server that cannot be
    reached exits 1."""
    from .worker import SettingError, check_settings, load_handler, run_cli

    options: dict[str, Any] = dict(
        min_workers=min_workers, max_workers=max_workers, start_delay=start_delay,
        idle_timeout=idle_timeout, naptime_ms=naptime_ms, batch=batch, tx_batch=tx_batch,
        streams=list(streams) or None, stream_lease=stream_lease, stream_consumers=stream_consumers)
    flags = {"queues": "--queue", "streams": "--stream", "stream_lease": "--lease"}
    try:
        options["handler"] = None if handler_spec is None else load_handler(handler_spec)
        check_settings(dsn, queues or None, **options)
    except SettingError as exc:
        option = flags.get(exc.setting, "--" + exc.setting.replace("_", "-"))
        raise _bad_option(click.get_current_context(), option, str(exc)) from None
    sys.exit(run_cli(dsn, queues, once=once, log_format=log_format, metrics_bind=metrics_bind,
                     **options))


@main.command()
@click.option("--dsn", type=DSN, required=True, envvar=["PGMQ_BUILD_DASHBOARD_DSN", "PGMQ_DSN"],
              help="Database to show (libpq DSN or URI); default: env PGMQ_DSN.")
@click.option("--bind", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
              help="Address to listen on (keep it local: the dashboard has no login).")
@click.option("--allow-actions", is_flag=True,
              help="Show and accept redrive, pause/resume and purge (default: read-only).")
@click.option("--sample-interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between pgmq.queue_metrics() samples for the charts.")
def dashboard(dsn: str, bind: str, allow_actions: bool, sample_interval: float) -> None:
    """A web dashboard: queues, charts, a message browser and dead letters (README: Dashboard)."""
    from .dashboard import run

    sys.exit(run(dsn, bind, allow_actions, sample_interval, echo=click.echo))


if __name__ == "__main__":
    main()
