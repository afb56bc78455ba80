"""`anekit run MODEL --input NAME=FILE.npy ...`: run a model and summarise (or save) its outputs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from anekit.cli.common import (
    add_command,
    add_feeds_options,
    add_shape_option,
    check_npz_target,
    describe_array,
    load_model_graph,
    parse_feeds,
    parse_shapes,
    print_json,
    save_npz,
)
from anekit.errors import AnekitError
from anekit.files import regular_file
from anekit.runtime import backends
from anekit.runtime.backends import Backend

# A runner takes (path, feeds, backend, shapes) and returns outputs keyed by name.
Runner = Callable[
    [Path, Mapping[str, np.ndarray], Backend, Mapping[str, tuple[int, ...]]],
    dict[str, np.ndarray],
]


def _graph_backend(backend: Backend, path: Path, what: str) -> Backend:
    if not backend.runs_graphs:
        raise AnekitError(
            f"backend '{backend.name}' runs compiled programs; {what} is a graph",
            where=str(path),
            hint=f"run it on {' or '.join(backends.graph_backends())}, or compile it first: "
            "anekit compile MODEL -t m4 -o model.anekit",
        )
    backend.check_available()
    return backend


def _program_backend(backend: Backend, path: Path, what: str) -> Backend:
    if not backend.runs_segments:
        raise AnekitError(
            f"backend '{backend.name}' runs graphs; {what} is a compiled program",
            where=str(path),
            hint=f"run it on {' or '.join(backends.segment_backends())}",
        )
    return backend


def _run_onnx(path: Path, feeds, backend: Backend, shapes) -> dict[str, np.ndarray]:
    backend = _graph_backend(backend, path, "an ONNX model")
    return backend.run_graph(load_model_graph(str(path), shapes), feeds)


def _run_netplist(path: Path, feeds, backend: Backend, shapes) -> dict[str, np.ndarray]:
    backend = _graph_backend(backend, path, "a netplist")
    if shapes:
        raise AnekitError("a netplist's input shapes are fixed by the file; drop --shape")
    from anekit.formats import netplist

    return backend.run_graph(netplist.read(path), feeds)


def _run_program(path: Path, feeds, backend: Backend, shapes) -> dict[str, np.ndarray]:
    """A bundle directory or a MIL file, on a backend that runs compiled programs."""
    what = "a bundle" if path.is_dir() else "a MIL program"
    backend = _program_backend(backend, path, what)
    if shapes:
        raise AnekitError(f"{what}'s input shapes are fixed when it is written; drop --shape")
    from anekit.runtime import load

    return load(path).run(feeds, backend=backend.name)


def _run_hwx(path: Path, feeds, backend: Backend, shapes) -> dict[str, np.ndarray]:
    """An Apple-format .hwx program, or a folder of them (`compile --emit hwx`), on the
    engine emulator."""
    if shapes:
        raise AnekitError("a .hwx program's input shapes are fixed by the file; drop --shape")
    return backend.run_hwx(path, feeds)


def _runner_for(path: Path) -> Runner:
    """Pick how to run ``path`` from what it is."""
    from anekit.runtime.hwx_chain import is_chain

    if is_chain(path):
        return _run_hwx
    return RUNNERS.get(path.suffix.lower(), _run_onnx)


# file suffix -> runner; ONNX is the default for anything else
RUNNERS: dict[str, Runner] = {
    ".onnx": _run_onnx,
    ".plist": _run_netplist,
    ".mil": _run_program,
    ".anekit": _run_program,
    ".hwx": _run_hwx,
}
# file suffix -> backend used when --backend is not given; "reference" otherwise
DEFAULT_BACKENDS: dict[str, str] = {".mil": "sim", ".anekit": "sim", ".hwx": "engine"}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "run",
        help="run a model, a compiled bundle or an Apple program on inputs from .npy/.npz files",
        description="Run a model and show (or save) its outputs: an anekit bundle (.anekit "
        "folder) or MIL text on the fp16 simulator, an H13 .hwx program on the engine "
        "emulator, an ONNX model or an Apple netplist on the fp32 reference backend.",
        examples=[
            "anekit run digits.anekit --input image=examples/digit.npy",
            "anekit run digits.anekit --inputs feeds.npz -o out.npz --backend sim-fp32",
            "anekit run tests/data/apple/hwx/h13_conv.hwx --input image=rgb.npy",
        ],
        json_help="print every output (shape, dtype and values) as JSON",
    )
    p.add_argument(
        "model",
        help="an anekit bundle (.anekit folder), a MIL program (.mil), an H13 program (.hwx), "
        "an ONNX model file or a netplist (.plist)",
    )
    add_feeds_options(p)
    p.add_argument("--output", "-o", metavar="OUT.npz", help="save every output into an .npz file")
    p.add_argument(
        "--backend",
        default=None,
        choices=backends.names(),
        help="where to run (default: sim for bundles and MIL programs, engine for .hwx, "
        "reference otherwise); "
        + "; ".join(f"{b.name}: {b.summary}" for b in map(backends.get, backends.names())),
    )
    add_shape_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if not path.is_dir():
        regular_file(path, "model", hint="pass an .anekit bundle folder or a model file")
    if args.output:
        check_npz_target(Path(args.output))  # before the work, not after it
    feeds = parse_feeds(args)
    from anekit.runtime.hwx_chain import is_chain

    default = "engine" if is_chain(path) else DEFAULT_BACKENDS.get(path.suffix.lower(), "reference")
    backend = args.backend or default
    outputs = _runner_for(path)(path, feeds, backends.get(backend), parse_shapes(args.shape))
    if args.output:
        save_npz(Path(args.output), outputs)
    if args.json:
        print_json({
            "backend": backend,
            "outputs": {name: _as_json(np.asarray(arr)) for name, arr in outputs.items()},
            "saved": args.output,
        })  # fmt: skip
        return 0
    width = max((len(k) for k in outputs), default=0)
    for name, arr in outputs.items():
        print(f"{name:<{width}}  {describe_array(np.asarray(arr))}")
    if args.output:
        print(f"saved {len(outputs)} output(s) to {args.output}")
    return 0


JSON_MAX_VALUES = 65536  # larger outputs: shape and dtype only (save them with -o)


def _as_json(arr: np.ndarray) -> dict:
    values = arr.tolist() if arr.size <= JSON_MAX_VALUES else None
    return {"shape": list(arr.shape), "dtype": str(arr.dtype), "values": values}
