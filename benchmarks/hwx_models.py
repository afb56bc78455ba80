"""Whole models emitted as H13 program chains: layers, programs, emulator time, agreement.

For each model: compile for m1, emit the chain (`anekit compile --emit hwx`), run it on the
emulator (CPU parts on the reference backend) and compare with sim and onnxruntime on
seeded normal inputs; every .hwx is also put through the Asahi converter's checks
(tests/emulator/anecc_checks.py). Memory stays small: the models are CNNs of a few MB.

    python benchmarks/hwx_models.py            # writes results/hwx_models.json
    python benchmarks/hwx_models.py --smoke    # seconds: the two test models, one run each
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
for entry in (str(_HERE), str(ROOT)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from _common import add_smoke, machine, results_path, write_json  # noqa: E402

import anekit  # noqa: E402
from anekit.codegen.h13.program import emit_program  # noqa: E402
from anekit.emulator import EngineProgram  # noqa: E402
from anekit.runtime.hwx_chain import cosine, run_chain  # noqa: E402

RESULTS = _HERE / "results" / "hwx_models.json"


def _init(rng, name: str, *shape: int, scale: float = 0.3):
    return numpy_helper.from_array((scale * rng.standard_normal(shape)).astype(np.float32), name)


def _save(path: Path, nodes, inputs, outputs, inits) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def every_layer_cnn(path: Path, size: int = 16, width: int = 8) -> Path:
    """Depthwise stride-2, dilated and grouped convs, max/avg/global pooling, relu, sigmoid,
    tanh, a scale and shift, add/mul/max/min of live tensors, channel concat."""
    rng = np.random.default_rng(11)
    w = width
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "dw"], ["d0"], group=w, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["d0"], ["t0"]),
        helper.make_node("Conv", ["t0", "wd"], ["e0"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Sigmoid", ["e0"], ["s0"]),
        helper.make_node("Conv", ["t0", "wg"], ["g0"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["g0", "scale"], ["m0"]),
        helper.make_node("Add", ["m0", "shift"], ["a0"]),
        helper.make_node("Add", ["a0", "s0"], ["res"]),
        helper.make_node("Mul", ["res", "s0"], ["prod"]),
        helper.make_node("Max", ["prod", "t0"], ["mx"]),
        helper.make_node("Min", ["mx", "a0"], ["mn"]),
        helper.make_node("MaxPool", ["mn"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["mn"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["mp", "ap"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["y"]),
    ]
    inits = [_init(rng, "w0", w, 3, 3, 3), _init(rng, "b0", w), _init(rng, "dw", w, 1, 3, 3),
             _init(rng, "wd", w, w, 3, 3, scale=0.2), _init(rng, "wg", w, w // 2, 3, 3),
             _init(rng, "scale", 1, w, 1, 1, scale=1.0), _init(rng, "shift", 1, w, 1, 1)]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * w, 1, 1])]
    return _save(path, nodes, inputs, outputs, inits)


def wide_conv(path: Path, cout: int = 16384) -> Path:
    """A 1x1 conv to more output channels than one pass holds (split in groups of 2048)."""
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 1])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 1, 1])]
    return _save(path, nodes, inputs, outputs, [_init(rng, "w", cout, 8, 1, 1)])


def big_sigmoid(path: Path, side: int = 2048) -> Path:
    """A sigmoid over a plane larger than the 2 MiB L2 (split in row bands)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["y"])]
    shape = [1, 1, side, side]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [])  # fmt: skip


def measure(name: str, model: Path, workdir: Path, runs: int) -> dict[str, Any]:
    import onnxruntime as ort
    from tests.emulator.anecc_checks import convert

    start = time.perf_counter()
    compiled = anekit.compile(str(model), "m1")
    program = emit_program(compiled)
    emit_seconds = time.perf_counter() - start
    folder = workdir / f"{name}.hwx.d"
    folder.mkdir()
    for file, data in program.files.items():
        (folder / file).write_bytes(data)
    hwx_files = sorted(folder.glob("*.hwx"))
    for path in hwx_files:
        convert(path.read_bytes())  # raises if the Asahi converter would refuse it
    passes = sum(len(EngineProgram.load(p).passes) for p in hwx_files)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    times, vs_sim, vs_ort = [], [], []
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        feeds = {v.name: rng.standard_normal(v.shape).astype(np.float32)
                 for v in compiled.graph.inputs}  # fmt: skip
        start = time.perf_counter()
        emulated = run_chain(folder, feeds)
        times.append(time.perf_counter() - start)
        simulated = compiled.run(feeds, "sim")
        exact = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                         strict=True))  # fmt: skip
        vs_sim.append(min(cosine(emulated[k], simulated[k]) for k in exact))
        vs_ort.append(min(cosine(emulated[k], v) for k, v in exact.items()))
    return {
        "model": name,
        "engine_layers": sum(p.layers for p in program.parts if p.device == "ane"),
        "cpu_layers": sum(p.layers for p in program.parts if p.device == "cpu"),
        "cpu_reasons": [r for p in program.parts for r in p.reasons],
        "programs": len(hwx_files),
        "cpu_parts": sum(p.device == "cpu" for p in program.parts),
        "task_descriptors": passes,
        "bytes": sum(len(d) for d in program.files.values()),
        "asahi_checks": "passed",
        "compile_and_emit_seconds": round(emit_seconds, 3),
        "emulator_seconds_median": round(float(np.median(times)), 4),
        "cosine_vs_sim_min": round(min(vs_sim), 6),
        "cosine_vs_onnxruntime_min": round(min(vs_ort), 6),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_smoke(parser)  # the two test models, one run each
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    runs = 1 if args.smoke else 5
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        models = {"digits_cnn": ROOT / "examples" / "digits_cnn.onnx",
                  "every_layer_cnn": every_layer_cnn(work / "every.onnx")}  # fmt: skip
        if not args.smoke:
            models["every_layer_cnn_64"] = every_layer_cnn(work / "every64.onnx", 64, 32)
            models["wide_conv_16384"] = wide_conv(work / "wide.onnx")
            models["sigmoid_2048x2048"] = big_sigmoid(work / "big.onnx")
        for name, model in models.items():
            rows.append(measure(name, model, work, runs))
    doc = {"benchmark": "hwx_models", "smoke": args.smoke, "target": "m1", "rows": rows,
           "machine": machine(load)}  # fmt: skip
    out = args.out or results_path(RESULTS, args.smoke)
    write_json(out, doc)
    for row in rows:
        print(f"{row['model']}: {row['engine_layers']} engine layers in {row['programs']} "
              f"program(s) ({row['task_descriptors']} descriptors), {row['cpu_layers']} on the "
              f"CPU; emulator {row['emulator_seconds_median']} s; cosine vs sim "
              f"{row['cosine_vs_sim_min']}, vs onnxruntime {row['cosine_vs_onnxruntime_min']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
