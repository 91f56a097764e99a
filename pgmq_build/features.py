"""Which features use which: computed from the rendered install script, so that the manifest's
``Feature.uses`` can be checked rather than believed (tests/unit/test_features.py).

A feature *uses* another when its SQL (statements and routine bodies) names an object the other
creates. Features are not separable: the extension installs all of them, in manifest order, and
several use each other (core's read path uses delivery's settings and rules, delivery uses
core's helpers). ``uses`` documents those edges for a reader; it orders nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECTION = re.compile(r"^-- -+ feature: (\w+)\s*$", re.MULTILINE)
_CREATE = re.compile(
    r"^CREATE (?:OR REPLACE )?(?:UNLOGGED )?(?:FUNCTION|PROCEDURE|TABLE|VIEW|TYPE|SEQUENCE|DOMAIN) "
    r"(?:IF NOT EXISTS )?{schema}\.(\w+)", re.MULTILINE)


def sections(script: str) -> dict[str, str]:
    """The install script's text per feature (its "-- ---- feature: <name>" parts)."""
    marks = list(_SECTION.finditer(script))
    return {m.group(1): script[m.end():(marks[i + 1].start() if i + 1 < len(marks) else len(script))]
            for i, m in enumerate(marks)}


def uses(script: str, schema: str) -> Mapping[str, set[str]]:
    """feature -> the other features whose objects its SQL names."""
    parts = sections(script)
    create = re.compile(_CREATE.pattern.format(schema=re.escape(schema)), re.MULTILINE)
    owner: dict[str, str] = {}
    for feature, text in parts.items():
        for name in create.findall(text):
            owner.setdefault(name, feature)
    named = re.compile(rf"\b{re.escape(schema)}\.(\w+)")
    return {feature: {owner[n] for n in named.findall(text) if n in owner} - {feature}
            for feature, text in parts.items()}
