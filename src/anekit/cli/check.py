"""`anekit check MODEL --target T`: where every node of a model runs on a chip, and why."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from anekit.cli import check_numerics
from anekit.cli.common import (
    add_shape_option,
    add_target_option,
    aligned_lines,
    existing_model_file,
    parse_shapes,
    print_json,
)

EXIT_CPU_FALLBACK = 3
EXIT_CANNOT_SAVE = 2  # bad input: the model uses an op anekit cannot emit
COLUMNS = ("node", "op", "placement", "layer", "reason")
_STYLES = {"ane": "green", "cpu": "red", "folded": "cyan", "removed": "dim"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="show where every op of a model runs on a chip (engine, CPU, folded)"
    )
    p.add_argument("model", help="an ONNX model file")
    add_target_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--strict",
        action="store_true",
        help=f"exit with status {EXIT_CPU_FALLBACK} when anything runs on the CPU",
    )
    add_shape_option(p)
    check_numerics.add_arguments(p)
    check_numerics.add_remedy_options(p)
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
    if args.json:
        print_json(report if numerics is None else {**report, "numerics": numerics})
    else:
        render(report, compiled.summary_line())
        if report.get("estimate"):  # the cost model: one line for this target
            print(report["estimate"]["summary"])
        if numerics is not None:
            check_numerics.render(numerics, model=args.model)
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


def render(report: Mapping[str, Any], summary: str, file: Any = None) -> None:
    """Print the per-node table and the summary (a rich table when rich is installed)."""
    out = file or sys.stdout
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        _render_plain(report, summary, out)
        return
    table = Table(title=f"anekit check: target {report['target']}", title_justify="left")
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in report["ops"]:
        style = _STYLES.get(row["placement"])
        table.add_row(*(str(row[c] or "") for c in COLUMNS), style=style)
    console = Console(file=out, width=max(120, Console(file=out).width))
    console.print(table)
    console.print(summary, highlight=False)


def _render_plain(report: Mapping[str, Any], summary: str, out: Any) -> None:
    rows = [[str(r[c] or "") for c in COLUMNS] for r in report["ops"]]
    print(f"target {report['target']}", file=out)
    for line in aligned_lines(COLUMNS, rows):
        print(line, file=out)
    print(summary, file=out)
