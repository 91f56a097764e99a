"""Bad input to the other `pgmq-build` commands (install, migrate, demo, generate): usage errors
exit 2 naming the option (and the environment variable it came from), other failures exit 1
with one line; never a traceback, and nothing is touched."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pgmq_build.cli import main

BAD_DSNS = ["nonsense===", "postgres://[::1", "'unterminated", "host=x port"]


@pytest.mark.parametrize("command", [["install", "--standalone"], ["migrate"], ["demo"], ["worker"]])
def test_every_dsn_option_is_parsed_first(command):
    for dsn in BAD_DSNS:
        result = CliRunner().invoke(main, [*command, "--dsn", dsn])
        assert result.exit_code == 2, (command, dsn, result.output)
        assert "Invalid value for '--dsn': not a libpq connection string or URI" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_bad_dsn_from_the_environment_names_the_variable():
    result = CliRunner().invoke(main, ["demo"], env={"PGMQ_BUILD_DEMO_DSN": "x y"})
    assert result.exit_code == 2 and "(from the environment variable PGMQ_BUILD_DEMO_DSN)" in result.output


def test_install_files_only_refuses_a_database(tmp_path):
    for extra in (["--dsn", "host=x"], ["--standalone"]):
        result = CliRunner().invoke(main, ["install", "--files-only", "--pg-config",
                                           str(tmp_path / "none"), *extra])
        assert result.exit_code == 2 and "--files-only" in result.output


def test_generate_into_an_unwritable_place_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["generate", "--out", str(blocker / "sub")])
    assert result.exit_code == 1 and result.output.startswith("error: cannot write into")
    assert "Traceback" not in result.output
