"""Benchmark: GPT-2 124M, anekit (ONNX -> bundle on disk) against coremltools (traced torch
model -> saved .mlpackage). Goal: anekit at least 10x faster.

Writes ``benchmarks/results/compile_vs_coremltools.json``.

How it measures (each run in a fresh child process, so no run warms another's caches):
- the model is the zoo's ``gpt2_124m``: ``transformers.GPT2Config()`` sizes with seeded random
  weights, 64 tokens, exported by torch's dynamo exporter to ``model.onnx`` + external data;
- anekit: wall time of ``anekit.compile(path, target)`` followed by ``CompiledModel.save``
  (MIL text and fp16 weight.bin of every segment, manifest with sha256, fsync'd), split into
  ONNX import, the middle-end passes, MIL emission and the write (the weights are converted
  and hashed on worker threads from emission on, and the write waits for them as it goes:
  those two phases overlap, their sum is what emission plus writing cost);
- coremltools: wall time of ``torch.jit.trace`` of the same model (same config and seed) plus
  ``coremltools.convert(..., convert_to="mlprogram")`` with its defaults and
  ``MLModel.save`` of the .mlpackage. The torch model is built before the clock starts.
  coremltools 9 cannot convert the transformers 5 GPT-2 (ops ``new_ones``, ``diff``), so the
  traced module is the same network written with plain torch ops on the same weights
  (``_plain_gpt2``; its logits are checked against transformers' before timing).

Both sides run alternately, each run after the machine has calmed down (1-minute load
average below ``--max-load``, waiting at most ``--max-wait`` seconds); each run records
the load average it started at and the CPU seconds (user + system, all threads) it used.
Medians are reported.

    python benchmarks/compile_vs_coremltools.py [--repeat 5] [--target m4] [--max-load 1.5]

``python benchmarks/compile_vs_coremltools.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "compile_vs_coremltools.json"
GOAL_SPEEDUP = 10.0


def child_anekit(model: Path, out: Path, target: str) -> None:
    """Compile and save once; print the phase times as JSON."""
    import anekit
    from anekit.codegen.model_bundle import bundle_contents
    from anekit.compiler import compile as compile_model
    from anekit.frontend.onnx import from_onnx

    del anekit
    cpu = _cpu_seconds()
    start = time.perf_counter()
    graph = from_onnx(model)
    imported = time.perf_counter()
    compiled = compile_model(graph, target)
    passed = time.perf_counter()
    contents = bundle_contents(compiled)
    emitted = time.perf_counter()
    from anekit.codegen.bundle import write_bundle

    write_bundle(contents, out)
    written = time.perf_counter()
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(json.dumps({
        "seconds": written - start,
        "cpu_seconds": _cpu_seconds() - cpu,
        "import_seconds": imported - start,
        "passes_seconds": passed - imported,
        "emit_seconds": emitted - passed,
        "write_seconds": written - emitted,
        "bundle_bytes": size,
        "segments": [s.device for s in compiled.segments],
    }))  # fmt: skip


def child_coremltools(out: Path, tokens: int, spec_name: str) -> None:
    """Trace the torch model, convert it, save the .mlpackage; print the times as JSON."""
    sys.path.insert(0, str(REPO))
    import coremltools as ct
    import numpy as np
    import torch
    import transformers
    from tests import zoo_builders

    spec = getattr(zoo_builders, spec_name)
    torch.manual_seed(zoo_builders.SEED)
    config = transformers.GPT2Config(
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_head=spec.n_head,
        n_positions=spec.n_positions,
        use_cache=False,
    )
    lm = transformers.GPT2LMHeadModel(config).eval()

    model = _plain_gpt2(torch, lm, tokens).eval()
    check = torch.randint(0, config.vocab_size, (1, tokens))
    with torch.no_grad():
        error = (model(check) - lm(input_ids=check, use_cache=False).logits).abs().max().item()
    if error > 1e-3:
        raise RuntimeError(f"the plain-torch GPT-2 differs from transformers' by {error}")
    ids = torch.zeros((1, tokens), dtype=torch.int64)
    cpu = _cpu_seconds()
    start = time.perf_counter()
    with torch.no_grad():
        traced = torch.jit.trace(model, ids)
    traced_at = time.perf_counter()
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name="input_ids", shape=(1, tokens), dtype=np.int32)],
        convert_to="mlprogram",
    )
    converted = time.perf_counter()
    model.save(str(out))
    saved = time.perf_counter()
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(json.dumps({
        "seconds": saved - start,
        "cpu_seconds": _cpu_seconds() - cpu,
        "trace_seconds": traced_at - start,
        "convert_seconds": converted - traced_at,
        "save_seconds": saved - converted,
        "package_bytes": size,
    }))  # fmt: skip


def _plain_gpt2(torch, lm, tokens: int):  # noqa: ANN001, ANN202
    """The same GPT-2 (the transformers model's weights) written with plain torch ops.

    coremltools 9 cannot convert the transformers 5 GPT-2 (its `new_ones` and `diff` ops), so
    the model coremltools traces is this one: the same computation (pre-norm blocks, causal
    attention, tanh GELU, tied head) on the same tensors.
    """
    nn, f = torch.nn, torch.nn.functional
    t = lm.transformer
    heads = lm.config.n_head

    class Block(nn.Module):
        def __init__(self, block) -> None:  # noqa: ANN001
            super().__init__()
            self.b = block

        def forward(self, x, mask):  # noqa: ANN001, ANN202
            b = self.b
            h = b.ln_1(x)
            qkv = h @ b.attn.c_attn.weight + b.attn.c_attn.bias
            q, k, v = qkv.split(x.shape[-1], dim=-1)
            n, s, c = x.shape
            q, k, v = (z.reshape(n, s, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            scores = q @ k.transpose(-1, -2) / float(c // heads) ** 0.5 + mask
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, s, c)
            x = x + a @ b.attn.c_proj.weight + b.attn.c_proj.bias
            h = b.ln_2(x)
            h = f.gelu(h @ b.mlp.c_fc.weight + b.mlp.c_fc.bias, approximate="tanh")
            return x + h @ b.mlp.c_proj.weight + b.mlp.c_proj.bias

    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block(b) for b in t.h)
            self.t = t
            causal = torch.triu(torch.full((tokens, tokens), -1e4), diagonal=1)
            self.register_buffer("mask", causal)

        def forward(self, input_ids):  # noqa: ANN001, ANN202
            pos = torch.arange(input_ids.shape[1])
            x = self.t.wte(input_ids) + self.t.wpe(pos)
            for block in self.blocks:
                x = block(x, self.mask)
            return self.t.ln_f(x) @ self.t.wte.weight.T

    return Plain()


def _cpu_seconds() -> float:
    """User + system CPU time of this process so far (every thread)."""
    t = os.times()
    return t.user + t.system


def _wait_for_quiet(max_load: float, max_wait: float) -> list[float]:
    """Sleep until the 1-minute load average is below ``max_load`` (at most ``max_wait`` s)."""
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(5)
    return [round(x, 2) for x in os.getloadavg()]


def _child(*args: str, max_load: float, max_wait: float) -> dict:
    load = _wait_for_quiet(max_load, max_wait)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO)}
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed:\n{done.stderr[-4000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_average_before": load}


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--target", default="m4")
    parser.add_argument("--max-load", type=float, default=1.5, help="start runs below this load")
    parser.add_argument("--max-wait", type=float, default=600.0, help="seconds to wait for it")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:  # the 2-layer GPT-2 of the zoo, once, without waiting for a quiet machine
        args.repeat, args.max_wait = 1, 0.0
    zoo_name, spec = ("gpt2_dynamo", "GPT2_TEST") if args.smoke else ("gpt2_124m", "GPT2_124M")
    quiet = {"max_load": args.max_load, "max_wait": args.max_wait}
    sys.path.insert(0, str(REPO))
    from tests import zoo

    case = zoo.load(zoo_name)
    tokens = int(case.feeds["input_ids"].shape[1])
    anekit_runs, coreml_runs = [], []
    with tempfile.TemporaryDirectory(prefix="compile-bench-", dir=REPO / ".cache") as tmp:
        for i in range(args.repeat):
            bundle = str(Path(tmp) / f"gpt2-{i}.anekit")
            anekit_runs.append(_child("anekit", str(case.path), bundle, args.target, **quiet))
            package = str(Path(tmp) / f"gpt2-{i}.mlpackage")
            coreml_runs.append(_child("coremltools", package, str(tokens), spec, **quiet))
            print(
                f"run {i}: anekit {anekit_runs[-1]['seconds']:.2f} s, coremltools {coreml_runs[-1]['seconds']:.2f} s",
                flush=True,
            )
    a = statistics.median(r["seconds"] for r in anekit_runs)
    c = statistics.median(r["seconds"] for r in coreml_runs)

    def medians(runs: list[dict], keys: list[str]) -> dict:
        return {k: statistics.median(r[k] for r in runs) for k in keys}

    result = {
        "benchmark": "compile_vs_coremltools",
        "model": {
            "name": "GPT-2 124M (transformers.GPT2Config defaults, seeded random weights)",
            "tokens": tokens,
            "onnx": "dynamo exporter, external data",
        },  # fmt: skip
        "target": args.target,
        "anekit": {
            "what": "anekit.compile(onnx path) + CompiledModel.save(bundle)",
            "runs": anekit_runs,
            "median_seconds": a,
            "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in anekit_runs),
            "median_phases": medians(
                anekit_runs, ["import_seconds", "passes_seconds", "emit_seconds", "write_seconds"]
            ),
        },
        "coremltools": {
            "what": "torch.jit.trace + coremltools.convert(mlprogram, defaults) + MLModel.save",
            "runs": coreml_runs,
            "median_seconds": c,
            "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in coreml_runs),
            "median_phases": medians(
                coreml_runs, ["trace_seconds", "convert_seconds", "save_seconds"]
            ),
        },
        "speedup": c / a,
        "goal_speedup": GOAL_SPEEDUP,
        "goal_met": c / a >= GOAL_SPEEDUP,
        "quiet": {
            "max_load": args.max_load,
            "runs_started_above_it": sum(
                r["load_average_before"][0] >= args.max_load for r in anekit_runs + coreml_runs
            ),
        },
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "coremltools": _version("coremltools"),
            "torch": _version("torch"),
            "numpy": _version("numpy"),
        },  # fmt: skip
    }
    out = results_path(RESULTS, args.smoke)
    write_json(out, result)
    print(
        f"anekit {a:.2f} s, coremltools {c:.2f} s: {c / a:.1f}x (goal {GOAL_SPEEDUP:.0f}x) -> {out}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "anekit":
        child_anekit(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "coremltools":
        child_coremltools(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        main()
