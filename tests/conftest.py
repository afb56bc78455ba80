"""Settings of the whole test suite."""

from __future__ import annotations

import os

from anekit.passes.pipeline import VERIFY_PASSES_ENV

# every compile in the suite validates the graph after each pass, so a pass that leaves an
# invalid graph fails the test that compiled it (set before any test runs; subprocesses
# started by tests inherit it)
os.environ.setdefault(VERIFY_PASSES_ENV, "1")
