"""`anekit check --numerics`: fp16 overflow, underflow and precision findings, per layer."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from anekit.cli.common import parse_feeds, print_table
from anekit.errors import InputError

COLUMNS = ("kind", "layer", "nodes", "finding", "remedy")
_STYLES = {"overflow": "red", "underflow": "magenta", "precision": "yellow"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--numerics",
        action="store_true",
        help="run the model on the fp16 simulator and report overflow, underflow to zero "
        "and precision lost against fp32, per layer, with remedies",
    )


def analyse(compiled: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """The numerics report as a dict, or None without --numerics."""
    if not args.numerics:
        if args.inputs or args.input:
            raise InputError("--input and --inputs are used by --numerics", hint="add --numerics")
        return None
    from anekit import numerics

    given = parse_feeds(args)
    feeds = dict(numerics.check_feeds(compiled.graph, given)) if given else None
    return numerics.analyse(compiled, feeds).as_dict()


def render(report: dict[str, Any], file: Any = None, fmt: str = "plain") -> None:
    out = file or sys.stdout
    rows = [
        [f["kind"], f["layer"], ", ".join(f["nodes"]), f["detail"], f["remedy"]]
        for f in report["findings"]
    ]
    title = f"fp16 numerics on {report['target']} ({report['inputs']} inputs)"
    if report["sim_error"]:
        print(f"the simulator could not run the model: {report['sim_error']}", file=out)
    if not rows:
        print(f"{title}: no overflow, underflow or precision loss found", file=out)
        return
    styles = [_STYLES.get(f["kind"]) for f in report["findings"]]
    print_table(title, COLUMNS, rows, out, fmt=fmt, styles=styles)
