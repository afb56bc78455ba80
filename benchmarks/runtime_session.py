"""Benchmark: what the runtime's steps cost on the simulator: a session step's overhead, an
adapter swap, and a cache hit against a compile.

Writes ``benchmarks/results/runtime_session.json``.

- per-step overhead: a session step (``run``) of a counter program (one engine
  segment, state resident on its surface) and of an RNN cell (x [1, 256], h [1, 256]),
  against the simulator running the same segment directly on the same inputs
  (``run_stored``): the difference is what the session adds per step (surface writes and
  reads, feeding, state hand-off). ``Program.run`` (state through the caller) is shown
  beside it. The three are timed interleaved, step by step, medians;
- adapter swap: ``sess.set_adapter`` on a LoRA model (two 768x768 projections with
  rank-8 adapters on q and v) against recompiling the model with the adapter merged;
- cache hit: ``anekit.load_or_compile`` of a 4-layer 768-wide MLP, a miss (compile,
  insert) and then a hit, in a fresh cache directory.

Medians over ``--repeat`` runs. The machine is shared (load average recorded).

    python benchmarks/runtime_session.py [--repeat 200]

``python benchmarks/runtime_session.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import add_smoke, machine, median_us, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import anekit  # noqa: E402
from anekit import ops  # noqa: E402
from anekit.runtime.cache import ProgramCache  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "runtime_session.json"


def step_overhead(repeat: int) -> dict:
    out = {}
    c = anekit.input("c", (1, 1))
    counter = anekit.graph([ops.add(c, np.float32(1.0), name="c_next")])
    rng = np.random.default_rng(0)
    x, h = anekit.input("x", (1, 256)), anekit.input("h", (1, 256))
    w = rng.standard_normal((256, 256)).astype(np.float32) * 0.05
    u = rng.standard_normal((256, 256)).astype(np.float32) * 0.05
    rnn = anekit.graph([ops.tanh(ops.add(ops.matmul(x, w), ops.matmul(h, u)), name="h_next")])
    cases = {"counter": (counter, {"c": "c_next"}, {}),
             "rnn_256": (rnn, {"h": "h_next"}, {"x": rng.standard_normal((1, 256)).astype(np.float32)})}  # fmt: skip
    for name, (graph, state, feeds) in cases.items():
        program = anekit.compile(graph, "m4").program
        sess = program.session("sim", state=state)
        runner = program.runners("sim")[0]
        seg = program.segments[0]
        stored = {io.mil_name: np.zeros(io.mil_shape, np.float32) for io in seg.inputs}
        for io in seg.inputs:
            if io.value in feeds:
                pad = [(0, m - s) for s, m in zip(io.shape, io.mil_shape, strict=True)]
                stored[io.mil_name] = np.pad(feeds[io.value], pad)
        full = {
            **feeds,
            **{
                s: np.zeros(p.shape, np.float32)
                for s in state
                for p in program.inputs
                if p.name == s
            },
        }
        # interleaved, one step at a time, so load changes hit all three alike
        times: dict[str, list[float]] = {"session": [], "alone": [], "run": []}
        calls = {"session": lambda: sess.run(feeds), "alone": lambda: runner.run_stored(dict(stored)),  # noqa: B023
                 "run": lambda: program.run(full)}  # noqa: B023  # fmt: skip
        for _ in range(repeat * 5):
            for key, call in calls.items():
                start = time.perf_counter()
                call()
                times[key].append(time.perf_counter() - start)
        session_us, raw_us, run_us = (
            statistics.median(times[k]) * 1e6 for k in ("session", "alone", "run")
        )
        out[name] = {"session_step_us": round(session_us, 1), "segment_alone_us": round(raw_us, 1),
                     "overhead_us": round(session_us - raw_us, 1), "program_run_us": round(run_us, 1)}  # fmt: skip
    return out


def adapter_swap(repeat: int) -> dict:
    rng = np.random.default_rng(1)
    d = 768
    x = anekit.input("x", (1, 16, d))
    weights = {
        n: rng.standard_normal((d, d)).astype(np.float32) * 0.02 for n in ("q_proj", "v_proj")
    }

    def model(ws: dict) -> anekit.Graph:
        q = ops.matmul(x, anekit.constant(ws["q_proj"], name="q_proj.weight"))
        v = ops.matmul(x, anekit.constant(ws["v_proj"], name="v_proj.weight"))
        return anekit.graph([ops.mul(q, v, name="y")])

    lora = anekit.LoRA(rank=8, alpha=16, targets=["*q_proj*", "*v_proj*"])
    compiled = anekit.compile(model(weights), "m4", lora=lora)
    sess = compiled.session("sim")
    adapters = [
        anekit.lora.Adapter(
            {
                n: (
                    rng.standard_normal((d, 8)).astype(np.float32) * 0.01,
                    rng.standard_normal((8, d)).astype(np.float32) * 0.01,
                )
                for n in ("q_proj", "v_proj")
            }
        )  # fmt: skip
        for _ in range(2)
    ]
    i = iter(range(10**9))
    swap_us = median_us(lambda: sess.set_adapter(adapters[next(i) % 2]), repeat)
    feeds = {"x": rng.standard_normal((1, 16, d)).astype(np.float32)}
    step_us = median_us(lambda: sess.run(feeds), max(5, repeat // 10))
    a, b = adapters[0].layers["q_proj"]
    merged = {**weights, "q_proj": weights["q_proj"] + lora.scale * a @ b}
    start = time.perf_counter()
    anekit.compile(model(merged), "m4").program.runners("sim")
    recompile_us = (time.perf_counter() - start) * 1e6
    return {"set_adapter_us": round(swap_us, 1), "step_us": round(step_us, 1),
            "recompile_merged_us": round(recompile_us, 1),
            "speedup_vs_recompile": round(recompile_us / swap_us, 1)}  # fmt: skip


def cache_hit() -> dict:
    rng = np.random.default_rng(2)
    x = anekit.input("x", (1, 768))
    h = x
    for i in range(4):
        h = ops.relu(
            ops.matmul(
                h,
                anekit.constant(
                    rng.standard_normal((768, 768)).astype(np.float32) * 0.03, name=f"w{i}"
                ),
            )
        )
    graph = anekit.graph([ops.mul(h, np.float32(1.0), name="y")])
    with tempfile.TemporaryDirectory() as tmp:
        cache = ProgramCache(tmp)
        start = time.perf_counter()
        anekit.load_or_compile(graph, "m4", cache=cache)
        miss = time.perf_counter() - start
        hits = []
        for _ in range(5):
            start = time.perf_counter()
            anekit.load_or_compile(graph, "m4", cache=cache)
            hits.append(time.perf_counter() - start)
        start = time.perf_counter()
        anekit.compile(graph, "m4").program  # noqa: B018 - the compile a hit replaces
        compile_only = time.perf_counter() - start
    hit = statistics.median(hits)
    return {"miss_ms": round(miss * 1e3, 2), "hit_ms": round(hit * 1e3, 2),
            "compile_and_emit_ms": round(compile_only * 1e3, 2),
            "hit_speedup_vs_compile": round(compile_only / hit, 1),
            "note": "a hit hashes the imported graph (weights included), reads and verifies the bundle"}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 2
    load_before = os.getloadavg()
    doc = {
        "benchmark": "runtime_session",
        "step_overhead": step_overhead(args.repeat),
        "adapter_swap": adapter_swap(args.repeat),
        "cache": cache_hit(),
        "machine": machine(load_before),
    }
    write_json(results_path(RESULTS, args.smoke), doc)
    for key in ("step_overhead", "adapter_swap", "cache"):
        print(key, doc[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
