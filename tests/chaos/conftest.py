"""The chaos tests start throwaway servers of their own (chaos.runner): the server
must see the current extension files, as for the session server of tests/conftest.py."""

from __future__ import annotations

import pytest

from tests.conftest import _ensure_extension_files


@pytest.fixture(scope="session", autouse=True)
def extension_files() -> None:
    _ensure_extension_files()
