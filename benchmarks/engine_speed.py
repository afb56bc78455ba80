"""Speed of the engine emulator on a small CNN, beside the MIL simulator and the fp32 reference.

The CNN (3x32x32 input; conv 3x3 + bias + relu to 16, conv 3x3 stride 2 to 32, a 1x1
conv with sigmoid, an add, a channel concat and a 1x1 head) is compiled for m1; the
engine backend runs its emitted .hwx on the emulator (the program is emitted and decoded
once; a run is the passes only), `sim` runs its MIL.

    python benchmarks/engine_speed.py        # writes results/engine_speed.json

The machine is shared: the JSON records the load average before and after.

``python benchmarks/engine_speed.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

from _common import add_smoke, results_path, write_json  # noqa: E402

import anekit  # noqa: E402
from anekit.codegen.h13 import emit  # noqa: E402
from anekit.emulator import EngineProgram  # noqa: E402

RESULTS = _HERE / "results" / "engine_speed.json"
ROUNDS = 30


def small_cnn() -> anekit.Graph:
    ops, rng = anekit.ops, np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    x = anekit.input("x", (1, 3, 32, 32))
    h = ops.relu(ops.conv2d(x, w(16, 3, 3, 3), w(16, 1)[:, 0], padding=1))
    h = ops.relu(ops.conv2d(h, w(32, 16, 3, 3), w(32, 1)[:, 0], stride=2, padding=1))
    gate = ops.sigmoid(ops.conv2d(h, w(32, 32, 1, 1), w(32, 1)[:, 0]))
    h = ops.concat([ops.add(h, gate), h], axis=1)
    return anekit.graph([ops.conv2d(h, w(10, 64, 1, 1), name="y")])


def timed(fn, rounds: int) -> list[float]:
    fn()  # warm up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    add_smoke(parser)
    args = parser.parse_args()
    rounds = 2 if args.smoke else args.rounds
    load_before = os.getloadavg()
    graph = small_cnn()
    cm = anekit.compile(graph, "m1")
    start = time.perf_counter()
    data = emit(cm.graph)
    emit_s = time.perf_counter() - start
    start = time.perf_counter()
    program = EngineProgram(data)
    load_s = time.perf_counter() - start
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    macs = sum(p.cout * p.hout * p.wout * (p.cin // p.groups) * p.kh * p.kw
               for p in program.passes if p.op == "conv")  # fmt: skip
    engine = timed(lambda: program.run(feeds), rounds)
    sim = timed(lambda: cm.run(feeds, "sim"), rounds)
    reference = timed(lambda: cm.run(feeds, "reference"), rounds)
    got, want = program.run(feeds)["y"], cm.run(feeds, "sim")["y"]
    doc = {
        "benchmark": "engine_speed",
        "model": "small CNN, 3x32x32 -> 10x16x16 (4 convs, sigmoid gate, add, concat)",
        "passes": len(program.passes),
        "program_bytes": len(data),
        "conv_macs": macs,
        "emit_ms": round(1e3 * emit_s, 2),
        "decode_ms": round(1e3 * load_s, 2),
        "rounds": rounds,
        "engine_ms_median": round(1e3 * statistics.median(engine), 3),
        "engine_ms_min": round(1e3 * min(engine), 3),
        "sim_ms_median": round(1e3 * statistics.median(sim), 3),
        "reference_ms_median": round(1e3 * statistics.median(reference), 3),
        "engine_gmacs_per_s": round(macs / statistics.median(engine) / 1e9, 3),
        "max_abs_diff_vs_sim": float(np.abs(got - want).max()),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "threads": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    write_json(results_path(RESULTS, args.smoke), doc)
    for key in ("passes", "conv_macs", "engine_ms_median", "sim_ms_median", "reference_ms_median",
                "engine_gmacs_per_s", "max_abs_diff_vs_sim", "load_average_before"):  # fmt: skip
        print(f"{key}: {doc[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
