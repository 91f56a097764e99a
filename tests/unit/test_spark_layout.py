"""The Spark connector's layout rule, checked without pyspark: the modules that hold its SQL side
and its option parsing import no pyspark at module level, neither directly nor through a sibling
module, so that they stay usable (and testable) without a Spark session."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SPARK = Path(__file__).resolve().parents[2] / "pgmq_build" / "spark"
PYSPARK_FREE = ("claims", "connections", "copybinary", "errors", "offsets", "options", "profiling",
                "publishing", "ranges", "snapshot", "staging", "stream_events")


def _module_imports(name: str) -> list[str]:
    """Every module imported at the top level of pgmq_build/spark/<name>.py (function bodies are
    not run at import), relative ones as 'pgmq_build.spark.<x>'."""
    tree = ast.parse((SPARK / f"{name}.py").read_text())
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ["pgmq_build", "spark"][:max(0, 3 - node.level)] if node.level else []
            if node.level == 0:
                out.append(node.module or "")
            elif node.module:  # from .x import y, from ..x import y
                out.append(".".join([*base, node.module]))
            else:  # from . import x, y; from .. import x
                out += [".".join([*base, a.name]) for a in node.names]
    return out


def test_every_listed_module_exists():
    assert all((SPARK / f"{m}.py").is_file() for m in PYSPARK_FREE)
    assert not (SPARK / "_pg.py").exists()


@pytest.mark.parametrize("name", PYSPARK_FREE)
def test_module_imports_no_pyspark(name):
    imports = _module_imports(name)
    assert not [m for m in imports if m.split(".")[0] == "pyspark"], imports
    siblings = [m.rsplit(".", 1)[1] for m in imports if m.startswith("pgmq_build.spark.")]
    assert set(siblings) <= set(PYSPARK_FREE), f"{name} imports {siblings}"


def test_the_check_sees_a_pyspark_import():
    # the Spark-facing modules do import pyspark: the check would catch a slip
    assert "pyspark.sql.datasource" in _module_imports("stream")
    assert "pgmq_build.spark.batch" in _module_imports("stream")


def test_stream_segment_names_match_the_templates():
    """stream_events.SEGMENT_NAMES (the COPY path into a stream's current segment) is the
    modulus templates/_macros/stream.sql.j2 names segments with."""
    import re

    from pgmq_build.spark.stream_events import SEGMENT_NAMES

    macro = (SPARK.parents[1] / "templates" / "_macros" / "stream.sql.j2").read_text()
    (value,) = re.findall(r"\{% set SEGMENT_NAMES = (\d+) %\}", macro)
    assert int(value) == SEGMENT_NAMES
    assert "_format_table_name({{ name }}, 's') || '$' || (({{ seg }}) % {{ SEGMENT_NAMES }})::text" in macro
