"""Where Apple's real files (../shared/fixtures) are, for every test that reads them.

Looked up in order: $ANEKIT_FIXTURES, the `shared/fixtures` folder beside this checkout,
then /work/shared/fixtures. A missing folder is an error, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]


def _locate() -> Path:
    candidates = [
        Path(os.environ["ANEKIT_FIXTURES"]) if os.environ.get("ANEKIT_FIXTURES") else None,
        _REPO.parent / "shared" / "fixtures",
        Path("/work/shared/fixtures"),
    ]
    for path in candidates:
        if path is not None and (path / "hwx").is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates if p is not None)
    raise RuntimeError(f"Apple's fixture files were not found (tried {tried}); set ANEKIT_FIXTURES")


FIXTURES = _locate()
