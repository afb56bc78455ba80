"""The mutation fuzzer behind benchmarks/fuzz_formats.py: the engine and one module per reader family."""

from __future__ import annotations

from pathlib import Path

# Apple's files ship with the repository, as the tests' data
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "apple"
