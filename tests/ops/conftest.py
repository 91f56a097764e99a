"""Fixtures of the operations tests: the admin commands run in-process against the test database."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli


@pytest.fixture
def ops(dsn):
    """ops(*args, input=None) -> click Result of `pgmq-build ARGS --dsn <test database>`."""

    def _ops(*args: str, input: str | None = None):
        return run_cli(*args, "--dsn", dsn, input=input)

    return _ops


@pytest.fixture
def ops_json(ops):
    """ops_json(*args, code=0) -> the JSON document of `pgmq-build ARGS --json` (exit code checked)."""

    def _ops_json(*args: str, code: int = 0, input: str | None = None):
        result = ops(*args, "--json", input=input)
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)

    return _ops_json
