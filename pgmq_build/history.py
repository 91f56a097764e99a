"""Which released scripts ship and which go to history/extension/.

extension/ holds what an upgrade can use: the current version's install scripts, the chain of
steps from each of the newest UPGRADE_WINDOW released versions (manifest.py) into the current
one, the step
from upstream PGMQ (pgmq--1.13.x--<current>.sql), each in both forms, and the extension's
bridges from upstream's versions to 1.13.x (pgmq--1.13.0--1.13.x.sql: they name no version of
ours, so they stay whether a release recorded them or not). Every other released script (older
install scripts, steps from upstream into an older version: 2.11.0 and older shipped one per
upstream version, pgmq--1.13.0--2.11.0.sql; the retired steps from releases older than the
window, which `make install-retired` installs) is kept, frozen by its sha256 (manifest.RELEASED),
in history/extension/, where the tests and the renderer still find it. After a release (its
record in RELEASED, VERSION bumped), `pgmq-build generate` moves what the release superseded
there: move_superseded()."""

from __future__ import annotations

from pathlib import Path

from .manifest import MANIFEST, Release
from .paths import extension_dir, history_dir
from .scriptnames import bridge_names, upgrade_name

TARGETS = ("extension", "standalone")


Released = tuple[Release, ...]


def _steps(released: Released) -> set[str]:
    return {upgrade_name(a.version, b.version, t) for a, b in zip(released, released[1:], strict=False) for t in TARGETS}


def chain(released: Released = MANIFEST.released, window: int = MANIFEST.window) -> set[str]:
    """The released upgrade steps between consecutive released versions of the window (the
    newest ``window`` released versions): they stay in extension/ (the step into the current
    version is generated, not released)."""
    return _steps(released[-window:])


def retired(released: Released = MANIFEST.released, window: int = MANIFEST.window) -> set[str]:
    """The released steps from versions older than the window: in history/extension/."""
    return _steps(released) - chain(released, window)


def released_names(released: Released = MANIFEST.released) -> set[str]:
    return {name for r in released for name in r.scripts}


def historical(released: Released = MANIFEST.released, window: int = MANIFEST.window) -> set[str]:
    """Released scripts that no upgrade path needs: their place is history/extension/. The
    bridges are needed by every release's step from upstream (a release may record them)."""
    return released_names(released) - chain(released, window) - set(bridge_names())


def find(name: str, outdir: Path | None = None, history: Path | None = None) -> Path:
    """A script of extension/ or history/extension/ (the one that exists; extension/'s if neither)."""
    for base in (outdir or extension_dir(), history or history_dir()):
        if (base / name).exists():
            return base / name
    return (outdir or extension_dir()) / name


def misplaced(released: Released = MANIFEST.released, outdir: Path | None = None,
              history: Path | None = None) -> list[str]:
    """Problems of placement: a superseded released script still in extension/, or a released
    step of the chain only in history/."""
    outdir, history = outdir or extension_dir(), history or history_dir()
    problems = []
    for name in sorted(historical(released)):
        if (outdir / name).exists():
            problems.append(f"superseded released script in extension/: {name} (no upgrade path needs it; "
                            "`pgmq-build generate` moves it to history/extension/)")
    for name in sorted(chain(released) & released_names(released)):
        if not (outdir / name).exists() and (history / name).exists():
            problems.append(f"released upgrade step in history/extension/ only: {name} (the chain of "
                            "upgrades needs it in extension/: move it back)")
    return problems


def move_superseded(released: Released = MANIFEST.released, outdir: Path | None = None,
                    history: Path | None = None) -> list[str]:
    """Move the released scripts that no upgrade path needs from extension/ to history/ (done
    by `pgmq-build generate` after a release); the names moved. The caller checked their sha256."""
    outdir, history = outdir or extension_dir(), history or history_dir()
    moved = []
    for name in sorted(historical(released)):
        src = outdir / name
        if src.exists():
            history.mkdir(parents=True, exist_ok=True)
            dest = history / name
            if dest.exists() and dest.read_bytes() != src.read_bytes():
                raise FileExistsError(f"{dest} exists and differs from {src}")
            src.replace(dest)
            moved.append(name)
    return moved
