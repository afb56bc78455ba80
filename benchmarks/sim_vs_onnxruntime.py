"""Benchmark: GPT-2 124M on 64 tokens, the fp16 simulator running the compiled bundle against
onnxruntime running the ONNX model. Goal (issue 4): sim time at most 1.5x onnxruntime's.

Writes ``benchmarks/results/sim_vs_onnxruntime.json``.

How it measures (one process, after one warm-up run of each):
- anekit: the zoo's ``gpt2_124m`` compiled for ``--target`` and saved as a bundle; the bundle
  is loaded once (``anekit.load``: programs parsed, weights decoded) and
  ``Program.run(feeds, "sim")`` is timed ``--repeat`` times. Each segment's share of a run is
  recorded from a separate profiled run;
- onnxruntime: ``InferenceSession`` on the same ONNX file, CPUExecutionProvider, default
  options and threads, ``session.run`` timed ``--repeat`` times on the same token ids;
- agreement: cosine of the logits and top-1 agreement at every position.

    python benchmarks/sim_vs_onnxruntime.py [--repeat 5] [--target m4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "sim_vs_onnxruntime.json"
GOAL_RATIO = 1.5


def _times(fn, repeat: int) -> list[float]:  # noqa: ANN001
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _segment_shares(program, feeds) -> list[dict]:  # noqa: ANN001
    """Seconds per segment in one run (wrapping each simulator program's run)."""
    sims = program._programs("sim")
    spent: list[float] = [0.0] * len(sims)
    originals = [s.run for s in sims]
    for i, sim in enumerate(sims):

        def timed(*args, _i=i, _run=originals[i], **kwargs):  # noqa: ANN002, ANN003, ANN202
            start = time.perf_counter()
            try:
                return _run(*args, **kwargs)
            finally:
                spent[_i] += time.perf_counter() - start

        sim.run = timed
    try:
        program.run(feeds, "sim")
    finally:
        for sim, run in zip(sims, originals, strict=True):
            sim.run = run
    return [
        {"segment": s.index, "device": s.device, "seconds": t}
        for s, t in zip(program.segments, spent, strict=True)
    ]


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--target", default="m4")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import onnxruntime as ort
    from tests import zoo
    from tests.numerics import agreement

    import anekit

    case = zoo.load("gpt2_124m")
    feeds = dict(case.feeds)
    with tempfile.TemporaryDirectory(prefix="sim-bench-", dir=REPO / ".cache") as tmp:
        start = time.perf_counter()
        bundle = anekit.compile(case.path, args.target).save(Path(tmp) / "gpt2.anekit")
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        program = anekit.load(bundle)
        program.run(feeds, "sim")  # loads the simulator programs (weights decoded once)
        load_seconds = time.perf_counter() - start
        sim = _times(lambda: program.run(feeds, "sim"), args.repeat)
        shares = _segment_shares(program, feeds)
        ours = program.run(feeds, "sim")["logits"]
    session = ort.InferenceSession(str(case.path), providers=["CPUExecutionProvider"])
    name = session.get_outputs()[0].name
    theirs = session.run([name], feeds)[0]
    onnx_times = _times(lambda: session.run([name], feeds), args.repeat)
    s, o = statistics.median(sim), statistics.median(onnx_times)
    top1 = float(np.mean(ours.argmax(-1) == theirs.argmax(-1)))
    result = {
        "benchmark": "sim_vs_onnxruntime",
        "model": {
            "name": "GPT-2 124M (transformers.GPT2Config defaults, seeded random weights)",
            "tokens": int(feeds["input_ids"].shape[1]),
        },  # fmt: skip
        "target": args.target,
        "segments": [{"index": seg.index, "device": seg.device} for seg in program.segments],
        "compile_and_save_seconds": compile_seconds,
        "load_and_first_run_seconds": load_seconds,
        "sim_seconds": sim,
        "sim_median_seconds": s,
        "sim_segment_seconds": shares,
        "onnxruntime_seconds": onnx_times,
        "onnxruntime_median_seconds": o,
        "ratio": s / o,
        "goal_ratio": GOAL_RATIO,
        "goal_met": s / o <= GOAL_RATIO,
        "agreement": {
            "top1": top1,
            "cosine": agreement(ours, theirs).cosine,
            "max_relative_error": agreement(ours, theirs).max_relative_error,
        },  # fmt: skip
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "onnxruntime": _version("onnxruntime"),
            "numpy": _version("numpy"),
        },  # fmt: skip
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"sim {s * 1000:.0f} ms, onnxruntime {o * 1000:.0f} ms: {s / o:.2f}x (goal <= {GOAL_RATIO}x), "
          f"top-1 {top1:.3f} -> {RESULTS}")  # fmt: skip


if __name__ == "__main__":
    main()
