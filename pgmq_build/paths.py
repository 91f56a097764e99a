"""Where templates/, extension/ and docs/ live: the checkout, or the copies shipped in the wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parent


def _pick(name: str) -> Path:
    in_repo = _REPO / name
    if in_repo.is_dir() and (_REPO / "pyproject.toml").exists():
        return in_repo
    return _PKG / "_data" / name


def templates_dir() -> Path:
    return _pick("templates")


def extension_dir() -> Path:
    return _pick("extension")


def docs_dir() -> Path:
    """docs/: the generated API listing (api.txt)."""
    return _pick("docs")


def repo_root() -> Path:
    return _REPO


def history_dir() -> Path:
    """history/extension/: released scripts no upgrade path needs any more (older install
    scripts, superseded steps from upstream PGMQ). Frozen like extension/'s released scripts;
    in the checkout only (`make install` and the wheel ship extension/ alone)."""
    return _REPO / "history" / "extension"
