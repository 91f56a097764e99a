"""The declared errors (pgmq_build/errors.py) against upstream's own SQL, and their rendering."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgmq_build import errors
from pgmq_build.errors import DECLARED, DeclarationError, raise_error
from pgmq_build.manifest import MAX_QUEUE_NAME


def upstream_sql() -> str:
    """Upstream's install script, shipped inside its Python client (a [test] dependency)."""
    pgmq = pytest.importorskip("pgmq")
    return (Path(pgmq.__file__).parent / "sql" / "pgmq.sql").read_text()


def upstream_raises() -> set[tuple[str, str]]:
    """(level, text) of every RAISE in upstream's script, as PostgreSQL reads the literals
    (standard_conforming_strings: '' is a quote, a backslash is itself)."""
    found = re.findall(r"RAISE\s+(EXCEPTION|WARNING|NOTICE)\s+'((?:[^']|'')*)'", upstream_sql())
    return {(level, text.replace("''", "'")) for level, text in found}


def test_every_upstream_raise_is_declared_exactly():
    declared = {(e.level, e.text) for e in DECLARED.values() if e.kind == "upstream"}
    assert declared == upstream_raises()


def test_upstream_entries_are_p0001_and_the_others_say_why():
    for key, entry in DECLARED.items():
        assert entry.level in errors.LEVELS, key
        assert entry.condition in errors.CONDITIONS, key
        assert entry.ours is None or entry.ours in errors.CONDITIONS, key
        if entry.kind == "upstream":
            assert entry.condition == "raise_exception" and not entry.hint and not entry.why, key
        elif entry.kind == "stand-in":
            assert entry.sqlstate == "P0001" and entry.why, key
        else:
            assert entry.kind in ("postgres", "refusal") and entry.why, key
            assert entry.sqlstate != "P0001" or entry.level != "EXCEPTION", key


def test_texts_are_unique_per_level():
    """PGMQ011 finds a message's declared classes by its text."""
    seen = [(e.level, e.text) for e in DECLARED.values()]
    assert len(seen) == len(set(seen))


def test_the_length_in_the_text_is_the_limit():
    assert f"maximum length is {MAX_QUEUE_NAME} characters" in DECLARED["name_too_long"].text


def test_rendering():
    assert raise_error("msgs_empty") == "RAISE EXCEPTION 'msgs cannot be NULL or empty';"
    assert raise_error("msgs_empty", own=True) == (
        "RAISE EXCEPTION 'msgs cannot be NULL or empty' USING ERRCODE = 'invalid_parameter_value';")
    assert raise_error("headers_length", "a", "b") == (
        "RAISE EXCEPTION 'headers array length (%) must match msgs array length (%)', a, b;")
    # a backslash: an E'' literal, which reads the same whatever standard_conforming_strings is
    assert raise_error("invalid_characters") == (
        "RAISE EXCEPTION E'queue name contains invalid characters: $, ;, --, or \\\\''';")
    assert raise_error("drop_missing", "queue_name") == "RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;"
    assert raise_error("queue_name_case_clash", "x", "y").endswith(
        "USING ERRCODE = 'duplicate_table', HINT = 'Queue tables are named in lower case, so names must "
        "differ in more than case.';")


@pytest.mark.parametrize("call", [
    lambda: raise_error("no_such_message"),
    lambda: raise_error("headers_length", "a"),
    lambda: raise_error("msgs_empty", "extra"),
    lambda: raise_error("premake", "x", own=True),  # no flavour of ours declared
])
def test_rendering_refuses_what_is_not_declared(call):
    with pytest.raises(DeclarationError):
        call()
