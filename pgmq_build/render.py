"""Pure rendering: (templates, manifest, target) -> SQL text. No I/O besides reading templates."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import jinja2
from pglast import ast, parse_sql

from . import headers, upgrade
from . import history as history_
from .errors import DeclarationError, raise_error
from .lint import sqlast
from .lint.script import routine_statements
from .manifest import (
    MANIFEST,
    MAX_QUEUE_NAME,
    UPSTREAM_KEPT,
    Feature,
    Manifest,
    Release,
    version_key,
)
from .paths import extension_dir, templates_dir
from .scriptnames import (  # noqa: F401 (render.X callers)
    bridge_names,
    install_name,
    standalone_name,
    upgrade_name,
    upstream_step_name,
)

TARGETS = ("extension", "standalone")


class RenderError(Exception):
    """A template failed to render; names the feature and template."""


def sql_literal(text: str) -> str:
    """A standard-conforming SQL string literal (templates only quote static text)."""
    return "'" + str(text).replace("'", "''") + "'"


def prose(text: str) -> str:
    """Text wrapped over lines in a template (a {% set %} block), as one line: white space folded."""
    return " ".join(str(text).split())


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
    env.filters["identity_args"] = sqlast.strip_defaults
    env.filters["sql_literal"] = sql_literal
    env.filters["prose"] = prose
    # Globals, not render context: macros imported with {% from %} only see globals.
    env.globals.update(
        H=headers.H,
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


# The line that opens each feature's part of the install script (surface.py finds features by it).
FEATURE_HEADER = "-- " + "-" * 64 + " feature: {name}\n"
FEATURE_HEADER_RE = re.compile("^" + re.escape(FEATURE_HEADER.split("{")[0]) + r"(\w+)$", re.M)


def render_feature(env: jinja2.Environment, feature: Feature) -> str:
    parts = [FEATURE_HEADER.format(name=feature.name)]
    for tpl in feature.templates:
        name = f"features/{feature.name}/{tpl}"
        with rendering(feature.name, tpl):
            text = env.get_template(name).render()
        parts.append(f"-- {name}\n{text.strip()}\n")
    return "\n".join(parts)


def render_install(manifest: Manifest = MANIFEST, target: str = "extension", path: Path | None = None) -> str:
    env = make_env(target, manifest, path)
    with rendering("install", "install.sql.j2"):
        header = env.get_template("install.sql.j2").render()
    body = "\n".join(render_feature(env, feat) for feat in manifest.features)
    return header.rstrip() + "\n\n" + body


def render_control(manifest: Manifest = MANIFEST, path: Path | None = None) -> str:
    env = make_env("extension", manifest, path)
    with rendering("control", "control.j2"):
        return env.get_template("control.j2").render()


# ----------------------------------------------------------------------------- file names

def step_dir(old: str, new: str) -> str:
    """The step's hand-written templates, relative to templates/."""
    return f"upgrades/{old}--{new}"


STEP_TEMPLATES = ("pre.sql.j2", "post.sql.j2")


# ----------------------------------------------------------------------------- released versions

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def released_scripts(released: tuple[Release, ...]) -> dict[str, tuple[str, str]]:
    """Every frozen file: name -> (the version that released it, its sha256)."""
    return {name: (r.version, digest) for r in released for name, digest in r.scripts.items()}


def frozen_problems(outdir: Path, released: tuple[Release, ...], history: Path | None = None) -> list[str]:
    """Released scripts that are missing from outdir and history/extension/ (``history``) or
    differ from their recorded sha256 (where each belongs: history.misplaced)."""
    problems = []
    for name, (version, digest) in released_scripts(released).items():
        path = history_.find(name, outdir, history)
        if not path.exists():
            problems.append(f"missing released script: {name} (released in {version}; released "
                            "scripts are frozen: restore it from git)")
        elif sha256(path) != digest:
            problems.append(f"altered released script: {name} (released in {version}; its sha256 is "
                            f"{sha256(path)}, manifest.RELEASED records {digest}; released scripts "
                            "are frozen: restore it from git and make the change in a new version)")
    return problems


