"""Where Apple's real files are, for every test that reads them: `tests/data/apple/`.

They ship with the repository (see the README there for each file's origin and licence),
so a clone anywhere runs the same tests; a missing folder is an error, never a skip.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "data" / "apple"
if not (FIXTURES / "hwx").is_dir():
    raise RuntimeError(f"Apple's fixture files are missing from {FIXTURES}; restore tests/data/apple")
