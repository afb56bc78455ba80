"""Training step time: anekit's sim (fp16, one compiled step program, state resident in a
session) against torch on the CPU in fp32 (forward, backward, Adam), for the same MLP, CNN
and transformer block; and the cost model's estimate of the step per chip, beside the
published figures (e5rt-reference: a 784-256-10 GELU MLP with Adam, ~2340 steps in ~1.0 s;
Orion Table 7: Stories110M, 913 +- 30 ms per step on an M4 Max).

The machine is shared: every timing is the median of repeated steps after a warm-up, sim
and torch alternate in rounds (the medians of the rounds are reported, each round kept),
and the JSON records the load average before and after. Goal: sim at most 1.5x torch.

    python benchmarks/train_step_time.py [--repeats 20] [--rounds 3] [--skip-stories]

``python benchmarks/train_step_time.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_smoke, median_us, results_path, write_json  # noqa: E402

import anekit  # noqa: E402
from anekit.frontend.builder import ops  # noqa: E402
from anekit.ir.graph import Value  # noqa: E402
from anekit.train import Adam, AdamW, Trainer  # noqa: E402
from anekit.train.losses import cross_entropy  # noqa: E402
from anekit.train.models import (  # noqa: E402
    char_transformer,
    char_transformer_weights,
    cnn,
    cnn_weights,
    mlp,
    mlp_weights,
)  # fmt: skip
from anekit.train.step import build_step, update_ops  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "train_step_time.json"
CHIPS = ("m1", "m2", "m3", "m4", "m4-max", "m5")


WARM_UP = 5  # steps before timing: compile, caches, the heap's first growth, thread start


def median_ms(fn, repeats: int) -> float:
    return median_us(fn, repeats, warm_up=WARM_UP) / 1000


def split_ms(trainer, batch, repeats: int) -> dict:
    """Median step time, and the part spent inside the segments' runners (the simulator's
    compute, engine and CPU segments); the rest is the session's work between segments
    (surface writes and reads, fp16 conversions, state hand-over) and the host's feeds."""
    compiled = trainer.compiled(batch)
    runners = compiled.program.runners("sim")
    spent = [0.0] * len(runners)
    for i, r in enumerate(runners):
        for name in ("run_stored", "run"):
            fn = getattr(r, name, None)
            if fn is not None:

                def timed(*a, _fn=fn, _i=i, **k):
                    t = time.perf_counter()
                    out = _fn(*a, **k)
                    spent[_i] += time.perf_counter() - t
                    return out

                setattr(r, name, timed)  # this instance only; removed below
    try:
        steps, inside = [], []
        for _ in range(repeats):
            spent[:] = [0.0] * len(runners)
            t = time.perf_counter()
            trainer.step(batch)
            steps.append(time.perf_counter() - t)
            inside.append(list(spent))
    finally:
        for r in runners:
            for name in ("run_stored", "run"):
                r.__dict__.pop(name, None)
    k = int(np.argsort(steps)[len(steps) // 2])  # the median step, split
    return {"step_ms": round(1000 * steps[k], 2),
            "segments_ms": [round(1000 * x, 2) for x in inside[k]],
            "between_segments_ms": round(1000 * (steps[k] - sum(inside[k])), 2)}  # fmt: skip


def flat_vs_per_parameter(graph, batch, repeats: int, rounds: int = 4) -> dict:
    """The step with the update joined over parameter groups (the default) and once per
    parameter, in interleaved rounds: medians of the rounds, and the update's op count
    (the compiled nodes downstream of an optimizer slot)."""
    runs = {f: Trainer(graph, "cross_entropy", Adam(lr=1e-3), backend="sim", flat_update=f)
            for f in (True, False)}  # fmt: skip
    seen = {f: [] for f in runs}
    for _ in range(rounds):
        for f, t in runs.items():
            seen[f].append(median_ms(lambda t=t: t.step(batch), repeats))
    out = {}
    for f, times in seen.items():
        t = runs[f]
        state = t._programs[t._active][0].state
        out["flat" if f else "per_parameter"] = {
            "step_ms": round(float(np.median(times)), 2),
            "update_ops": len(update_ops(t.compiled(batch).graph, state)),
        }  # fmt: skip
    return out


def torch_step(kind: str, w: dict, batch: dict):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    p = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in w.items()}
    opt = torch.optim.Adam(p.values(), lr=1e-3)
    x = torch.tensor(batch["x" if kind != "transformer" else "ids"])
    t = torch.tensor(batch["target"])

    def forward():
        if kind == "mlp":
            h = torch.relu(x.reshape(len(x), -1) @ p["w0"] + p["b0"])
            return h @ p["w1"] + p["b1"]
        if kind == "cnn":
            h = x
            for i in range(2):
                h = F.max_pool2d(torch.relu(F.conv2d(h, p[f"c{i}"], p[f"cb{i}"], padding=1)), 2)
            return h.reshape(len(x), -1) @ p["fc"] + p["fcb"]
        b, s = x.shape
        d = p["tok"].shape[1]
        h = p["tok"][x.long()] + p["pos"]
        mask = torch.triu(torch.full((s, s), -1e4), 1)
        layers = sum(1 for k in p if k.endswith(".q"))
        for i in range(layers):
            y = F.layer_norm(h, (d,), p[f"l{i}.ln1"])
            q, k, v = ((y @ p[f"l{i}.{n}"]).reshape(b, s, 4, d // 4).transpose(1, 2) for n in "qkv")
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // 4) ** 0.5 + mask, -1) @ v
            h = h + a.transpose(1, 2).reshape(b, s, d) @ p[f"l{i}.o"]
            y = F.layer_norm(h, (d,), p[f"l{i}.ln2"])
            y = F.gelu(y @ p[f"l{i}.up"] + p[f"l{i}.upb"], approximate="tanh")
            h = h + y @ p[f"l{i}.down"] + p[f"l{i}.downb"]
        return F.layer_norm(h, (d,), p["lnf"]) @ p["head"]

    def step():
        logits = forward()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def workloads():
    rng = np.random.default_rng(0)
    yield (
        "mlp",
        "784-256-10 ReLU MLP, batch 128",
        mlp(128, w := mlp_weights((784, 256, 10)), (1, 28, 28)),
        w,
        {"x": rng.random((128, 1, 28, 28), np.float32), "target": rng.integers(0, 10, 128)},
    )
    yield (
        "cnn",
        "conv3x3(16)-pool-conv3x3(32)-pool-fc CNN, batch 64, 28x28",
        cnn(64, w := cnn_weights()),
        w,
        {"x": rng.random((64, 1, 28, 28), np.float32), "target": rng.integers(0, 10, 64)},
    )
    w = char_transformer_weights(96, d=128, layers=1, seq=64)
    yield ("transformer", "one pre-norm transformer block d=128, 4 heads, seq 64, batch 8, vocab 96",
           char_transformer(8, 64, w), w,
           {"ids": rng.integers(0, 96, (8, 64)).astype(np.int32), "target": rng.integers(0, 96, (8, 64))})  # fmt: skip


def estimate(graph, target_value: Value, optimizer) -> dict:
    """The step as the trainer builds it (class labels fed as one-hot rows), compiled for
    m4, estimated per chip."""
    params = list(graph.metadata["parameters"])
    sg = build_step(graph, cross_entropy, optimizer, params, target_value, fp16=True)
    return estimate_program(anekit.compile(sg.graph, "m4"))


def estimate_program(cm) -> dict:
    from anekit.cost import estimate_compiled

    out = {chip: round(estimate_compiled(cm, chip).as_dict()["total_ms"], 3) for chip in CHIPS}
    out["cpu_ops"] = sum(1 for r in cm.ops if r.as_dict()["placement"] == "cpu")
    return out


def seed004_mlp() -> dict:
    """e5rt-reference's MNIST MLP: 784-256-10 GELU, Adam; 60000 images in ~2340 steps -> batch 26."""
    from anekit.train.models import _uniform  # noqa: PLC2701 - same initialisation

    rng = np.random.default_rng(0)
    x = anekit.input("x", (26, 784))
    h = ops.gelu(x @ anekit.parameter(_uniform(rng, (784, 256), 784), name="w0")
                 + anekit.parameter(_uniform(rng, (256,), 784), name="b0"))  # fmt: skip
    y = h @ anekit.parameter(_uniform(rng, (256, 10), 256), name="w1") + anekit.parameter(
        _uniform(rng, (10,), 256), name="b1"
    )
    est = estimate(anekit.graph([y]), Value("target", (26, 10), "fp32"), Adam(lr=1e-3))
    return {"published": "2340 steps in ~1.0 s on the engine, ~0.43 ms per step (e5rt-reference 2.5.1)",
            "estimate_ms_per_step": est}  # fmt: skip


def stories110m() -> dict:
    """A Stories110M-shaped step (llama2.c: dim 768, 12 layers, 12 heads, SwiGLU 2048, vocab
    32000, seq 256; no RoPE), batch 1, estimated (it is far too large to run on the sim)."""
    d, layers, heads, hidden, vocab, seq = 768, 12, 12, 2048, 32000, 256
    rng = np.random.default_rng(0)

    def param(name, shape):
        return anekit.parameter((rng.standard_normal(shape) * 0.02).astype(np.float32), name=name)

    ids = anekit.input("ids", (1, seq), "int32")
    h = ops.gather(param("tok", (vocab, d)), ids, axis=0)
    mask = anekit.constant(np.triu(np.full((seq, seq), -1e4, np.float32), 1))
    hd = d // heads

    def split(t):
        return ops.transpose(ops.reshape(t, (1, seq, heads, hd)), (0, 2, 1, 3))

    for i in range(layers):
        x = ops.rms_norm(h, param(f"l{i}.n1", (d,)))
        q, k, v = (split(x @ param(f"l{i}.{n}", (d, d))) for n in "qkv")
        a = ops.softmax(q @ ops.transpose(k, (0, 1, 3, 2)) * float(hd**-0.5) + mask, -1) @ v
        h = h + ops.reshape(ops.transpose(a, (0, 2, 1, 3)), (1, seq, d)) @ param(f"l{i}.o", (d, d))
        x = ops.rms_norm(h, param(f"l{i}.n2", (d,)))
        gate = ops.silu(x @ param(f"l{i}.w1", (d, hidden))) * (x @ param(f"l{i}.w3", (d, hidden)))
        h = h + gate @ param(f"l{i}.w2", (hidden, d))
    logits = ops.rms_norm(h, param("nf", (d,))) @ param("head", (d, vocab))
    t0 = time.perf_counter()
    est = estimate(anekit.graph([logits]), Value("target", (1, seq, vocab), "fp32"), AdamW(lr=1e-5))
    return {"published": "Orion (Table 7): 913 +- 30 ms per step on an M4 Max "
                         "(849-908 ms of compute), grad_accum=4",
            "estimate_ms_per_micro_batch": est,
            "estimate_ms_per_step_grad_accum_4": {k: round(4 * v, 1) for k, v in est.items()
                                                  if k != "cpu_ops"},
            "build_and_compile_seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-stories", action="store_true")
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:  # the first workload, two steps a side, no Stories110M estimate
        args.repeats, args.rounds, args.skip_stories = 2, 1, True
    from anekit.simulator import gemm

    # torch runs on one thread; the simulator's own GEMM splits a large product's rows over
    # its threads (numpy's BLAS is held to one), as it does by default
    doc = {"benchmark": "training step: anekit sim (fp16) vs torch CPU fp32 (1 thread)",
           "load_average_start": os.getloadavg(), "repeats": args.repeats,
           "sim_gemm_threads": gemm.THREADS if gemm.ACCELERATED else 0, "workloads": {}}  # fmt: skip
    for kind, what, graph, w, batch in islice(workloads(), 1 if args.smoke else None):
        trainer = Trainer(graph, "cross_entropy", Adam(lr=1e-3), backend="sim")
        # alternating rounds: a slow spell of the shared host lands on both sides alike
        step = torch_step(kind, w, batch)
        rounds = [(median_ms(lambda t=trainer, b=batch: t.step(b), args.repeats),
                   median_ms(step, args.repeats)) for _ in range(args.rounds)]  # fmt: skip
        sim_ms = float(np.median([r[0] for r in rounds]))
        torch_ms = float(np.median([r[1] for r in rounds]))
        compiled = trainer.compiled(batch)
        split = split_ms(trainer, batch, args.repeats)
        doc["workloads"][kind] = {
            "model": what, "sim_ms": round(sim_ms, 2), "torch_cpu_fp32_ms": round(torch_ms, 2),
            "ratio_sim_over_torch": round(sim_ms / torch_ms, 2),
            "rounds_sim_torch_ms": [[round(a, 2), round(b, 2)] for a, b in rounds],
            "segments": [s.device for s in compiled.segments], "split": split,
            "cpu_ops_by_op": dict(Counter(r["op"] for r in trainer.check(batch))),
            "estimate_ms_per_chip": estimate_program(compiled),
            "update_flat_vs_per_parameter": flat_vs_per_parameter(graph, batch, args.repeats // 2),
        }  # fmt: skip
        print(kind, doc["workloads"][kind])
    doc["published_seed004_mlp"] = seed004_mlp()
    if not args.skip_stories:
        doc["published_orion_stories110m"] = stories110m()
    doc["load_average_end"] = os.getloadavg()
    write_json(results_path(RESULTS, args.smoke), doc)
    print(doc)


if __name__ == "__main__":
    main()
