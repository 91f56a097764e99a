"""The security model page (docs/concepts/security-model.md, README "Security" before the docs
site) names every SECURITY DEFINER routine the manifest allows, and lists no
other routine among them."""

import re
from pathlib import Path

from pgmq_build.manifest import ROUTINES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "security-model.md"


def security_section() -> str:
    return PAGE.read_text()


def test_security_lists_every_definer_routine():
    section = security_section()
    definers = {p.name for p in ROUTINES if p.definer_reason}
    assert len(definers) >= 18
    missing = sorted(n for n in definers if f"`{n}`" not in section)
    assert not missing, f"the security model page does not name these SECURITY DEFINER routines: {missing}"


def test_the_list_names_only_definer_routines():
    section = security_section()
    listing = section[section.index("goes through small SECURITY DEFINER routines"):]
    listing = listing[:listing.index("A test holds this list")]
    named = set(re.findall(r"`(_?[a-z_]+)`", listing)) & {p.name for p in ROUTINES}
    assert named == {p.name for p in ROUTINES if p.definer_reason}
