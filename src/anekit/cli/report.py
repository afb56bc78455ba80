"""`anekit report MODEL -t m4 -o report.html`: one self-contained HTML page about a model."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from anekit.cli.common import (
    add_command,
    add_feeds_options,
    add_shape_option,
    add_target_option,
    existing_model_file,
    parse_feeds,
    parse_shapes,
    print_json,
)
from anekit.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "report",
        help="write one HTML page: graph placement, CPU fallbacks, estimates per chip, fp16 numerics",
        description="Compile a model and write one self-contained HTML page (no scripts, prints "
        "as is): the graph with each node's placement and reason, the CPU fallbacks, the "
        "per-layer estimate, timelines per chip and the fp16 numerics findings.",
        examples=[
            "anekit report examples/digits_cnn.onnx -t m4 -o report.html",
            "anekit report examples/digits_cnn.onnx -t m1 -o report.html --input image=examples/digit.npy",
        ],
        json_help="print what was written as JSON",
    )
    p.add_argument("model", help="an ONNX model file")
    add_target_option(p)
    p.add_argument("--output", "-o", required=True, help="the HTML file to write")
    p.add_argument(
        "--chips",
        default="m1,m2,m3,m4,m5",
        help="comma-separated chips for the timelines (default: m1,m2,m3,m4,m5)",
    )
    add_feeds_options(p, "inputs for the numerics section (default: synthetic standard-normal inputs)")
    p.add_argument("--no-numerics", action="store_true", help="leave out the fp16 numerics run")
    add_shape_option(p)
    p.set_defaults(func=run)


def _writable(path: Path) -> Path:
    """The output path, refusing to replace a file anekit did not write."""
    from anekit.report import GENERATOR

    if path.exists() or path.is_symlink():
        if not path.is_file() or path.is_symlink():
            raise InputError(f"'{path}' exists and is not a regular file", hint="choose another -o")
        with path.open("rb") as f:
            head = f.read(4096)
        if f'content="{GENERATOR}"'.encode() not in head:
            raise InputError(
                f"'{path}' exists and is not an anekit report; not overwriting it",
                hint="choose another -o or remove the file",
            )
    if not path.parent.is_dir():
        raise InputError(f"the folder of '{path}' does not exist")
    return path


def run(args: argparse.Namespace) -> int:
    from anekit import targets
    from anekit.report import build_report

    chips = [c.strip() for c in args.chips.split(",") if c.strip()]
    for name in [args.target, *chips]:
        targets.get(name)  # an unknown chip fails before the model loads
    out = _writable(Path(args.output))
    path = existing_model_file(args.model)
    feeds = parse_feeds(args) or None
    if feeds:
        if args.no_numerics:
            raise InputError("--input and --inputs are for the numerics section",
                             hint="drop --no-numerics")  # fmt: skip
        from anekit.compiler import load_graph
        from anekit.ir.interpret import check_feeds

        feeds = dict(check_feeds(load_graph(path, parse_shapes(args.shape) or None), feeds))
    page = build_report(
        path, args.target, input_shapes=parse_shapes(args.shape) or None, chips=chips,
        feeds=feeds, numerics=not args.no_numerics, title=path.name,
    )  # fmt: skip
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    size = len(page.encode())
    if args.json:
        print_json({"output": str(out), "bytes": size})
    else:
        print(f"wrote {out} ({size / 1024:.0f} KiB)")
    return 0
