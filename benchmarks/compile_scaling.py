"""Benchmark: compile time against graph size (goal: 20,000 nodes in under 10 s, growth
near-linear).

Writes ``benchmarks/results/compile_scaling.json``.

How it measures:
- two graph families, built with onnx.helper at 1k, 5k, 20k and 50k nodes on a [1, 16]
  fp32 input:
  ``chain``: node k adds the previous node's output and the model input (a long chain,
  and one value read by every node: the fan-out that made the scheduler's diamond search
  quadratic); ``ladder``: rungs of three Adds (two branches of the previous rung's output,
  each with its own constant, merged by a third): a diamond per rung;
- each size runs in a fresh interpreter (imports warm, no state left by a smaller size):
  what ``anekit compile -o`` does, timed in stages: import and the pass pipeline
  (``anekit.compile`` on the model's bytes), the report (the per-segment schedule and
  estimate), and writing the bundle (MIL emission, weights, the atomic folder write);
- the growth exponent k of ``seconds ~ nodes**k`` is the least-squares slope of
  log(seconds) on log(nodes) over the sizes, per family;
- the machine is shared: the 1-minute load average before each run is recorded, and the
  process's CPU time next to the wall time (waiting for a core shows in the wall time only).

    python benchmarks/compile_scaling.py [--sizes 1000,5000,20000,50000]

``python benchmarks/compile_scaling.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "compile_scaling.json"
GOAL_NODES, GOAL_SECONDS = 20_000, 10.0
FAMILIES = ("chain", "ladder")


def build(family: str, nodes: int) -> bytes:
    """The model's bytes: ``nodes`` Add nodes in the given family's pattern."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    made, inits, prev = [], [], "x"
    if family == "chain":
        for k in range(nodes):
            made.append(helper.make_node("Add", [prev, "x"], [f"v{k}"], name=f"add{k}"))
            prev = f"v{k}"
    else:
        for r in range(nodes // 3):
            for side in ("l", "r"):
                c = f"c{side}{r}"
                inits.append(numpy_helper.from_array(np.full(16, r % 7 + 1, np.float32), c))
                made.append(helper.make_node("Add", [prev, c], [f"{side}{r}"], name=f"{side}{r}"))
            made.append(helper.make_node("Add", [f"l{r}", f"r{r}"], [f"m{r}"], name=f"m{r}"))
            prev = f"m{r}"
    graph = helper.make_graph(
        made, family, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16])], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def measure(family: str, nodes: int) -> dict:
    """One compile of one size, in stages (runs in the child interpreter)."""
    import anekit

    anekit.compile(build(family, 30), "m4").save(Path(tempfile.mkdtemp()) / "warm.anekit")
    data = build(family, nodes)
    with tempfile.TemporaryDirectory() as folder:
        c0, t0 = time.process_time(), time.perf_counter()
        compiled = anekit.compile(data, "m4")
        t1 = time.perf_counter()
        _ = compiled.report
        t2 = time.perf_counter()
        compiled.save(Path(folder) / "model.anekit")
        c3, t3 = time.process_time(), time.perf_counter()
    return {
        "family": family,
        "nodes": nodes,
        "engine_layers": compiled.summary.get("engine_layers"),
        "segments": len(compiled.segments),
        "seconds": {
            "import_and_passes": round(t1 - t0, 3),
            "report_and_schedule": round(t2 - t1, 3),
            "write_bundle": round(t3 - t2, 3),
            "total": round(t3 - t0, 3),
            "total_cpu": round(c3 - c0, 3),
        },
    }


def growth_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) on log(nodes)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(s, 1e-6)) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000,50000")
    parser.add_argument("--child", nargs=2, metavar=("FAMILY", "NODES"), help=argparse.SUPPRESS)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.sizes = "30,60"  # two sizes: a growth exponent still fits
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]))))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    runs = []
    for family in FAMILIES:
        for n in sizes:
            load = [round(x, 2) for x in os.getloadavg()]
            done = subprocess.run(
                [sys.executable, __file__, "--child", family, str(n)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            run = {**json.loads(done.stdout.strip().splitlines()[-1]), "load_average_before": load}
            runs.append(run)
            print(f"{family:6s} {n:6d} nodes: {run['seconds']}  (load {load[0]})", flush=True)
    fits = {
        f"{f} ({clock})": round(
            growth_exponent([(r["nodes"], r["seconds"][key]) for r in runs if r["family"] == f]),
            3,
        )
        for f in FAMILIES
        for clock, key in (("wall", "total"), ("cpu", "total_cpu"))
    }
    goal = [r for r in runs if r["nodes"] == GOAL_NODES]
    doc = {
        "benchmark": "compile_scaling",
        "goal": f"{GOAL_NODES} nodes compile (import, passes, schedule, bundle written) in "
        f"under {GOAL_SECONDS} s; growth near-linear",
        "growth_exponent": fits,
        "goal_met_wall": bool(goal) and all(r["seconds"]["total"] < GOAL_SECONDS for r in goal),
        "goal_met_cpu": bool(goal) and all(r["seconds"]["total_cpu"] < GOAL_SECONDS for r in goal),
        "runs": runs,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "note": "shared by several sessions: see each run's load_average_before; the CPU "
            "time of the compiling process (total_cpu) is what contention changes least",
        },
        "versions": {p: metadata.version(p) for p in ("anekit", "numpy", "onnx")},
    }
    out = results_path(RESULTS, args.smoke)
    write_json(out, doc)
    print(f"growth exponents {fits}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
