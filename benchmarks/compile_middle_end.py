"""Benchmark: middle-end compile time of GPT-2 124M, per chip (goal: under 1 s).

Writes ``benchmarks/results/compile_middle_end.json``.

How it measures:
- the model is the zoo's ``gpt2_124m`` (``transformers.GPT2Config()`` sizes, 12 layers x
  768, seeded random weights, 64 tokens, torch's dynamo exporter), built once and cached
  by ``tests/zoo.py``; it is imported with ``anekit.from_onnx`` before any timing (the ONNX
  import is excluded, as the issue asks);
- for every chip in the database: ``anekit.compile(graph, chip)`` (the whole pipeline:
  canonicalize ... segment, plus building the per-node report rows) ``--repeat`` times
  after one warm-up; the median wall time is reported with each pass's share;
- the compiled engine graph of one chip is run once on the reference backend against the
  imported graph (same logits within fp32 rounding and the tanh-GELU approximation).

    python benchmarks/compile_middle_end.py [--repeat 5] [--chips m1,m4]

``python benchmarks/compile_middle_end.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "compile_middle_end.json"
GOAL_SECONDS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chips", default="", help="comma-separated chips (default: all)")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:  # a small ONNX model of the zoo, one chip, one compile
        args.repeat, args.chips = 1, args.chips or "m4"

    sys.path.insert(0, str(REPO))
    import numpy as np
    from tests import zoo

    import anekit
    from anekit import targets

    case = zoo.load("light_squeezenet" if args.smoke else "gpt2_124m")
    start = time.perf_counter()
    graph = anekit.from_onnx(case.path)
    import_seconds = time.perf_counter() - start
    feeds = dict(case.feeds)
    chips = [targets.get(c) for c in args.chips.split(",") if c] or targets.all_targets()

    anekit.compile(graph, chips[0])  # warm-up: first-use imports and registries
    per_chip = []
    for chip in chips:
        times, cm = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            cm = anekit.compile(graph, chip)
            times.append(time.perf_counter() - start)
        passes: dict[str, float] = {}
        for record in cm.pass_log:
            passes[record.name] = passes.get(record.name, 0.0) + record.seconds
        per_chip.append(
            {
                "target": chip.name,
                "seconds": [round(t, 4) for t in times],
                "median_seconds": round(statistics.median(times), 4),
                "pass_seconds": {k: round(v, 4) for k, v in passes.items()},
                "summary": dict(cm.summary),
                "summary_line": cm.summary_line(),
                "layer_types": _layer_types(cm),
            }
        )
        print(f"{chip.name:8s} {statistics.median(times):.3f} s  {cm.summary_line()}", flush=True)

    check = anekit.compile(graph, "m4")
    want = graph.run(feeds)
    got = check.run(feeds)
    agreement = {}
    for name, ref in want.items():
        out = got[name]
        agreement[name] = {
            "max_abs_error": float(np.abs(out - ref).max()),
            "max_relative_error": float(np.abs(out - ref).max() / np.abs(ref).max()),
            "top1_agreement": float(np.mean(out.argmax(-1) == ref.argmax(-1))),
        }
    medians = [c["median_seconds"] for c in per_chip]
    result = {
        "benchmark": "compile_middle_end",
        "model": {
            "name": "GPT-2 124M (zoo gpt2_124m: GPT2Config() sizes, seeded weights, 64 tokens, dynamo)",
            "nodes": len(graph.nodes),
            "parameters": graph.parameter_count(),
            "import_seconds_excluded": round(import_seconds, 3),
        },
        "goal_seconds": GOAL_SECONDS,
        "worst_median_seconds": max(medians),
        "goal_met": max(medians) < GOAL_SECONDS,
        "repeat": args.repeat,
        "chips": per_chip,
        "reference_check_m4": agreement,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": metadata.version("numpy"),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out = results_path(RESULTS, args.smoke)
    write_json(out, result)
    print(f"worst median {max(medians):.3f} s (goal {GOAL_SECONDS} s) -> {out}")
    return 0


def _layer_types(cm) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in cm.graph.nodes:
        if node.op == "ane_layer" and cm.placement[node.name].device == "ane":
            kind = node.attrs["layer_type"]
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


if __name__ == "__main__":
    sys.exit(main())
