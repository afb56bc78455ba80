"""Loads benchmarks/fuzz_formats.py (a script, not a package module) for the format fuzz tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_formats.py"


def load_fuzz_benchmark() -> ModuleType:
    """A fresh import of the fuzz benchmark script."""
    spec = importlib.util.spec_from_file_location("fuzz_formats_under_test", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building classes
    spec.loader.exec_module(module)
    return module
