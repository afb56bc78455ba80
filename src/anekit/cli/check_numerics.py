"""`anekit check --numerics`: fp16 overflow, underflow and precision findings, per layer."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from anekit.cli.common import parse_feeds, print_table
from anekit.errors import InputError

COLUMNS = ("kind", "layer", "nodes", "finding", "remedy")
_STYLES = {
    "overflow": "red", "underflow": "magenta", "precision": "yellow", "cancellation": "yellow",
}  # fmt: skip
EXIT_NUMERICS_HAZARD = 4  # `check --numerics` found a hazard to the answer


def add_remedy_options(p: argparse.ArgumentParser) -> None:
    """The options that carry out the remedies `check --numerics` prints (check and compile)."""
    p.add_argument(
        "--cpu",
        action="append",
        default=[],
        metavar="NODE[,NODE]",
        help="keep these nodes (the model's node names, as `check` lists them) in fp32 on "
        "the CPU: the remedy for values fp16 cannot hold (repeatable)",
    )
    p.add_argument(
        "--scale-input",
        action="append",
        default=[],
        metavar="NAME=FACTOR",
        help="multiply an input by FACTOR (e.g. 2^-12) inside the program and absorb it "
        "exactly in the layers after it, so large inputs fit fp16 (repeatable)",
    )


def remedy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The compile options the remedy flags ask for."""
    names = [n for spec in args.cpu for n in spec.split(",") if n.strip()]
    options: dict[str, Any] = {"cpu_nodes": tuple(names)} if names else {}
    scales = dict(parse_scale(spec) for spec in args.scale_input)
    if scales:
        options["input_scales"] = scales
    return options


def parse_scale(spec: str) -> tuple[str, float]:
    """``NAME=FACTOR``; the factor a number or a power of two written 2^K."""
    name, eq, text = spec.partition("=")
    try:
        base, caret, power = text.partition("^")
        factor = float(base) ** int(power) if caret else float(text)
    except ValueError:
        factor = math.nan
    if not (name and eq) or not (math.isfinite(factor) and factor > 0):
        raise InputError(
            f"--scale-input '{spec}' is not NAME=FACTOR with a positive factor",
            hint="e.g. --scale-input audio=2^-12",
        )
    return name, factor


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--numerics",
        action="store_true",
        help="find fp16 hazards: value ranges from the weights and the inputs' ranges "
        "(no data needed), then runs on the fp16 simulator against fp32; overflow, underflow, "
        "cancellation and precision loss by node, each with the option that fixes it; exit "
        f"status {EXIT_NUMERICS_HAZARD} when a hazard is found",
    )
    p.add_argument(
        "--input-range",
        action="append",
        default=[],
        metavar="NAME=LO:HI",
        help="the values an input takes, for --numerics (repeatable; default: from its dtype "
        "and name: audio/waveform/pcm inputs int16 scale, images 0..255 or 0..1 as the model "
        "rescales them, other floats standard normal)",
    )


def analyse(compiled: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """The numerics report as a dict, or None without --numerics."""
    if not args.numerics:
        if args.inputs or args.input or args.input_range:
            raise InputError(
                "--input, --inputs and --input-range are used by --numerics", hint="add --numerics"
            )
        return None
    from anekit import numerics
    from anekit.numerics.ranges import parse_input_ranges

    ranges = parse_input_ranges(args.input_range)
    given = parse_feeds(args)
    feeds = dict(numerics.check_feeds(compiled.graph, given)) if given else None
    return numerics.analyse(compiled, feeds, ranges).as_dict()


def render(
    report: dict[str, Any], file: Any = None, fmt: str = "plain", model: str = "MODEL"
) -> None:
    out = file or sys.stdout
    rows = [
        [f["kind"] + ("" if f["severity"] == "hazard" else " (info)"), f["layer"],
         ", ".join(f["nodes"]), f["detail"], f["remedy"]]
        for f in report["findings"]
    ]  # fmt: skip
    title = f"fp16 numerics on {report['target']} ({report['inputs']} inputs)"
    for name, r in report["input_ranges"].items():
        print(f"input '{name}': {r['lo']:g}..{r['hi']:g} ({r['why']})", file=out)
    if report["sim_error"]:
        print(f"the simulator could not run the model: {report['sim_error']}", file=out)
    if not rows:
        print(f"{title}: no overflow, underflow or precision loss found", file=out)
        return
    styles = [_STYLES.get(f["kind"]) for f in report["findings"]]
    print_table(title, COLUMNS, rows, out, fmt=fmt, styles=styles)
    options = list(dict.fromkeys(
        f["option"] for f in report["findings"] if f["severity"] == "hazard" and f["option"]
    ))  # fmt: skip
    for option in options:
        print(f"fix: anekit compile {model} -t {report['target']} {option}", file=out)