def release_problems(outdir: Path, manifest: Manifest = MANIFEST, templates: Path | None = None) -> list[str]:
    """What makes the manifest's releases inconsistent with extension/ and templates/upgrades/.

    Checked before rendering: a released version is never rendered again, every release lists
    its install scripts (and its upgrade scripts from the previous release), the released
    scripts are unchanged, and every upgrade step has its pre/post templates."""
    problems = []
    versions = manifest.versions
    if manifest.version in manifest.released_versions:
        problems.append(f"version {manifest.version} is released (listed in manifest.RELEASED): a "
                        "released version cannot be regenerated; bump the version (manifest.VERSION)")
    elif list(versions) != sorted(versions, key=version_key) or len(set(versions)) != len(versions):
        problems.append(f"versions out of order: manifest.RELEASED must list released versions "
                        f"oldest first, all older than VERSION ({', '.join(versions)})")
    previous = None
    for release in manifest.released:
        want = [install_name(release.version, t) for t in TARGETS]
        if previous is not None:
            want += [upgrade_name(previous, release.version, t) for t in TARGETS]
        for name in want:
            if name not in release.scripts:
                problems.append(f"release {release.version} does not record the sha256 of {name} "
                                "in manifest.RELEASED")
        previous = release.version
    problems += frozen_problems(outdir, manifest.released)
    base = templates or templates_dir()
    if manifest.upstream:
        for name in STEP_TEMPLATES:
            if not (base / UPSTREAM_STEP / name).is_file():
                problems.append(f"missing upgrade step template: templates/{UPSTREAM_STEP}/{name} "
                                f"(the step from upstream PGMQ {', '.join(manifest.upstream)})")
    for old, new in manifest.steps:
        for name in STEP_TEMPLATES:
            if not (base / step_dir(old, new) / name).is_file():
                problems.append(f"missing upgrade step template: templates/{step_dir(old, new)}/{name} "
                                f"(every step {old} -> {new} needs pre.sql.j2 and post.sql.j2; "
                                "they may be empty)")
    return problems


def read_released(outdir: Path, name: str, manifest: Manifest = MANIFEST) -> str:
    """A released script's text (from outdir or history/extension/), after checking it is the
    one that was released."""
    problems = frozen_problems(outdir, tuple(r for r in manifest.released if name in r.scripts))
    if name not in released_scripts(manifest.released):
        problems.append(f"{name} is not a released script")
    if problems:
        raise RenderError("; ".join(problems))
    return history_.find(name, outdir).read_text()


# ----------------------------------------------------------------------------- upgrade scripts

def generated_steps(manifest: Manifest = MANIFEST) -> tuple[tuple[str, str], ...]:
    """The steps rendered from templates: the one into the current version. Earlier steps went
    out with a release and are frozen like its install scripts."""
    return tuple(s for s in manifest.steps if s[1] == manifest.version)


# pg_advisory_xact_lock key of the standalone upgrade ("pgmq" in ASCII).
UPGRADE_LOCK_KEY = 0x70676D71


def render_upgrade(manifest: Manifest, old: str, new: str, target: str, old_sql: str, new_sql: str,
                   path: Path | None = None) -> str:
    """One upgrade step's script: its pre template, the routines that changed between the two
    install scripts (see upgrade.py), its post template."""
    env = make_env(target, manifest, path)
    env.globals.update(version=new, from_version=old, to_version=new)
    where = step_dir(old, new)
    parts = {}
    for name in STEP_TEMPLATES:
        with rendering(where, name):
            parts[name.split(".")[0]] = env.get_template(f"{where}/{name}").render()
    try:
        before, after = upgrade.parse_script(old_sql), upgrade.parse_script(new_sql)
        plan = upgrade.plan(before, after)
    except upgrade.UpgradeError as exc:
        raise RenderError(f"{upgrade_name(old, new, target)}: {exc}") from exc
    routines = before.routines | after.routines
    with rendering("upgrade", "upgrade.sql.j2"):
        return env.get_template("upgrade.sql.j2").render(
            step_dir=where, old_name=install_name(old, target), new_name=install_name(new, target),
            pre=parts["pre"], post=parts["post"], routines=plan.sql,
            changes=list(upgrade.describe(plan, routines.values())), lock_key=UPGRADE_LOCK_KEY)


