"""README.md is a front door (at most 300 lines), and every relative link of README.md and
CONTRIBUTING.md reaches a file (mkdocs --strict checks the links inside docs/ itself)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_fits_on_a_few_screens():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def links(name: str) -> list[str]:
    text = re.sub(r"```.*?```", "", (ROOT / name).read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans show links, they are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_relative_links_resolve(name):
    found = links(name)
    assert found, f"{name} links nowhere"
    broken = []
    for target in found:
        path, _, anchor = target.partition("#")
        dest = (ROOT / path) if path else ROOT / name
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest):
            broken.append(target)
    assert not broken, f"{name}: {broken}"


def slugs(page: Path) -> set[str]:
    """The anchors mkdocs makes of a page's headings (toc's default slugify)."""
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            out.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", m.group(1)).strip().lower()))
    return out


def test_the_readme_keeps_the_heading_error_hints_name():
    """The extension's error hints say README "Security": the README keeps that heading, which
    points to the security model page."""
    text = (ROOT / "README.md").read_text()
    assert "\n## Security\n" in text and "docs/concepts/security-model.md" in text
