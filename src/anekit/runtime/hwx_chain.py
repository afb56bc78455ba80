"""Run a folder of emitted programs (`anekit compile --emit hwx`) in the order its
`program.e5` names: each .hwx on the engine emulator, each netplist (the layers with no H13
form) on the reference backend, each Cast as the fp16 rounding it is."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anekit.codegen.h13.program import SHAPE_KEY
from anekit.errors import FormatError, InternalError, check_input_names
from anekit.formats import dispatch

DESCRIPTOR = "program.e5"


def is_chain(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return path.is_dir() and (path / DESCRIPTOR).is_file()


def _member(directory: Path, name: str) -> Path:
    """A program file the descriptor names: a plain file name inside the folder."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise FormatError(f"program.e5 names '{name}', which is not a file of the folder",
                          where=str(directory))  # fmt: skip
    path = directory / name
    if not path.is_file():
        raise FormatError(f"program.e5 names '{name}', which the folder does not hold",
                          where=str(directory))  # fmt: skip
    return path


def chain_io(descriptor: dispatch.DispatchDescriptor) -> tuple[list[str], list[str]]:
    """(model inputs, model outputs): values no operation produces, and values no later
    operation reads."""
    produced: set[str] = set()
    inputs: list[str] = []
    for op in descriptor.operations:
        inputs += [v for v in op.inputs if v not in produced and v not in inputs]
        produced.update(op.outputs)
    outputs = []
    for k, op in enumerate(descriptor.operations):
        read_later = {v for later in descriptor.operations[k + 1 :] for v in later.inputs}
        outputs += [v for v in op.outputs if v not in read_later and not v.endswith("@ane")]
    return inputs, outputs


def run_chain(
    directory: str | os.PathLike[str], feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The model's outputs (float32) for `feeds`, every program of the folder run in order."""
    from anekit.emulator import EngineProgram
    from anekit.formats import netplist
    from anekit.runtime.backends import get

    directory = Path(directory)
    descriptor = dispatch.read(directory / DESCRIPTOR)
    inputs, outputs = chain_io(descriptor)
    check_input_names(inputs, feeds, f"the programs take {inputs}")
    values = {name: np.asarray(feeds[name], np.float32) for name in inputs}
    for op in descriptor.operations:
        args = {name: values[name] for name in op.inputs}
        if op.op_type == "Cast":
            dtype = np.float16 if op.dst_type == "float16" else np.float32
            results = [args[name].astype(dtype) for name in op.inputs]
        elif op.op_type == "AneInference":
            program = EngineProgram.load(_member(directory, op.program))
            ran = program.run({name.removesuffix("@ane"): a for name, a in args.items()})
            results = [ran[name.removesuffix("@ane")] for name in op.outputs]
        elif op.op_type == "CpuInference":
            graph = netplist.read(_member(directory, op.program))
            shapes = {v.name: v.shape for v in graph.inputs}
            ran = get("reference").run_graph(graph, {  # the engine's layout, the plist's shape
                name: a.reshape(shapes[name]) if name in shapes and a.size == np.prod(shapes[name])
                else a for name, a in args.items()})  # fmt: skip
            results = [ran[name] for name in op.outputs]
        else:
            raise FormatError(f"program.e5 holds a {op.op_type} operation, which anekit does not "
                              "run", where=str(directory))  # fmt: skip
        values.update(zip(op.outputs, results, strict=True))
    shapes = {key[len(SHAPE_KEY):]: tuple(int(d) for d in value.split(","))
              for key, value in descriptor.build_info if key.startswith(SHAPE_KEY)}  # fmt: skip
    result = {}
    for name in outputs:
        value = np.asarray(values[name], np.float32)
        shape = shapes.get(name)
        result[name] = value.reshape(shape) if shape and np.prod(shape) == value.size else value
    return result


AGREEMENT = 0.999  # least cosine between the emulated chain and sim on seeded inputs


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    scale = np.linalg.norm(a) * np.linalg.norm(b)
    return 1.0 if scale == 0 and np.array_equal(a, b) else float(a @ b / scale) if scale else 0.0


def verify_emitted(compiled, directory: str | os.PathLike[str], seed: int = 0) -> dict[str, float]:
    """Run the folder on the emulator and `compiled` on sim for seeded normal inputs; the
    cosine per output. Below AGREEMENT the emitter or the emulator is wrong: InternalError."""
    rng = np.random.default_rng(seed)
    feeds = {
        v.name: rng.standard_normal(v.shape).astype(np.float32)
        if v.dtype.is_float
        else np.zeros(v.shape, v.dtype.numpy)  # indices, masks: zero is always in range
        for v in compiled.graph.inputs
    }
    emulated = run_chain(directory, feeds)
    expected = compiled.run(feeds, "sim")
    agreement = {name: cosine(emulated[name], expected[name]) for name in expected}
    worst = min(agreement, key=agreement.get)
    if agreement[worst] < AGREEMENT:
        raise InternalError(
            f"the emitted programs disagree with sim on output '{worst}' (cosine "
            f"{agreement[worst]:.6f} < {AGREEMENT}); nothing was written"
        )
    return agreement
