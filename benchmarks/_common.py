"""What the benchmark scripts share: writing their results JSON atomically (temp file, rename),
the machine they ran on, the --smoke flag and a median timer."""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_json(path: Path, doc: Any, *, sort_keys: bool = False) -> None:
    """Write ``doc`` as indented JSON with a final newline; a failed write leaves no file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=2, sort_keys=sort_keys)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def machine(load_before: tuple[float, float, float]) -> dict[str, Any]:
    """The machine and its load average before and after a run (shared machines are noisy)."""
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "note": "a shared 2-core machine; wall-clock times are noisy",
    }


SMOKE_HELP = (
    "a quick run (seconds, tiny sizes, the same code paths) that checks the script still "
    "works; its JSON goes to NAME.smoke.json (git-ignored) or into $ANEKIT_SMOKE_DIR, never "
    "over the real results"
)


def add_smoke(parser: Any) -> None:
    """The ``--smoke`` option every benchmark has."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def results_path(path: Path, smoke: bool) -> Path:
    """Where a run writes ``path``: itself, or for a smoke run its ``.smoke`` twin."""
    if not smoke:
        return path
    folder = os.environ.get("ANEKIT_SMOKE_DIR")
    return (Path(folder) if folder else path.parent) / f"{path.stem}.smoke{path.suffix}"


def median_us(fn: Callable[[], Any], repeat: int, warm_up: int = 1) -> float:
    """The median of ``repeat`` calls of ``fn`` in microseconds, after ``warm_up`` calls not
    timed."""
    for _ in range(warm_up):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6
