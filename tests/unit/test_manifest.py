"""The manifest is consistent with itself, with the templates on disk and with upstream's
contract; docs/api.txt reads back."""

from __future__ import annotations

from collections import Counter

from pgmq_build import features, render, surface
from pgmq_build.lint.sqlast import parse_signature, parse_signatures
from pgmq_build.manifest import IDENTIFIER_BUDGET, LONGEST_PREFIX, MANIFEST, MAX_QUEUE_NAME
from pgmq_build.paths import templates_dir


def test_no_duplicate_policy_entries():
    dupes = [k for k, n in Counter(p.key for p in MANIFEST.routines).items() if n > 1]
    assert dupes == []


def test_every_routine_has_a_policy_and_every_policy_a_routine():
    entries = surface.current()
    assert [e.signature.line for e in entries if e.policy is None] == []
    assert {p.name for p in MANIFEST.routines} == {e.name for e in entries}


def test_an_overload_entry_names_an_overloaded_routine():
    """Policy(name, arg_types) is for an overload whose policy differs from its name's others."""
    keys = Counter(e.name for e in surface.current())
    for p in MANIFEST.routines:
        if p.arg_types is not None:
            assert keys[p.name] > 1 and (p.name, p.arg_types) in {e.signature.key for e in surface.current()}


def test_every_template_exists():
    for feat in MANIFEST.features:
        for tpl in feat.templates:
            assert (templates_dir() / "features" / feat.name / tpl).is_file(), (feat.name, tpl)


def test_every_feature_template_is_listed():
    listed = {(f.name, t) for f in MANIFEST.features for t in f.templates}
    on_disk = {(p.relative_to(templates_dir() / "features").parts[0],
                str(p.relative_to(templates_dir() / "features" / p.relative_to(templates_dir() / "features").parts[0])))
               for p in (templates_dir() / "features").rglob("*.j2")}
    assert on_disk == listed


def test_features_use_what_the_manifest_says():
    """Feature.uses is the truth: the features whose objects each feature's SQL names."""
    script = render.render_all()[f"pgmq--{MANIFEST.version}.sql"]
    found = features.uses(script, MANIFEST.schema)
    assert set(found) == {f.name for f in MANIFEST.features}
    for feat in MANIFEST.features:
        assert found[feat.name] == set(feat.uses), feat.name
    # core names only delivery's settings, rules and claims; nothing else leaks into it
    assert found["core"] == {"delivery"}


def test_feature_sections_and_uses_are_computed_from_the_sql():
    script = ("-- ---- feature: a\nCREATE FUNCTION s.f() ...\nCREATE TABLE s.t (x int);\n"
              "-- ---- feature: b\nCREATE FUNCTION s.g() AS $$ SELECT s.f() FROM s.t $$;\n"
              "-- ---- feature: c\nSELECT s.g(), s.h();\n")
    assert set(features.sections(script)) == {"a", "b", "c"}
    assert features.uses(script, "s") == {"a": set(), "b": {"a"}, "c": {"b"}}


def test_identifier_budget():
    assert MAX_QUEUE_NAME == 47
    assert len(LONGEST_PREFIX) + MAX_QUEUE_NAME == IDENTIFIER_BUDGET


def test_only_an_unpinned_routine_may_commit():
    for p in MANIFEST.routines:
        assert not p.commits or p.unpinned_reason, p.name


def test_upstream_surface_of_the_core():
    ours = surface.current()
    names = {e.name for e in ours if e.upstream}
    assert {"create", "send", "send_batch", "read", "read_with_poll", "pop", "delete", "archive",
            "set_vt", "metrics", "metrics_all", "purge_queue", "drop_queue", "list_queues"} <= names
    overloads = Counter(e.name for e in ours)
    assert (overloads["send"], overloads["send_batch"], overloads["set_vt"]) == (6, 6, 4)


def test_upstream_contract_is_exactly_76_functions():
    """Upstream PGMQ 1.13 has 76 functions in schema pgmq (helpers included); ours add to it."""
    upstream = parse_signatures(MANIFEST.contract)
    assert len(upstream) == len({s.key for s in upstream}) == 76
    assert {s.kind for s in upstream} == {"function"}
    overloads = Counter(s.name for s in upstream)
    assert overloads["send"] == 6 and overloads["send_batch"] == 6 and overloads["send_batch_topic"] == 6
    assert overloads["send_topic"] == 3 and overloads["set_vt"] == 4 and overloads["list_topic_bindings"] == 2
    assert len(overloads) == 52  # distinct names
    internal = {name for name in overloads if name.startswith("_")}
    assert internal == {"_validate_batch_params", "_send_batch", "_get_pg_partman_schema",
                        "_get_pg_partman_major_version", "_ensure_pg_partman_installed",
                        "_extension_exists", "_belongs_to_pgmq", "_get_partition_col",
                        "_create_fifo_index_if_not_exists"}
    assert sum(e.upstream for e in surface.current()) == 76


def test_the_listing_reads_back():
    rows = surface.read_listing()
    assert [(e.upstream, e.signature.line) for e in surface.current()] == rows
    for _, line in rows:
        assert parse_signature(line).line == line
