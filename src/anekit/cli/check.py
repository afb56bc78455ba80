"""`anekit check MODEL --target T`: where every node of a model runs on a chip, and why."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from anekit.cli import check_numerics
from anekit.cli.common import (
    add_command,
    add_feeds_options,
    add_format_option,
    add_shape_option,
    add_target_option,
    existing_model_file,
    output_format,
    parse_shapes,
    print_json,
    print_table,
)

EXIT_CPU_FALLBACK = 3
EXIT_CANNOT_SAVE = 2  # bad input: the model uses an op anekit cannot emit
COLUMNS = ("node", "op", "placement", "layer", "reason")
_STYLES = {"ane": "green", "cpu": "red", "folded": "cyan", "removed": "dim"}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "check",
        help="show where every op of a model runs on a chip (engine, CPU, folded)",
        description="Compile a model for a chip and show, node by node, whether it runs on the "
        "engine, on the CPU or is folded away, and why; with --numerics, also run it in fp16 "
        "and report overflow, underflow and lost precision per layer.",
        examples=[
            "anekit check examples/digits_cnn.onnx --target m1",
            "anekit check examples/digits_cnn.onnx -t m4 --strict --format plain",
            "anekit check examples/digits_cnn.onnx -t m4 --numerics --input image=examples/digit.npy",
        ],
        json_help="print the report as JSON",
    )
    p.add_argument("model", help="an ONNX model file")
    add_target_option(p)
    add_format_option(p)
    p.add_argument(
        "--strict",
        action="store_true",
        help=f"exit with status {EXIT_CPU_FALLBACK} when anything runs on the CPU",
    )
    add_shape_option(p)
    check_numerics.add_arguments(p)
    check_numerics.add_remedy_options(p)
    add_feeds_options(p, "inputs for --numerics (default: ranges, then synthetic inputs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit import targets
    from anekit.compiler import compile as compile_model

    target = targets.get(args.target)  # an unknown target fails before the model loads
    path = existing_model_file(args.model)
    compiled = compile_model(
        path, target, input_shapes=parse_shapes(args.shape) or None,
        **check_numerics.remedy_options(args),
    )  # fmt: skip
    report = compiled.report
    numerics = check_numerics.analyse(compiled, args)
    fmt = output_format(args)
    if fmt == "json":
        print_json(report if numerics is None else {**report, "numerics": numerics})
    else:
        render(report, compiled.summary_line(), fmt=fmt)
        if report.get("estimate"):  # the cost model: one line for this target
            print(report["estimate"]["summary"])
        if numerics is not None:
            check_numerics.render(numerics, fmt=fmt, model=args.model)
    errors = [d for d in compiled.diagnostics if d.severity == "error"]
    if errors:  # nodes code generation cannot emit: `anekit compile` would fail on them
        for d in errors:
            print(str(d), file=sys.stderr)
        return EXIT_CANNOT_SAVE
    if args.strict and report["summary"]["cpu_ops"]:
        return EXIT_CPU_FALLBACK
    if numerics is not None and numerics["hazards"]:
        return check_numerics.EXIT_NUMERICS_HAZARD
    return 0


def render(report: Mapping[str, Any], summary: str, file: Any = None, fmt: str = "plain") -> None:
    """Print the per-node table and the summary."""
    out = file or sys.stdout
    rows = [[str(r[c] or "") for c in COLUMNS] for r in report["ops"]]
    styles = [_STYLES.get(r["placement"]) for r in report["ops"]]
    title = f"anekit check: target {report['target']}"
    print_table(title, COLUMNS, rows, out, fmt=fmt, styles=styles)
    print(summary, file=out)
