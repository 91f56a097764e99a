"""Rendering is pure, deterministic and matches the committed extension/."""

from __future__ import annotations

import jinja2
import pglast
import pytest

from pgmq_build import render
from pgmq_build.lint.sqlast import split_args, strip_defaults
from pgmq_build.manifest import MANIFEST
from pgmq_build.paths import extension_dir

GUARD = '\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit'


def test_render_is_deterministic():
    assert render.render_all() == render.render_all()


def test_committed_extension_matches_a_fresh_render():
    assert render.diff_outputs(extension_dir(), render.render_all()) == []


@pytest.mark.parametrize("target", render.TARGETS)
def test_each_target_parses(target):
    sql = render.render_install(MANIFEST, target).replace(GUARD, "")
    assert len(pglast.parse_sql(sql)) > 50


def test_targets_differ_only_where_policy_says():
    ext = render.render_install(MANIFEST, "extension")
    alone = render.render_install(MANIFEST, "standalone")
    assert GUARD in ext and GUARD not in alone
    assert "pg_extension_config_dump" in ext and "pg_extension_config_dump" not in alone
    assert "\nCREATE SCHEMA pgmq;" in alone and "\nCREATE SCHEMA" not in ext


@pytest.mark.parametrize("feature", MANIFEST.features, ids=lambda f: f.name)
def test_each_feature_renders_alone(feature):
    env = render.make_env("extension")
    text = render.render_feature(env, feature)
    assert pglast.parse_sql(text)


def test_unknown_target_rejected():
    with pytest.raises(ValueError, match="unknown target"):
        render.make_env("cloud")


def test_template_errors_name_the_template(tmp_path):
    (tmp_path / "features" / "core").mkdir(parents=True)
    (tmp_path / "features" / "core" / "bad.sql.j2").write_text("{{ undefined_thing }}")
    env = render.make_env("extension", path=tmp_path)
    feat = type(MANIFEST.features[0])("core", ("bad.sql.j2",), ())
    with pytest.raises(render.RenderError, match="core/bad.sql.j2"):
        render.render_feature(env, feat)


def test_control_file():
    control = render.render_control()
    assert f"default_version = '{MANIFEST.version}'" in control
    assert "schema = 'pgmq'" in control


def test_sql_literal_escapes_quotes():
    assert render.sql_literal("it's") == "'it''s'"


def test_identity_args_strip_defaults():
    args = "queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb"
    assert strip_defaults(args) == "queue_name text, vt integer, qty integer, conditional jsonb"
    assert render.make_env("extension").filters["identity_args"](args) == strip_defaults(args)
    assert split_args("a text DEFAULT 'x,y', b int") == ["a text DEFAULT 'x,y'", "b int"]


def test_diff_outputs_reports_stale_missing_and_unexpected(tmp_path):
    files = {"a.sql": "one", "b.sql": "two"}
    (tmp_path / "a.sql").write_text("changed")
    (tmp_path / "stray.sql").write_text("x")
    assert render.diff_outputs(tmp_path, files, released=()) == [
        "differs: a.sql", "missing: b.sql", "unexpected: stray.sql"]
    assert render.write_outputs(tmp_path, files) == ["a.sql", "b.sql"]
    assert render.write_outputs(tmp_path, files) == []


def test_strict_undefined_is_on():
    env = render.make_env("extension")
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ nope }}").render()
