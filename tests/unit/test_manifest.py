"""The manifest is consistent with itself and with the templates on disk."""

from __future__ import annotations

from collections import Counter

from pgmq_build.manifest import IDENTIFIER_BUDGET, LONGEST_PREFIX, MANIFEST, MAX_QUEUE_NAME
from pgmq_build.paths import templates_dir


def test_no_duplicate_functions():
    dupes = [k for k, n in Counter(f.key for f in MANIFEST.functions).items() if n > 1]
    assert dupes == []


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


def test_requirements_are_known_and_ordered():
    seen: set[str] = set()
    for feat in MANIFEST.features:
        assert set(feat.requires) <= seen, feat.name
        seen.add(feat.name)


def test_identifier_budget():
    assert MAX_QUEUE_NAME == 47
    assert len(LONGEST_PREFIX) + MAX_QUEUE_NAME == IDENTIFIER_BUDGET


def test_security_definer_needs_a_reason():
    for f in MANIFEST.functions:
        assert not f.security_definer or f.definer_reason, f.name


def test_upstream_surface_of_the_core():
    names = {f.name for f in MANIFEST.functions if f.upstream}
    assert {"create", "send", "send_batch", "read", "read_with_poll", "pop", "delete", "archive",
            "set_vt", "metrics", "metrics_all", "purge_queue", "drop_queue", "list_queues"} <= names
    assert sum(1 for f in MANIFEST.functions if f.name == "send") == 6
    assert sum(1 for f in MANIFEST.functions if f.name == "send_batch") == 6
    assert sum(1 for f in MANIFEST.functions if f.name == "set_vt") == 4


def test_upstream_surface_is_exactly_76_functions():
    """Upstream PGMQ 1.13 has 76 functions in schema pgmq (helpers included); ours add to it."""
    upstream = [f for f in MANIFEST.functions if f.upstream]
    assert len(upstream) == 76
    overloads = Counter(f.name for f in upstream)
    assert overloads["send"] == 6 and overloads["send_batch"] == 6 and overloads["send_batch_topic"] == 6
    assert overloads["send_topic"] == 3 and overloads["set_vt"] == 4 and overloads["list_topic_bindings"] == 2
    assert len(overloads) == 52  # distinct names
    internal = {name for name in overloads if name.startswith("_")}
    assert internal == {"_validate_batch_params", "_send_batch", "_get_pg_partman_schema",
                        "_get_pg_partman_major_version", "_ensure_pg_partman_installed",
                        "_extension_exists", "_belongs_to_pgmq", "_get_partition_col",
                        "_create_fifo_index_if_not_exists"}
