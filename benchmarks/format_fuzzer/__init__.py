"""The mutation fuzzer behind benchmarks/fuzz_formats.py: the engine and one module per reader family."""

from __future__ import annotations

import os
from pathlib import Path


def _fixtures() -> Path:
    """$ANEKIT_FIXTURES, else the shared/fixtures folder beside this checkout, else /work/shared."""
    if os.environ.get("ANEKIT_FIXTURES"):
        return Path(os.environ["ANEKIT_FIXTURES"])
    beside = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
    return beside if beside.is_dir() else Path("/work/shared/fixtures")


FIXTURES = _fixtures()
