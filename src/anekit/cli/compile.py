"""`anekit compile MODEL -t TARGET -o OUT.anekit`: compile a model into a bundle (and an .mlpackage)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from anekit.cli.check_numerics import add_remedy_options, remedy_options
from anekit.cli.common import (
    add_command,
    add_shape_option,
    add_target_option,
    compression_line,
    compression_summary,
    existing_model_file,
    parse_shapes,
    print_json,
)
from anekit.codegen.compress import SCHEMES
from anekit.errors import AnekitError

MAX_CPU_ROWS = 10


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "compile",
        help="compile a model into an anekit bundle (MIL + weight.bin per segment)",
        description="Compile an ONNX model for a chip into an anekit bundle: one MIL program "
        "and weight file per engine or CPU segment, a manifest with the digest of every file "
        "and the placement report; optionally also a Core ML .mlpackage, or H13 .hwx programs.",
        examples=[
            "anekit compile examples/digits_cnn.onnx -t m4 -o digits.anekit",
            "anekit compile examples/digits_cnn.onnx -t m4 -o digits.anekit --mlpackage digits.mlpackage",
            "anekit compile examples/digits_fcn.onnx -o fcn.anekit --mlpackage fcn.mlpackage "
            "--enumerated-shape image=1x1x8x8,1x1x16x16",
            "anekit compile examples/digits_cnn.onnx -t m4 --compress int8 --json",
        ],
        json_help="print what was written as JSON",
    )
    p.add_argument("model", help="an ONNX model file")
    add_target_option(p)
    p.add_argument(
        "--output", "-o", metavar="OUT.anekit", help="bundle directory (default: MODEL.anekit)"
    )
    p.add_argument("--mlpackage", metavar="PATH", help="also export a Core ML .mlpackage")
    p.add_argument(
        "--weights",
        choices=("fp16", "fp32"),
        default="fp16",
        help="how CPU segments store float weights (engine segments always use fp16)",
    )
    p.add_argument(
        "--compress",
        choices=SCHEMES,
        default=None,
        help="store the engine's convolution weights compressed (MIL constexpr ops)",
    )
    p.add_argument(
        "--emit",
        choices=("bundle", "hwx", "anec"),
        default="bundle",
        help="bundle: MIL + weight.bin per segment (default); hwx: the model as a chain of H13 "
        ".hwx programs and CPU netplists with the dispatch descriptor program.e5, into the "
        "directory -o (H13 targets: m1, m1-pro, m1-max, m1-ultra); anec: the same, plus an "
        ".anec beside each .hwx for the Asahi Linux ANE driver",
    )
    add_shape_option(p)
    add_remedy_options(p)
    p.add_argument(
        "--const",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix an input to a constant so that shape logic and If branches on it fold, "
        "e.g. --const sr=16000 (a list: --const axes=0,2; repeatable)",
    )
    _add_coreml_options(p)
    p.set_defaults(func=run)


def parse_constants(specs: list[str]) -> dict[str, Any]:
    """'sr=16000' -> {'sr': array(16000)}; 'axes=0,2' -> a 1-D array."""
    import numpy as np

    constants: dict[str, Any] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        try:
            values = [float(v) if any(c in v for c in ".eE") else int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not sep or not name or not text or not values:
            raise AnekitError(
                f"--const '{spec}' is not NAME=VALUE",
                hint="a number or numbers separated by commas, e.g. --const sr=16000",
            )
        constants[name] = np.array(values[0] if "," not in text else values)
    return constants


def _add_coreml_options(p: argparse.ArgumentParser) -> None:
    from anekit.codegen.coreml_options import COLOR_LAYOUTS, COMPUTE_UNITS, IO_DTYPES

    g = p.add_argument_group("Core ML package (with --mlpackage)")
    g.add_argument("--io-dtype", choices=IO_DTYPES, default=None,
                   help="the type of float inputs and outputs (default fp32; fp16 is the engine's)")  # fmt: skip
    g.add_argument("--image", action="append", default=[], metavar="NAME=LAYOUT",
                   help=f"take input NAME as an image, LAYOUT one of {', '.join(COLOR_LAYOUTS)} "
                   "(repeatable)")  # fmt: skip
    g.add_argument("--image-scale", type=float, default=1.0, metavar="S",
                   help="images feed the model pixel * S + bias (default 1)")  # fmt: skip
    g.add_argument("--image-bias", default="0", metavar="B[,G,R]",
                   help="one bias, or one per channel in the layout's order (default 0)")  # fmt: skip
    g.add_argument("--enumerated-shape", action="append", default=[], metavar="NAME=DIMS,DIMS,...",
                   help="the shapes input NAME takes, e.g. image=1x1x8x8,1x1x16x16 (the first the "
                   "default, and the bundle's shape unless --shape gives one); the model is "
                   "compiled at each and written as one program valid at all (repeatable)")  # fmt: skip
    g.add_argument("--class-labels", metavar="FILE|A,B,...",
                   help="make the package a classifier: a file with one label per line, or "
                   "labels separated by commas")  # fmt: skip
    g.add_argument("--classifier-output", metavar="NAME",
                   help="the output holding the class probabilities (default: the only float one)")  # fmt: skip
    g.add_argument("--author")
    g.add_argument("--license")
    g.add_argument("--description", help="the model's short description")
    g.add_argument("--model-version", metavar="VERSION", help="the model's version string")
    g.add_argument("--compute-units", choices=COMPUTE_UNITS, default=None,
                   help="the compute units Core ML is asked to load it on (kept in its metadata)")  # fmt: skip
    g.add_argument("--deployment-target", metavar="PLATFORM",
                   help="the minimum deployment target, e.g. iOS18 or macOS15 (default: what "
                   "the chip's MIL opset needs)")  # fmt: skip


_COREML_FLAGS = {"io_dtype": "--io-dtype", "image": "--image",
                 "enumerated_shape": "--enumerated-shape", "class_labels": "--class-labels",
                 "classifier_output": "--classifier-output", "author": "--author",
                 "license": "--license", "description": "--description",
                 "model_version": "--model-version", "compute_units": "--compute-units",
                 "deployment_target": "--deployment-target"}  # fmt: skip


def coreml_options(args: argparse.Namespace) -> Any:
    """The Core ML options the command line gives (None without --mlpackage)."""
    from anekit.codegen.coreml_options import CoreMLOptions, ImageInput, read_class_labels

    given = [flag for key, flag in _COREML_FLAGS.items() if getattr(args, key)]
    if not args.mlpackage:
        if given:
            raise AnekitError(f"{given[0]} describes the Core ML package", hint="add --mlpackage PATH")
        return None
    try:
        bias = tuple(float(b) for b in args.image_bias.split(","))
    except ValueError:
        raise AnekitError(f"--image-bias '{args.image_bias}' is not numbers separated by commas") from None
    images = {}
    for spec in args.image:
        name, sep, layout = spec.partition("=")
        if not sep or not name:
            raise AnekitError(f"--image '{spec}' is not NAME=LAYOUT", hint="e.g. --image image=RGB")
        images[name] = ImageInput(layout, scale=args.image_scale, bias=bias)
    return CoreMLOptions(
        io_dtype=args.io_dtype or "fp32",
        images=images,
        enumerated_shapes=parse_enumerated_shapes(args.enumerated_shape),
        class_labels=read_class_labels(args.class_labels) if args.class_labels else None,
        classifier_output=args.classifier_output,
        author=args.author,
        license=args.license,
        description=args.description,
        version=args.model_version,
        compute_units=args.compute_units or "all",
        deployment_target=args.deployment_target,
    )


def parse_enumerated_shapes(specs: list[str]) -> dict[str, list[tuple[int, ...]]]:
    """'image=1x1x8x8,1x1x16x16' -> {'image': [(1, 1, 8, 8), (1, 1, 16, 16)]}."""
    found: dict[str, list[tuple[int, ...]]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        shapes = [part.split("x") for part in text.split(",")]
        if not sep or not name or not all(d.strip().isdigit() for dims in shapes for d in dims):
            raise AnekitError(
                f"--enumerated-shape '{spec}' is not NAME=DIMS,DIMS,...",
                hint="dimensions separated by x, shapes by commas, e.g. "
                "--enumerated-shape image=1x1x8x8,1x1x16x16",
            )
        if name in found:
            raise AnekitError(f"--enumerated-shape gives '{name}' twice; list all its shapes in one")
        found[name] = [tuple(int(d) for d in dims) for dims in shapes]
    return found


def run(args: argparse.Namespace) -> int:
    from anekit import targets
    from anekit.atomic import check_target
    from anekit.codegen.mlpackage import not_an_mlpackage
    from anekit.codegen.model_bundle import save
    from anekit.compiler import compile as compile_model
    from anekit.formats.bundle import not_a_bundle

    target = targets.get(args.target)  # an unknown target fails before the model loads
    path = existing_model_file(args.model)
    if args.emit in ("hwx", "anec"):
        return _run_hwx(args, target, path)
    output = Path(args.output) if args.output else Path(f"{path.stem}.anekit")
    if output.suffix != ".anekit":
        raise AnekitError(f"the bundle '{output}' must end in .anekit")
    if args.mlpackage and not args.mlpackage.endswith(".mlpackage"):
        raise AnekitError(f"'{args.mlpackage}' must end in .mlpackage")
    # both outputs checked before the work: a refused path leaves nothing half-written
    check_target(output, not_a_bundle, "an anekit bundle")
    if args.mlpackage:
        check_target(args.mlpackage, not_an_mlpackage, "an .mlpackage")
    options = coreml_options(args)  # checked before the work
    shapes = parse_shapes(args.shape)
    constants = parse_constants(args.const) or None
    if options is not None and options.enumerated_shapes:
        from anekit.compiler import check_enumerated_shapes

        check_enumerated_shapes(path, options.enumerated_shapes, constants)
        for name, enumerated in options.enumerated_shapes.items():
            shapes.setdefault(name, enumerated[0])  # the bundle takes the default shape
    shapes = shapes or None
    with _progress(quiet=args.json) as step:
        step("compiling", None)
        compiled = compile_model(
            path,
            target,
            input_shapes=shapes,
            constants=constants,
            compress=args.compress,
            **remedy_options(args),
        )
        package = None
        if args.mlpackage:  # first: a package it refuses leaves no bundle behind either
            step("exporting the .mlpackage", None)
            package = compiled.save_mlpackage(args.mlpackage, options)
        step("emitting MIL", len(compiled.segments))
        written = save(
            compiled, output, weights=args.weights, progress=lambda done, _: step(None, done)
        )
    if args.json:
        print_json(_json(compiled, written, package))
        return 0
    _print_summary(compiled, written, package)
    return 0


def _run_hwx(args: argparse.Namespace, target: Any, path: Path) -> int:
    """`--emit hwx|anec`: the H13 programs into a new directory (written beside it, then
    renamed)."""
    import shutil
    import tempfile

    from anekit.codegen.h13.program import emit_program
    from anekit.compiler import compile as compile_model
    from anekit.formats.hwx.h13 import ENGINE
    from anekit.runtime.hwx_chain import verify_emitted

    if target.engine != ENGINE:
        raise AnekitError(
            f"--emit {args.emit} writes programs for the H13 engine (m1, m1-pro, m1-max, m1-ultra); "
            f"the target {target.name} has the {target.engine} engine",
            hint="use -t m1",
        )
    if args.mlpackage:
        raise AnekitError(f"--mlpackage goes with a bundle; drop it or drop --emit {args.emit}")
    if args.compress:
        raise AnekitError(
            f"--compress goes with a bundle (MIL constexpr ops); drop it or drop --emit {args.emit}"
        )
    output = Path(args.output) if args.output else Path(f"{path.stem}.hwx.d")
    if output.exists():
        raise AnekitError(
            f"'{output}' already exists; anekit writes the programs into a new directory",
            hint="remove it or choose another -o",
        )
    compiled = compile_model(
        path,
        target,
        input_shapes=parse_shapes(args.shape) or None,
        constants=parse_constants(args.const) or None,
        **remedy_options(args),
    )
    program = emit_program(compiled)
    files = dict(program.files)
    if args.emit == "anec":
        from anekit.formats.anec import from_hwx

        for name, data in program.files.items():
            if name.endswith(".hwx"):
                files[name.removesuffix(".hwx") + ".anec"] = from_hwx(data, name)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        agreement = verify_emitted(compiled, staging)
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    written = {name: len(data) for name, data in files.items()}
    if args.json:
        print_json({"directory": str(output), "target": target.name, "files": written,
                    "parts": [{"device": p.device, "program": p.program, "layers": p.layers,
                               "cpu_reasons": list(p.reasons)} for p in program.parts],
                    "emulator_vs_sim_cosine": agreement})  # fmt: skip
        return 0
    engine = sum(p.device == "ane" for p in program.parts)
    print(f"wrote {output} for {target.name}: {engine} engine program(s), "
          f"{len(program.parts) - engine} CPU part(s) and program.e5")  # fmt: skip
    for name, size in written.items():
        print(f"  {name}  {size} bytes")
    for part in program.parts:
        for reason in part.reasons:
            print(f"  on the CPU ({part.program}): {reason}")
    print(f"checked: the emulator agrees with sim (cosine {min(agreement.values()):.6f})")
    print(compiled.summary_line())
    return 0


def _json(compiled: Any, bundle: Path, package: Path | None) -> dict[str, Any]:
    from anekit.formats.bundle import read_bundle

    manifest = read_bundle(bundle, verify=False, contents=False).manifest
    return {
        "bundle": str(bundle),
        "mlpackage": str(package) if package else None,
        "target": compiled.target.name,
        "summary": dict(compiled.summary),
        "segments": [
            {"index": s.index, "device": s.device, "program": s.program, "weights": s.weights}
            for s in manifest.segments
        ],
        "bytes": sum(f.size for f in manifest.files.values()),
        "compression": compression_summary(compiled.compression_report),
    }


def _print_summary(compiled: Any, bundle: Path, package: Path | None) -> None:
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    ane = sum(1 for s in compiled.segments if s.device == "ane")
    print(
        f"wrote {bundle} for {compiled.target.name}: {len(compiled.segments)} segment(s) "
        f"({ane} ANE, {len(compiled.segments) - ane} CPU), {size / 1e6:.1f} MB"
    )
    if package is not None:
        print(f"wrote {package}")
    print(compiled.summary_line())
    report = compression_summary(compiled.compression_report)
    if report:
        print(compression_line(report))
    cpu = [r for r in compiled.report["ops"] if r["placement"] == "cpu"]
    for row in cpu[:MAX_CPU_ROWS]:
        print(f"  cpu: {row['node']} ({row['op']}): {row['reason']}")
    if len(cpu) > MAX_CPU_ROWS:
        print(f"  ... and {len(cpu) - MAX_CPU_ROWS} more on the CPU (see `anekit check`)")


Step = Callable[[str | None, int | None], None]


@contextlib.contextmanager
def _progress(quiet: bool) -> Iterator[Step]:
    """A progress bar on stderr (rich, when installed and stderr is a terminal).

    ``step(label, n)`` starts a stage (``n``: its number of units, None for a spinner);
    ``step(None, k)`` reports that ``k`` units of the stage are done.
    """
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
    except ImportError:
        Console = None  # noqa: N806
    console = Console(stderr=True) if Console is not None else None
    if quiet or console is None or not console.is_terminal:
        yield lambda label, n: None
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        current: list[Any] = []  # the id of the running stage's task

        def step(label: str | None, n: int | None) -> None:
            if label is not None:
                if current:
                    bar.remove_task(current.pop())
                current.append(bar.add_task(label, total=n))
            elif current:
                bar.update(current[0], completed=n)

        yield step
    sys.stderr.flush()
