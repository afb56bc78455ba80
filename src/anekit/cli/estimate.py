"""`anekit estimate MODEL --target T|all`: estimated latency per chip, where it is bound, the schedule."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anekit.cli.common import (
    add_command,
    add_format_option,
    add_shape_option,
    existing_model_file,
    output_format,
    parse_shapes,
    print_json,
    print_table,
)
from anekit.compiler import estimate_model
from anekit.targets import DEFAULT_TARGET

COLUMNS = (
    "target",
    "ms",
    "bound",
    "dispatches",
    "partitions",
    "peak on-chip",
    "ANE util",
    "CPU ms",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "estimate",
        help="estimate a model's latency on each chip, and what bounds it",
        description="Compile a model for each chip, schedule its engine segments under the "
        "on-chip budget and estimate its latency (compute, memory, dispatch and CPU time). "
        "'bound' names the largest of the compute, memory and dispatch times; 'ANE util' is "
        "the engine's achieved share of its peak compute over the engine's time, so a small "
        "model can be compute-bound at a low utilisation.",
        examples=[
            "anekit estimate examples/digits_cnn.onnx --target all",
            "anekit estimate examples/digits_cnn.onnx -t m1,m4 --json --detail",
        ],
        json_help="print the estimates as JSON",
    )
    p.add_argument("model", help="an ONNX model file")
    p.add_argument(
        "--target",
        "-t",
        default=DEFAULT_TARGET,
        help="a chip name or engine code, several separated by commas, or 'all' "
        f"(default: {DEFAULT_TARGET})",
    )
    add_format_option(p)
    p.add_argument("--detail", action="store_true", help="with --json: every layer and tensor")
    p.add_argument("--plot", metavar="OUT.png", help="draw the partition timeline and pressure")
    add_shape_option(p)
    p.set_defaults(func=run)


def resolve_targets(spec: str) -> list[Any]:
    """'all', one name, or a comma-separated list of names (each checked, in the given order)."""
    from anekit import targets

    if spec.strip().lower() == "all":
        return targets.all_targets()
    chosen = [targets.get(name) for name in spec.split(",") if name.strip()]
    return list({t.name: t for t in chosen}.values())


def run(args: argparse.Namespace) -> int:
    chosen = resolve_targets(args.target)  # an unknown target fails before the model loads
    path = existing_model_file(args.model)
    if args.plot:
        from anekit.cost.plot import require_matplotlib

        require_matplotlib()  # fail before the (slow) compile, not after
    estimates = estimate_model(path, chosen, parse_shapes(args.shape))
    if args.plot:
        from anekit.cost.plot import plot_estimates

        plot_estimates(estimates, Path(args.plot), title=path.name)
    fmt = output_format(args)
    if fmt == "json":
        print_json({"model": str(path), "estimates": [e.as_dict(args.detail) for e in estimates]})
    else:
        render(estimates, path.name, fmt=fmt)
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def _row(est: Any) -> list[str]:
    ane = [s for s in est.segments if s.device == "ane"]
    ane_time = sum(s.time_s for s in ane)
    util = sum(s.flops for s in ane) / ane_time / ane[0].peak_flops_per_s if ane_time else 0.0
    cpu = sum(s.cpu_s for s in est.segments)
    return [
        est.target,
        f"{est.total_ms:.3f}",
        est.bottleneck,
        str(est.dispatches),
        str(est.partitions),
        f"{est.peak_onchip_bytes / 2**20:.2f} MiB",
        f"{util:.1%}",
        f"{cpu * 1e3:.3f}",
    ]


def render(estimates: Sequence[Any], name: str, file: Any = None, fmt: str = "plain") -> None:
    """One row per chip."""
    out = file or sys.stdout
    rows = [_row(e) for e in estimates]
    right = [c for c in COLUMNS if c not in ("target", "bound")]
    print_table(f"anekit estimate: {name}", COLUMNS, rows, out, fmt=fmt, right=right)
