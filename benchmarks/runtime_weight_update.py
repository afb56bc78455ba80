"""Benchmark: updating every weight of a Stories110M-sized model in place against a full recompile.

Writes ``benchmarks/results/runtime_weight_update.json``.

The model is Orion's training layout (section 4.5): 12 layers of dim 768 (FFN
hidden 2048), five weight-bearing programs per layer, 60 in all, each its own bundle on
disk: ``fwd_attn`` (Wq, Wk, Wv, Wo), ``fwd_ffn`` (W1, W2, W3, SwiGLU), ``ffn_bwd`` (the
transposes of W2, W1, W3), ``qkv_bwd`` (of Wq, Wk, Wv) and ``wo_bwd`` (of Wo): 85M
parameters, 339 MB of fp16 weight files (the backward programs hold the transposes). Sixteen tokens per program. Weights are seeded random.

Three measurements, each the median of ``--repeat`` rounds:

- ``update``: every weight of all 60 programs (new random values) through
  ``anekit.runtime.weight_update.update_many`` (each program's ``update_weights`` on a
  few threads), without verification probes: conversion, rebuilding each weight file,
  sha256, the atomic commit (fsync'd files, journal, renames);
- ``recompile``: ``anekit.compile`` + ``save`` of all 60 programs with the new weights
  (what an update replaces);
- ``write``: writing the same bytes (one file per program, fsync'd) with ``os.write``:
  the floor the goal measures against (update within 2x of it).

And, one program at a time so memory stays bounded, the live variant: a program loaded
on the simulator, updated (its segments reloaded) vs compiled, saved, loaded and
prepared again.

The machine is shared (load average recorded); numbers are wall-clock.

    python benchmarks/runtime_weight_update.py [--repeat 3] [--layers 12] [--backend sim]

``--backend ane`` (on a Mac) runs the live variant on the engine through e5rt, where the
reload of an updated program is e5rt's compile; elsewhere it stops with the backend's reason.

``python benchmarks/runtime_weight_update.py --smoke`` runs the same code paths in seconds (the tests run it).
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
from _common import add_smoke, machine, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import anekit  # noqa: E402
from anekit import ops  # noqa: E402
from anekit.runtime.weight_update import update_many  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "runtime_weight_update.json"
DIM, HIDDEN, TOKENS = 768, 2048, 16
ORION = {"reload_ms": 494, "recompile_ms": 4200, "speedup": 8.5}


def layer_weights(rng: np.random.Generator, layer: int) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    names = {"wq": (DIM, DIM), "wk": (DIM, DIM), "wv": (DIM, DIM), "wo": (DIM, DIM),
             "w1": (DIM, HIDDEN), "w3": (DIM, HIDDEN), "w2": (HIDDEN, DIM)}  # fmt: skip
    return {f"l{layer}.{k}": w(*s) for k, s in names.items()}


def programs_of(layer: int, w: dict[str, np.ndarray]) -> dict[str, anekit.Graph]:
    """The five weight-bearing programs of one layer (the graphs to compile)."""
    p = f"l{layer}."
    c = {k: anekit.constant(v, name=k) for k, v in w.items()}

    def t(name: str) -> anekit.Tensor:  # the transpose (the builder keeps its own copy)
        return anekit.constant(w[name].T, name=name)

    x = anekit.input("x", (TOKENS, DIM))
    q, k, v = (ops.matmul(x, c[p + n]) for n in ("wq", "wk", "wv"))
    attn = ops.matmul(ops.add(ops.mul(q, k), v), c[p + "wo"], name="y")
    h = anekit.input("x", (TOKENS, DIM))
    gate = ops.mul(ops.sigmoid(ops.matmul(h, c[p + "w1"])), ops.matmul(h, c[p + "w1"]))
    ffn = ops.matmul(ops.mul(gate, ops.matmul(h, c[p + "w3"])), c[p + "w2"], name="y")
    g = anekit.input("g", (TOKENS, DIM))
    dh = ops.matmul(g, t(p + "w2"))
    ffn_bwd = ops.add(ops.matmul(dh, t(p + "w1")), ops.matmul(dh, t(p + "w3")), name="dx")
    g2 = anekit.input("g", (TOKENS, DIM))
    qkv_bwd = ops.add(ops.add(ops.matmul(g2, t(p + "wq")), ops.matmul(g2, t(p + "wk"))),
                      ops.matmul(g2, t(p + "wv")), name="dx")  # fmt: skip
    g3 = anekit.input("g", (TOKENS, DIM))
    wo_bwd = ops.matmul(g3, t(p + "wo"), name="dx")
    return {
        "fwd_attn": anekit.graph([attn], name=f"l{layer}_fwd_attn"),
        "fwd_ffn": anekit.graph([ffn], name=f"l{layer}_fwd_ffn"),
        "ffn_bwd": anekit.graph([ffn_bwd], name=f"l{layer}_ffn_bwd"),
        "qkv_bwd": anekit.graph([qkv_bwd], name=f"l{layer}_qkv_bwd"),
        "wo_bwd": anekit.graph([wo_bwd], name=f"l{layer}_wo_bwd"),
    }


def compile_all(weights: list[dict], root: Path) -> list[Path]:
    paths = []
    root.mkdir(parents=True, exist_ok=True)
    for layer, w in enumerate(weights):
        for kind, graph in programs_of(layer, w).items():
            paths.append(anekit.compile(graph, "m4").save(root / f"l{layer}_{kind}.anekit"))
    return paths


def updates(program, names: list[str], flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ANN001
    """New values for a program's weights: a backward program's builder constant is the
    transpose (the builder copies constants, so it is a weight of its own)."""
    shapes = program.weight_map().weights
    return {n: flat[n] if flat[n].shape == shapes[n].shape else flat[n].T for n in names}


def write_floor(sizes: list[int], root: Path) -> float:
    """Seconds to write (and fsync) files of these sizes from memory."""
    data = [
        np.random.default_rng(i).integers(0, 255, n, dtype=np.uint8) for i, n in enumerate(sizes)
    ]
    start = time.perf_counter()
    for i, d in enumerate(data):
        fd = os.open(root / f"floor_{i}.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(d)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
    seconds = time.perf_counter() - start
    for i in range(len(data)):
        (root / f"floor_{i}.bin").unlink()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--backend", default="sim", help="the live variant's backend (sim, ane)")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.repeat, args.layers = 1, 1
    from anekit.runtime import backends

    why = backends.get(args.backend).unavailable()
    if why:
        print(f"backend {args.backend}: {why}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="anekit-bench-") as tmp:
        root = Path(tmp)
        weights = [layer_weights(rng, i) for i in range(args.layers)]
        start = time.perf_counter()
        paths = compile_all(weights, root / "live")
        first_compile = time.perf_counter() - start
        programs = [anekit.load(p) for p in paths]
        names = [p.weight_names() for p in programs]
        bundles = [sum(f.stat().st_size for f in p.rglob("weight.bin")) for p in paths]
        params = sum(a.size for w in weights for a in w.values())
        print(f"{len(paths)} programs, {params / 1e6:.1f}M parameters, "
              f"{sum(bundles) / 2**20:.0f} MiB of weight files; first compile {first_compile:.1f} s")  # fmt: skip
        rounds = {"update": [], "recompile": [], "write": []}
        for r in range(args.repeat):
            new = [layer_weights(np.random.default_rng(100 + r), i) for i in range(args.layers)]
            flat = {k: v for w in new for k, v in w.items()}
            start = time.perf_counter()
            reports = update_many(
                [(p, updates(p, wanted, flat)) for p, wanted in zip(programs, names, strict=True)],
                verify=False,
            )
            rounds["update"].append(time.perf_counter() - start)
            written = sum(r.bytes_written for r in reports)
            start = time.perf_counter()
            compile_all(new, root / f"recompile{r}")
            rounds["recompile"].append(time.perf_counter() - start)
            rounds["write"].append(write_floor(bundles, root))
            print({k: round(v[-1], 3) for k, v in rounds.items()})
        # the live variant, one program at a time: update with the simulator loaded
        live = {"update_and_reload": [], "recompile_save_load": []}
        flat = {k: v for w in weights for k, v in w.items()}
        for i, (path, wanted) in enumerate(zip(paths[:5], names[:5], strict=True)):
            program = anekit.load(path)
            program.runners(args.backend)
            start = time.perf_counter()
            program.update_weights(updates(program, wanted, flat), verify=False)
            live["update_and_reload"].append(time.perf_counter() - start)
            program.release(args.backend)
            layer, kind = divmod(i, 5)
            graph = list(programs_of(layer, weights[layer]).values())[kind]
            start = time.perf_counter()
            again = anekit.load(anekit.compile(graph, "m4").save(root / f"again{i}.anekit"))
            again.runners(args.backend)
            again.release(args.backend)
            live["recompile_save_load"].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in rounds.items()}
    speedup = med["recompile"] / med["update"]
    doc = {
        "benchmark": "runtime_weight_update",
        "model": {
            "layers": args.layers,
            "dim": DIM,
            "hidden": HIDDEN,
            "tokens": TOKENS,
            "programs": len(paths),
            "parameters": int(params),
            "weight_file_bytes": int(sum(bundles)),
        },  # fmt: skip
        "median_seconds": {k: round(v, 4) for k, v in med.items()},
        "rounds_seconds": {k: [round(x, 4) for x in v] for k, v in rounds.items()},
        "bytes_written_per_update": int(written),
        "speedup_vs_recompile": round(speedup, 2),
        "update_vs_write_floor": round(med["update"] / med["write"], 2),
        # no update that writes the changed bytes beats the write itself, so recompile/write
        # is the largest speedup any such update can reach against this recompile
        "speedup_ceiling_recompile_over_write": round(med["recompile"] / med["write"], 2),
        "goal": {
            "speedup_at_least": 20,
            "within_x_of_write": 2,
            "speedup_met": speedup >= 20,
            "write_met": med["update"] <= 2 * med["write"],
        },  # fmt: skip
        "orion_anchor": ORION,
        "live_one_program_at_a_time": {
            "backend": args.backend,
            "programs": len(live["update_and_reload"]),
            "update_and_reload_seconds_sum": round(sum(live["update_and_reload"]), 4),
            "recompile_save_load_seconds_sum": round(sum(live["recompile_save_load"]), 4),
        },
        "first_compile_seconds": round(first_compile, 3),
        "machine": machine(load_before),
    }
    # a Mac's run goes beside this machine's, not over it
    write_json(
        results_path(
            RESULTS
            if args.backend == "sim"
            else RESULTS.with_name(f"{RESULTS.stem}_{args.backend}.json"),
            args.smoke,
        ),
        doc,
    )
    print(f"update {med['update']:.3f} s, recompile {med['recompile']:.3f} s ({speedup:.1f}x), "
          f"write floor {med['write']:.3f} s ({med['update'] / med['write']:.2f}x); "
          f"ceiling for any update that writes the bytes {med['recompile'] / med['write']:.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
