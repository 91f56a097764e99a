"""The template layout (issue 31, "Templates by concept"): macros shared between templates live in
templates/_macros/, one file per concept that says what it holds in its first lines, and a feature's
template imports from there only, never from another template of features/ (a feature template
defines its feature's objects: importing from one renders its neighbour's dependencies into the
reader's head and ties two features' files together)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jinja2 import nodes

from pgmq_build import render
from pgmq_build.paths import templates_dir

TEMPLATES = templates_dir()
MACROS = TEMPLATES / "_macros"


def imported_templates(source: str) -> list[str]:
    """Every template that `source` imports ({% from "x" import ... %} and {% import "x" as y %},
    wherever they stand, macros included), read with Jinja's own parser."""
    tree = render.make_env("extension").parse(source)
    found = []
    for node in tree.find_all((nodes.FromImport, nodes.Import)):
        if not isinstance(node.template, nodes.Const):
            raise AssertionError(f"import of a computed template name: {node.template!r}")
        found.append(node.template.value)
    return found


def foreign_imports(source: str) -> list[str]:
    """The imports of `source` that do not come from _macros/."""
    return [t for t in imported_templates(source) if not t.startswith("_macros/")]


def concept_comment(source: str) -> str | None:
    """The Jinja comment a file opens with (its text), or None when it opens with anything else."""
    text = source.lstrip()
    if not text.startswith("{#"):
        return None
    end = text.find("#}")
    return text[2:end].strip("- \n") if end > 0 else None


def _feature_templates() -> list[Path]:
    return sorted((TEMPLATES / "features").rglob("*.j2"))


def test_the_checks_see_what_they_check():
    # Both forms of import and an import inside a macro are found; _macros/ is not foreign.
    sample = ('{% from "_macros/ddl.sql.j2" import function %}\n'
              '{% import "features/core/functions/send.sql.j2" as send %}\n'
              '{% macro m() %}{% from "features/fifo/functions/fifo_index.sql.j2" import group_key %}'
              '{{ group_key() }}{% endmacro %}\n')
    assert foreign_imports(sample) == ["features/core/functions/send.sql.j2",
                                       "features/fifo/functions/fifo_index.sql.j2"]
    assert concept_comment("{#- Names: of queues. -#}\n{% macro x() %}{% endmacro %}") == "Names: of queues."
    assert concept_comment('{% from "_macros/ddl.sql.j2" import function %}\n{#- late -#}') is None
    # the tree holds feature templates that import from _macros/ (an empty walk would pass)
    assert sum(len(imported_templates(p.read_text())) for p in _feature_templates()) > 50


@pytest.mark.parametrize("path", _feature_templates(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_feature_templates_import_shared_macros_only(path: Path):
    assert foreign_imports(path.read_text()) == [], (
        f"{path.relative_to(TEMPLATES)} imports another template of features/: move the shared "
        "macro into a _macros/ file named for its concept")


@pytest.mark.parametrize("path", sorted(MACROS.glob("*.sql.j2")), ids=lambda p: p.name)
def test_each_macros_file_opens_with_its_concept(path: Path):
    comment = concept_comment(path.read_text())
    assert comment is not None, f"_macros/{path.name} must open with a comment saying what concept it holds"
    assert len(comment.split()) >= 8, f"_macros/{path.name}'s opening comment is too short: {comment!r}"
    # shared macros depend on shared macros only, never on a feature
    assert foreign_imports(path.read_text()) == []


def test_every_imported_macros_file_exists():
    # an import of a file this layout moved away fails here by name, not in the middle of a render
    missing = set()
    for path in [*_feature_templates(), *MACROS.glob("*.sql.j2"), *(TEMPLATES / "upgrades").rglob("*.j2")]:
        for target in imported_templates(path.read_text()):
            if not (TEMPLATES / target).is_file():
                missing.add(f"{path.relative_to(TEMPLATES)} -> {target}")
    assert not missing, sorted(missing)

