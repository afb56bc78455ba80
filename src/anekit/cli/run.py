"""`anekit run MODEL --input NAME=FILE.npy ...`: run a model and summarise (or save) its outputs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from anekit.cli.common import (
    add_shape_option,
    check_npz_target,
    describe_array,
    load_model_graph,
    parse_inputs,
    parse_shapes,
    save_npz,
)
from anekit.errors import AnekitError
from anekit.files import regular_file

# A runner takes (path, feeds, backend, shapes) and returns outputs keyed by name.
Runner = Callable[
    [Path, Mapping[str, np.ndarray], str, Mapping[str, tuple[int, ...]]], dict[str, np.ndarray]
]


def _run_onnx(path: Path, feeds, backend: str, shapes) -> dict[str, np.ndarray]:
    if backend != "reference":
        raise AnekitError(
            f"backend '{backend}' runs compiled programs; an ONNX model runs on 'reference'",
            hint="compile it first: anekit compile MODEL -t m4 -o model.anekit",
        )
    return load_model_graph(str(path), shapes).run(feeds)


def _run_netplist(path: Path, feeds, backend: str, shapes) -> dict[str, np.ndarray]:
    if backend != "reference":
        raise AnekitError(
            f"backend '{backend}' runs anekit bundles and MIL programs; a netplist runs on "
            "'reference'",
            where=str(path),
            hint="drop --backend, or compile the model into a bundle first",
        )
    if shapes:
        raise AnekitError("a netplist's input shapes are fixed by the file; drop --shape")
    from anekit.formats import netplist

    return netplist.read(path).run(feeds)


def _run_mil(path: Path, feeds, backend: str, shapes) -> dict[str, np.ndarray]:
    if backend != "sim":
        raise AnekitError(
            f"backend '{backend}' runs graphs; a MIL program runs on 'sim' (the fp16 simulator)",
            where=str(path),
            hint="drop --backend, or run the ONNX model itself on 'reference'",
        )
    if shapes:
        raise AnekitError("a MIL program declares its input shapes; drop --shape")
    from anekit.runtime.sim import SimProgram

    return SimProgram.load(path).run(feeds)


def _run_bundle(path: Path, feeds, backend: str, shapes) -> dict[str, np.ndarray]:
    if shapes:
        raise AnekitError("a bundle's input shapes are fixed when it is compiled; drop --shape")
    from anekit.runtime import load

    return load(path).run(feeds, backend=backend)


def _runner_for(path: Path) -> Runner:
    """Pick how to run ``path`` from what it is (later: bundles, MIL text, netplists)."""
    return RUNNERS.get(path.suffix.lower(), _run_onnx)


# file suffix -> runner; ONNX is the default for anything else
RUNNERS: dict[str, Runner] = {".onnx": _run_onnx, ".plist": _run_netplist, ".mil": _run_mil}
RUNNERS[".anekit"] = _run_bundle  # a compiled bundle directory
# file suffix -> backend used when --backend is not given; "reference" otherwise
DEFAULT_BACKENDS: dict[str, str] = {".mil": "sim"}
DEFAULT_BACKENDS[".anekit"] = "sim"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a model on inputs from .npy files")
    p.add_argument("model", help="an ONNX model file, a MIL program (.mil) or a netplist (.plist)")
    p.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input (repeatable)",
    )
    p.add_argument("--output", "-o", metavar="OUT.npz", help="save every output into an .npz file")
    p.add_argument(
        "--backend",
        default=None,
        choices=["reference", "sim"],
        help="where to run (default: sim for MIL programs, reference otherwise)",
    )
    add_shape_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if not path.is_dir():
        regular_file(path, "model", hint="pass an .anekit bundle folder or a model file")
    if args.output:
        check_npz_target(Path(args.output))  # before the work, not after it
    feeds = parse_inputs(args.input)
    backend = args.backend or DEFAULT_BACKENDS.get(path.suffix.lower(), "reference")
    outputs = _runner_for(path)(path, feeds, backend, parse_shapes(args.shape))
    width = max((len(k) for k in outputs), default=0)
    for name, arr in outputs.items():
        print(f"{name:<{width}}  {describe_array(np.asarray(arr))}")
    if args.output:
        save_npz(Path(args.output), outputs)
        print(f"saved {len(outputs)} output(s) to {args.output}")
    return 0
