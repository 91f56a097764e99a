"""docs/reference/cli.md: every command, argument and option of `pgmq-build`, walked from the
click tree (cli.main) with the environment variables each option reads."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import click

HEADER = """\
# Command line reference

Every command of `pgmq-build`, its arguments and options. Generated from the click
declarations in `pgmq_build/cli.py` and `pgmq_build/ops/` by `pgmq-build generate` (do not
edit; `pgmq-build check` fails when it is stale). Every option can also be given in the
environment variable listed for it (the command line wins).
"""


def commands(ctx: click.Context) -> Iterator[click.Context]:
    """The context of every command under ctx's (a group), depth first, in name order."""
    group = ctx.command
    assert isinstance(group, click.Group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield sub
        if isinstance(cmd, click.Group):
            yield from commands(sub)


def envvars(ctx: click.Context, param: click.Parameter) -> list[str]:
    """The environment variables an option reads: its own envvar, else click's automatic one."""
    if not isinstance(param, click.Option):
        return []
    if param.envvar:
        return [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
    if param.allow_from_autoenv and ctx.auto_envvar_prefix and param.name:
        return [f"{ctx.auto_envvar_prefix}_{param.name.upper()}"]
    return []


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _default(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and (param.is_flag and not param.secondary_opts):
        return "off"
    default = param.default
    if not isinstance(default, str | int | float | tuple | list) or default in ((), []):
        return ""  # None, a callable, or click's UNSET
    return f"`{default}`"


def _type(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice):
        return " \\| ".join(f"`{c}`" for c in param.type.choices)
    kind = param.type.get_metavar(param, click.Context(click.Command("x"))) or param.type.name
    bounds = getattr(param.type, "_describe_range", None)  # click's IntRange / FloatRange
    kind = str(getattr(param, "metavar", None) or kind).upper() + (f" ({bounds()})" if bounds else "")
    suffix = ", repeatable" if getattr(param, "multiple", False) or param.nargs == -1 else ""
    return _cell(kind) + suffix


def _entry(ctx: click.Context) -> list[str]:
    cmd, path = ctx.command, ctx.command_path
    out = [f"## {path.removeprefix('pgmq-build ')}", "", "```text", cmd.get_usage(ctx).strip(), "```", "",
           inspect.cleandoc(cmd.help or cmd.short_help or ""), ""]
    params = [p for p in cmd.get_params(ctx) if p.name not in ("help", "version")]
    if isinstance(cmd, click.Group):
        out += ["Subcommands: " + ", ".join(f"`{n}`" for n in cmd.list_commands(ctx)), ""]
    if params:
        out += ["| Argument or option | Type | Default | Environment | Help |", "|---|---|---|---|---|"]
        for p in params:
            names = ", ".join(f"`{o}`" for o in p.opts + p.secondary_opts) if isinstance(p, click.Option) \
                else f"`{(p.human_readable_name).upper()}`"
            env = ", ".join(f"`{e}`" for e in envvars(ctx, p))
            required = " (required)" if p.required else ""
            out.append(f"| {names}{required} | {_type(p)} | {_default(p)} | {env} | "
                       f"{_cell(getattr(p, 'help', None) or '')} |")
        out.append("")
    return out


def page(main: click.Group) -> str:
    """The text of docs/reference/cli.md for the command group ``main``."""
    root = click.Context(main, info_name="pgmq-build", auto_envvar_prefix=main.context_settings.get(
        "auto_envvar_prefix"))
    out = [HEADER, *_entry(root)]
    for ctx in commands(root):
        out += _entry(ctx)
    return "\n".join(out).rstrip() + "\n"
