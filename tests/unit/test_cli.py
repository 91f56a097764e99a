"""The click CLI, through click's runner (no server)."""

from __future__ import annotations

import shutil

from pgmq_build import cli, reference, surface
from pgmq_build.manifest import MANIFEST
from tests.helpers import run_cli


def test_version():
    result = run_cli("--version")
    assert result.exit_code == 0 and MANIFEST.version in result.output


def test_generate_into_a_directory_then_up_to_date(tmp_path):
    first = run_cli("generate", "--out", str(tmp_path))
    assert first.exit_code == 0, first.output
    assert (tmp_path / "pgmq.control").exists()
    assert (tmp_path / f"pgmq--{MANIFEST.version}.sql").exists()
    assert (tmp_path / f"pgmq-standalone--{MANIFEST.version}.sql").exists()
    again = run_cli("generate", "--out", str(tmp_path))
    assert again.exit_code == 0 and "up to date" in again.output


def test_check_passes_on_the_committed_tree():
    result = run_cli("check")
    assert result.exit_code == 0, result.output


def test_check_fails_when_extension_is_stale(tmp_path, monkeypatch):
    run_cli("generate", "--out", str(tmp_path))
    sql = tmp_path / f"pgmq--{MANIFEST.version}.sql"
    sql.write_text(sql.read_text() + "-- hand edit\n")
    monkeypatch.setattr(cli, "extension_dir", lambda: tmp_path)
    result = run_cli("check")
    assert result.exit_code == 1
    assert "differs" in result.output and "stale" in result.output


def test_generate_writes_the_api_listing_and_check_fails_when_it_is_stale(tmp_path, monkeypatch):
    committed, listing = surface.listing_path(), tmp_path / "api.txt"
    monkeypatch.setattr(surface, "listing_path", lambda: listing)
    pages = shutil.copytree(reference.reference_dir(), tmp_path / "reference")  # nothing to write
    monkeypatch.setattr(reference, "reference_dir", lambda: pages)
    first = run_cli("generate")  # extension/ is up to date: only the listing is written
    assert first.exit_code == 0 and first.output == f"wrote {listing}\n", first.output
    assert listing.read_text() == committed.read_text()
    assert run_cli("check").exit_code == 0
    listing.write_text(listing.read_text().replace("queue_name text", "queue text", 1))
    stale = run_cli("check")
    assert stale.exit_code == 1 and "differs: api.txt" in stale.output and "stale" in stale.output


def test_lint_clean_on_the_committed_tree():
    result = run_cli("lint")
    assert result.exit_code == 0, result.output
    assert "lint clean" in result.output


def test_lint_reports_a_bad_file(tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE FUNCTION pgmq.nope() RETURNS int LANGUAGE sql AS 'SELECT 1';\n")
    result = run_cli("lint", str(bad))
    assert result.exit_code == 1
    assert "PGMQ" in result.output


def test_explain_known_and_unknown():
    ok = run_cli("explain", "pgmq001")
    assert ok.exit_code == 0 and ok.output.startswith("PGMQ001:")
    bad = run_cli("explain", "PGMQ999")
    assert bad.exit_code == 1 and "unknown rule" in bad.output


def test_install_without_pg_config_is_a_clear_error():
    result = run_cli("install", "--pg-config", "/nonexistent/pg_config")
    assert result.exit_code == 1
    assert "pg_config not found" in result.output


def test_install_standalone_needs_dsn():
    result = run_cli("install", "--standalone")
    assert result.exit_code == 1 and "--dsn" in result.output


def test_install_unreachable_server_is_a_clear_error():
    result = run_cli("install", "--standalone", "--dsn", "host=127.0.0.1 port=1 user=x dbname=x connect_timeout=2")
    assert result.exit_code == 1
    assert "cannot connect to the server" in result.output
