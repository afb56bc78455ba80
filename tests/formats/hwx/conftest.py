"""Fixtures for the .hwx reader tests: every real Apple .hwx file, decoded once per session."""

from __future__ import annotations

import pytest

from anekit.formats import hwx

from .helpers import HWX_FILES


@pytest.fixture(scope="session")
def decoded() -> dict[str, hwx.HwxFile]:
    return {path.stem: hwx.read(path) for path in HWX_FILES}
