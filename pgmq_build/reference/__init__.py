"""The generated reference pages, docs/reference/*.md: the SQL routines (from the rendered
install script), the command line (from click), the Python client and worker (from their
docstrings) and the Spark options (from their declaration). `pgmq-build generate` writes them,
`pgmq-build check` fails when one is stale, tests/unit/test_reference.py checks each is complete.
"""

from __future__ import annotations

from pathlib import Path

from ..manifest import MANIFEST, Manifest
from ..paths import docs_dir


def reference_dir() -> Path:
    return docs_dir() / "reference"


def pages(install_sql: str, manifest: Manifest = MANIFEST) -> dict[str, str]:
    """file name (in docs/reference/) -> its text."""
    from .. import client, worker
    from ..cli import main
    from . import cli, python, spark, sql

    return {
        "sql.md": sql.page(install_sql, manifest),
        "cli.md": cli.page(main),
        "python.md": python.page((client, worker)),
        "spark-options.md": spark.page(),
    }


def problems(texts: dict[str, str], where: Path | None = None) -> list[str]:
    """Why the pages in ``where`` (default: docs/reference/) are not ``texts``."""
    from ..render import stale_files

    where = where or reference_dir()
    return stale_files(where, texts, lambda name: f"reference/{name} (in {where.parent})")
