"""Benchmark: `anekit estimate --target all` on every model of the zoo (wall time and the bound).

Writes ``benchmarks/results/estimate_zoo.json``. Goal: every model estimated for all 17
chips in seconds (the time is dominated by one middle-end compile per chip generation).

    python benchmarks/estimate_zoo.py [--model NAME ...] [--no-124m]

``python benchmarks/estimate_zoo.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the zoo lives in tests/

from tests import zoo  # noqa: E402

from anekit import targets  # noqa: E402
from anekit.compiler import estimate_model  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "estimate_zoo.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", action="append", help="zoo model names (default: all)")
    parser.add_argument("--no-124m", action="store_true", help="skip GPT-2 124M")
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_smoke(parser)
    args = parser.parse_args(argv)
    names = args.model or (
        ["light_squeezenet"] if args.smoke else zoo.model_names(benchmarks=not args.no_124m)
    )
    chosen = targets.all_targets()
    rows = []
    for name in names:
        case = zoo.load(name)  # built and cached outside the timing
        start = time.perf_counter()
        estimates = estimate_model(case.path, chosen)
        seconds = time.perf_counter() - start
        row = {
            "model": name,
            "seconds_all_targets": round(seconds, 3),
            "estimates": {
                e.target: {
                    "total_ms": round(e.total_ms, 4),
                    "bottleneck": e.bottleneck,
                    "dispatches": e.dispatches,
                    "partitions": e.partitions,
                    "peak_onchip_bytes": e.peak_onchip_bytes,
                }
                for e in estimates
            },
        }
        rows.append(row)
        m4 = row["estimates"]["m4"]
        print(
            f"{name:22s} {seconds:6.2f} s for {len(chosen)} chips; m4 {m4['total_ms']:.3f} ms "
            f"({m4['bottleneck']}-bound, {m4['dispatches']} dispatches)",
            flush=True,
        )
    report = {
        "benchmark": "estimate_zoo",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor_count": os.cpu_count(),
        "models": rows,
    }
    write_json(results_path(args.output, args.smoke), report, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