# ----------------------------------------------------------------------------- from upstream PGMQ

UPSTREAM_STEP = "upgrades/upstream"


def _kept_object(node: ast.Node, schema: str) -> tuple[str, str] | None:
    """(kind, name) when the statement creates (or config-dumps) an object of UPSTREAM_KEPT."""
    if isinstance(node, ast.CompositeTypeStmt) and node.typevar.schemaname == schema:
        found = ("type", node.typevar.relname)
    elif isinstance(node, ast.CreateStmt) and node.relation.schemaname == schema:
        found = ("table", node.relation.relname)
    elif isinstance(node, ast.IndexStmt) and node.relation.schemaname == schema:
        found = ("index", node.idxname)
    elif isinstance(node, ast.SelectStmt) and len(node.targetList or ()) == 1:
        call = node.targetList[0].val
        if not (sqlast.is_call(call, "pg_extension_config_dump") and call.args
                and isinstance(call.args[0], ast.A_Const)):
            return None
        found = ("config_dump", call.args[0].val.sval.removeprefix(f"{schema}."))
        return found if found[1] in UPSTREAM_KEPT["table"] else None
    else:
        return None
    return found if found[1] in UPSTREAM_KEPT.get(found[0], ()) else None


def without_kept(text: str, schema: str) -> tuple[str, set[tuple[str, str]]]:
    """``text`` (rendered SQL) without the statements that make an object upstream already has
    (UPSTREAM_KEPT), each replaced by a comment; and the (kind, name) pairs removed."""
    out, pos, removed = [], 0, set()
    for raw in parse_sql(text):
        kept = _kept_object(raw.stmt, schema)
        if kept is None:
            continue
        start, end = sqlast.statement_bounds(text, raw)
        end = text.index(";", end) + 1
        out += [text[pos:start], f"-- (upstream's {kept[0].replace('_', ' ')} of {schema}.{kept[1]} is kept)"]
        pos = end
        removed.add(kept)
    return "".join(out) + text[pos:], removed


def upstream_body(manifest: Manifest = MANIFEST, target: str = "extension", path: Path | None = None) -> str:
    """Our install script's objects (every feature, in order) that upstream PGMQ does not have:
    the whole install script but the statements that make the objects of UPSTREAM_KEPT."""
    env = make_env(target, manifest, path)
    parts, removed = [], set()
    for feat in manifest.features:
        text, gone = without_kept(render_feature(env, feat), manifest.schema)
        parts.append(text)
        removed |= gone
    wanted = {(kind, name) for kind, names in UPSTREAM_KEPT.items() for name in names}
    if target == "extension":
        wanted |= {("config_dump", name) for name in UPSTREAM_KEPT["table"]}
    if removed != wanted:
        missing = ", ".join(f"{k} {n}" for k, n in sorted(wanted - removed))
        raise RenderError(f"the install script does not create what manifest.UPSTREAM_KEPT lists: {missing}")
    return "\n".join(parts)


def upstream_routines(manifest: Manifest, install_sql: str) -> list[upgrade.Routine]:
    """Our routines that upstream PGMQ has (manifest.UPSTREAM_CONTRACT: same identities), in
    the install script's order."""
    keys = {(manifest.schema, *s.key) for s in sqlast.parse_signatures(manifest.contract)}
    out = [r for r in (upgrade.routine_of(node, "") for _, node in routine_statements(install_sql))
           if r.key in keys]
    if len(out) != len(keys):
        raise RenderError(f"the install script creates {len(out)} of the {len(keys)} upstream routines")
    return out


def upstream_globals(env: jinja2.Environment, manifest: Manifest) -> None:
    """What the templates of the step from upstream and of the bridges see: from_version (the
    bridge's version name), to_version, upstream_versions ("1.13.0 or 1.13.1", for messages)."""
    env.globals.update(from_version=manifest.bridge, to_version=manifest.version,
                       upstream_versions=" or ".join(manifest.upstream),
                       bridges=bridge_names(manifest))


