"""Pure rendering: (templates, manifest, target) -> SQL text. No I/O besides reading templates."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import jinja2

from .errors import DeclarationError, raise_error
from .manifest import MANIFEST, MAX_QUEUE_NAME, Feature, Function, Manifest
from .paths import templates_dir

TARGETS = ("extension", "standalone")


class RenderError(Exception):
    """A template failed to render; names the feature and template."""


def sql_literal(text: str) -> str:
    """A standard-conforming SQL string literal (templates only quote static text)."""
    return "'" + str(text).replace("'", "''") + "'"


def make_env(target: str, manifest: Manifest = MANIFEST, path: Path | None = None) -> jinja2.Environment:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path or templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["identity_args"] = lambda args: Function("_", args, "void").identity_args
    env.filters["sql_literal"] = sql_literal
    # Globals, not render context: macros imported with {% from %} only see globals.
    env.globals.update(
        schema=manifest.schema,
        version=manifest.version,
        target=target,
        max_queue_name=MAX_QUEUE_NAME,
        # RAISE of a declared error/notice (pgmq_build/errors.py): upstream's texts are never
        # spelled in a template, and PGMQ011 checks upstream functions raise nothing else.
        raise_error=raise_error,
    )
    return env


@contextlib.contextmanager
def rendering(feature: str, template: str) -> Iterator[None]:
    try:
        yield
    except (jinja2.TemplateError, DeclarationError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{feature}/{template}" + (f":{line}" if line else "")
        raise RenderError(f"{where}: {exc}") from exc


def render_feature(env: jinja2.Environment, feature: Feature) -> str:
    parts = [f"-- ---------------------------------------------------------------- feature: {feature.name}\n"]
    for tpl in feature.templates:
        name = f"features/{feature.name}/{tpl}"
        with rendering(feature.name, tpl):
            text = env.get_template(name).render()
        parts.append(f"-- {name}\n{text.strip()}\n")
    return "\n".join(parts)


def render_install(manifest: Manifest = MANIFEST, target: str = "extension") -> str:
    env = make_env(target, manifest)
    with rendering("install", "install.sql.j2"):
        header = env.get_template("install.sql.j2").render()
    body = "\n".join(render_feature(env, feat) for feat in manifest.features)
    return header.rstrip() + "\n\n" + body


def render_control(manifest: Manifest = MANIFEST) -> str:
    env = make_env("extension", manifest)
    with rendering("control", "control.j2"):
        return env.get_template("control.j2").render()


def standalone_name(manifest: Manifest = MANIFEST) -> str:
    return f"pgmq-standalone--{manifest.version}.sql"


def render_all(manifest: Manifest = MANIFEST) -> dict[str, str]:
    """Every file under extension/, keyed by file name, in a stable order."""
    return {
        "pgmq.control": render_control(manifest),
        f"pgmq--{manifest.version}.sql": render_install(manifest, "extension"),
        standalone_name(manifest): render_install(manifest, "standalone"),
    }


def diff_outputs(outdir: Path, files: Mapping[str, str]) -> list[str]:
    """Names of files that are missing, stale, or unexpected in outdir."""
    problems = []
    for name, text in files.items():
        path = outdir / name
        if not path.exists():
            problems.append(f"missing: {name}")
        elif path.read_text() != text:
            problems.append(f"differs: {name}")
    frozen = {f"pgmq--{v}.sql" for v in MANIFEST.released}
    for path in sorted(outdir.glob("*")):
        if path.name not in files and path.name not in frozen and not _is_upgrade(path.name):
            problems.append(f"unexpected: {path.name}")
    return problems


def _is_upgrade(name: str) -> bool:
    return name.startswith("pgmq--") and name.count("--") == 2


def write_outputs(outdir: Path, files: Mapping[str, str]) -> list[str]:
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = outdir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(name)
    return written
