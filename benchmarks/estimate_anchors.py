"""The cost model against published measurements: prints the README table, writes JSON.

Writes ``benchmarks/results/estimate_anchors.json`` and prints a Markdown table (estimate
vs published figure, with each source) for the README.

    python benchmarks/estimate_anchors.py

``python benchmarks/estimate_anchors.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import add_smoke, results_path, write_json

from anekit.cost import default_calibration
from anekit.cost.workloads import anchor_estimate

RESULTS = Path(__file__).resolve().parent / "results" / "estimate_anchors.json"
UNITS = {"tflops": "TFLOP/s", "us": "us", "ms": "ms"}


def describe(workload: dict) -> str:
    kind = workload["kind"]
    if kind == "conv_stack":
        return (
            f"{workload['depth']} x conv {workload['kernel']}x{workload['kernel']} "
            f"{workload['channels']} ch on {workload['height']}x{workload['width']}"
        )
    if kind == "conv":
        stride = f" s{workload['stride']}" if workload.get("stride", 1) != 1 else ""
        return (
            f"conv {workload['kernel']}x{workload['kernel']}{stride} {workload['channels']} ch "
            f"on {workload['height']}x{workload['width']}"
        )
    if kind == "matmul":
        return f"matmul {workload['m']}x{workload['k']} @ {workload['k']}x{workload['n']}"
    if kind == "elementwise":
        return f"{workload['op']} {tuple(workload['shape'])}"
    if kind == "pool":
        return f"{workload['pool']} (1, {workload['channels']}, {workload['height']}, {workload['width']})"
    return kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_smoke(parser)  # every anchor is one estimate: the smoke run is the whole run
    args = parser.parse_args(argv)
    cal = default_calibration()
    rows = []
    print("| workload | chip | published | estimate | error | role | source |")
    print("|---|---|---|---|---|---|---|")
    for a in cal.anchors:
        value, est = anchor_estimate(a)
        low, high = a.published
        published = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        unit = UNITS[a.metric]
        source = a.source.split(":")[0]
        print(
            f"| {describe(dict(a.workload))} | {a.target} | {published} {unit} | "
            f"{value:.3g} {unit} | {a.error(value):.0%} | {a.role} | {source} |"
        )
        rows.append(
            {
                "id": a.id,
                "target": a.target,
                "metric": a.metric,
                "published": [low, high],
                "estimate": value,
                "error": a.error(value),
                "bottleneck": est.bottleneck,
                "role": a.role,
                "source": a.source,
            }
        )
    write_json(
        results_path(args.output, args.smoke),
        {"benchmark": "estimate_anchors", "anchors": rows},
        sort_keys=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