def render_upstream_upgrade(manifest: Manifest, target: str, install_sql: str, path: Path | None = None) -> str:
    """The script that turns upstream PGMQ (any of manifest.upstream, by the name manifest.bridge)
    into this version: templates/upstream.sql.j2 around the upstream step's pre template,
    upstream_body() and its post template. ``install_sql``: this version's install script (for
    the routines that replace upstream's)."""
    env = make_env(target, manifest, path)
    upstream_globals(env, manifest)
    context = {"upstream_routines": upstream_routines(manifest, install_sql), "kept": UPSTREAM_KEPT}
    parts = {}
    for name in STEP_TEMPLATES:
        with rendering(UPSTREAM_STEP, name):
            parts[name.split(".")[0]] = env.get_template(f"{UPSTREAM_STEP}/{name}").render(**context)
    body = upstream_body(manifest, target, path)
    with rendering("upgrade", "upstream.sql.j2"):
        return env.get_template("upstream.sql.j2").render(
            step_dir=UPSTREAM_STEP, new_name=install_name(manifest.version, target),
            pre=parts["pre"], post=parts["post"], body=body, lock_key=UPGRADE_LOCK_KEY)


def render_bridge(manifest: Manifest, upstream: str, path: Path | None = None) -> str:
    """pgmq--<upstream>--<bridge>.sql (templates/bridge.sql.j2): a comment, no SQL. Its text names
    no version of ours, so every release renders it the same."""
    env = make_env("extension", manifest, path)
    upstream_globals(env, manifest)
    with rendering("bridge", "bridge.sql.j2"):
        return env.get_template("bridge.sql.j2").render(
            upstream=upstream, step=upgrade_name(manifest.bridge, "<version>"))


def render_all(manifest: Manifest = MANIFEST, frozen: Path | None = None,
               path: Path | None = None) -> dict[str, str]:
    """Every generated file under extension/, keyed by file name, in a stable order: the control
    file, the current version's install scripts, the upgrade scripts into it (the step from
    upstream PGMQ among them) and the bridges from upstream's versions. ``frozen``: the
    directory holding the released scripts (default: the checkout's extension/)."""
    if manifest.version in manifest.released_versions:
        raise RenderError(f"version {manifest.version} is released: a released version cannot be "
                          "regenerated; bump the version (manifest.VERSION)")
    files = {"pgmq.control": render_control(manifest, path)}
    for target in TARGETS:
        files[install_name(manifest.version, target)] = render_install(manifest, target, path)
    for old, new in generated_steps(manifest):
        for target in TARGETS:
            old_sql = read_released(frozen or extension_dir(), install_name(old, target), manifest)
            files[upgrade_name(old, new, target)] = render_upgrade(
                manifest, old, new, target, old_sql, files[install_name(new, target)], path)
    if manifest.upstream:
        for target in TARGETS:
            files[upstream_step_name(target, manifest)] = render_upstream_upgrade(
                manifest, target, files[install_name(manifest.version, target)], path)
        for upstream, name in zip(manifest.upstream, bridge_names(manifest), strict=True):
            files[name] = render_bridge(manifest, upstream, path)
    return files


def stale_files(outdir: Path, files: Mapping[str, str], shown: Callable[[str], str] = str) -> list[str]:
    """`missing: NAME` / `differs: NAME` for each of `files` that outdir lacks or holds another
    text of (`shown`: how a name is written)."""
    problems = []
    for name, text in files.items():
        path = outdir / name
        if not path.exists():
            problems.append(f"missing: {shown(name)}")
        elif path.read_text() != text:
            problems.append(f"differs: {shown(name)}")
    return problems


def diff_outputs(outdir: Path, files: Mapping[str, str], released: tuple[Release, ...] | None = None) -> list[str]:
    """Problems of outdir against a fresh render: generated files missing or stale, released
    scripts missing or altered (they are frozen), and unexpected files."""
    released = MANIFEST.released if released is None else released
    problems = stale_files(outdir, files)
    problems += frozen_problems(outdir, released)
    problems += history_.misplaced(released, outdir)
    frozen = released_scripts(released)
    for path in sorted(outdir.glob("*")):
        if path.name not in files and path.name not in frozen:
            problems.append(f"unexpected: {path.name}")
    return problems


def write_outputs(outdir: Path, files: Mapping[str, str]) -> list[str]:
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = outdir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(name)
    return written
