"""Benchmark: the sim backend's per-op overhead, fp16 rounding speed, and a GPT-2-sized program.

Writes ``benchmarks/results/sim_ops.json``.

- ``overhead``: a chain of N tiny ops (relu on 8 elements): run time / N is the interpreter's
  own cost per op (argument gathering, output checks, freeing), the kernel being negligible.
- ``rounding``: float32 -> fp16-valued float32 rounding, ns per element (into a new array, and
  in place as the simulator rounds a kernel's result), against numpy's
  ``astype(float16).astype(float32)``.
- ``gemms``: GPT-2 124M's 76 weight GEMMs alone (distinct weights streaming from memory),
  through the simulator's GEMM (the C kernel where it runs) and through numpy's BLAS, against
  onnxruntime running them as MatMul nodes.
- ``gpt2``: a GPT-2 124M-shaped MIL program written the way the emitter writes one (layout
  [1, C, 1, S], 1x1 convs with separate bias adds, matmul attention with an additive mask,
  tanh-form GELU as separate ops, the 50257-wide vocabulary head) with random fp16 weights in
  a weight.bin, 64 tokens; the same network as an fp32 ONNX graph run by onnxruntime
  (default threads and optimisations). Medians over ``--repeat`` runs after a warm-up, the
  time per op type (from one instrumented run), and the agreement of the two logits.

Each section starts once the 1-minute load average is below ``--max-load`` (waiting at most
``--max-wait`` seconds); the load it started at is recorded.

    python benchmarks/sim_ops.py [--repeat 5] [--layers 12] [--max-load 1.5]

``python benchmarks/sim_ops.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np
from _common import add_smoke, results_path, write_json  # noqa: E402

from anekit.formats import mil
from anekit.formats.blob import BlobWriter
from anekit.formats.mil import (
    Binding,
    Function,
    MilProgram,
    MilTensorType,
    blob_const,
    const,
    operation,
)
from anekit.simulator import SimProgram, gemm, round_to_fp16
from anekit.simulator.fp16 import ACCELERATED as C_ROUNDING
from anekit.simulator.fp16 import round_with_numpy

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "sim_ops.json"

VOCAB, CONTEXT, WIDTH, HEADS, TOKENS = 50257, 1024, 768, 12, 64


def median_seconds(fn, repeat: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


# --- overhead and rounding ----------------------------------------------------------------


def overhead(n_ops: int, repeat: int) -> dict:
    t = MilTensorType("fp16", (1, 8))
    ops = [operation("relu", (f"v{i}", t), {"x": f"v{i - 1}" if i else "x"}) for i in range(n_ops)]
    f = Function("main", "ios18", (Binding("x", t),), tuple(ops), (f"v{n_ops - 1}",))
    prog = SimProgram(MilProgram("1.3", (), (f,)))
    x = np.ones((1, 8), np.float32)
    seconds, _ = median_seconds(lambda: prog.run({"x": x}), repeat)
    return {"ops": n_ops, "seconds": seconds, "microseconds_per_op": seconds / n_ops * 1e6}


def rounding(repeat: int) -> dict:
    """ns per element: ``round_to_fp16`` into a new array (``ns_per_element``), in place as the
    simulator rounds a kernel's result (the copy it works on made outside the timing), the
    numpy fallback in place (used where the C extension is not built), and numpy's float16
    cast there and back."""
    out = {}
    for n in ROUNDING_SIZES:
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        ours, _ = median_seconds(lambda x=x: round_to_fp16(x), repeat)
        copies = [x.copy() for _ in range(repeat + 1)]
        in_place, _ = median_seconds(lambda c=copies: round_to_fp16(c.pop(), in_place=True), repeat)
        copies = [x.copy() for _ in range(repeat + 1)]
        fallback, _ = median_seconds(lambda c=copies: round_with_numpy(c.pop()), repeat)
        numpy, _ = median_seconds(lambda x=x: x.astype(np.float16).astype(np.float32), repeat)
        out[str(n)] = {
            "ns_per_element": ours / n * 1e9,
            "in_place_ns_per_element": in_place / n * 1e9,
            "numpy_fallback_in_place_ns_per_element": fallback / n * 1e9,
            "numpy_ns_per_element": numpy / n * 1e9,
        }
    return out


# --- GPT-2 ----------------------------------------------------------------------------------


class Net:
    """Random GPT-2 weights (fp16 values), shared by the MIL program and the ONNX graph."""

    def __init__(self, layers: int, seed: int = 0):
        rng = np.random.default_rng(seed)

        def w(*shape: int, scale: float = 0.02) -> np.ndarray:
            return (rng.standard_normal(shape) * scale).astype(np.float16)

        self.layers = layers
        self.wte, self.wpe = w(VOCAB, WIDTH), w(CONTEXT, WIDTH, scale=0.01)
        self.blocks = [
            {
                "ln1_g": (1 + w(WIDTH, scale=0.1)).astype(np.float16),
                "ln1_b": w(WIDTH),
                "qkv_w": w(3 * WIDTH, WIDTH),
                "qkv_b": w(3 * WIDTH),
                "proj_w": w(WIDTH, WIDTH),
                "proj_b": w(WIDTH),
                "ln2_g": (1 + w(WIDTH, scale=0.1)).astype(np.float16),
                "ln2_b": w(WIDTH),
                "fc_w": w(4 * WIDTH, WIDTH),
                "fc_b": w(4 * WIDTH),
                "out_w": w(WIDTH, 4 * WIDTH),
                "out_b": w(WIDTH),
            }
            for _ in range(layers)
        ]
        self.lnf_g = (1 + w(WIDTH, scale=0.1)).astype(np.float16)
        self.lnf_b = w(WIDTH)


def gpt2_mil(net: Net, directory: Path) -> Path:
    """The network as MIL text + weight.bin in ``directory`` (emitter style)."""
    writer = BlobWriter()
    ops: list = []
    fp16 = "fp16"

    def t(*shape: int, dtype: str = fp16) -> MilTensorType:
        return MilTensorType(dtype, shape)

    def blob(name: str, array: np.ndarray, shape: tuple[int, ...]) -> str:
        ops.append(blob_const(name, t(*shape), writer.add(array.reshape(shape))))
        return name

    def op(kind: str, name: str, shape: tuple[int, ...], args: dict, dtype: str = fp16) -> str:
        ops.append(operation(kind, (name, t(*shape, dtype=dtype)), args))
        return name

    seq = (1, WIDTH, 1, TOKENS)
    ops += [
        const("ax1", np.array([1], np.int32)),
        const("eps", 1e-5, fp16),
        const("ty", True),
        const("fa", False),
        const("scale", 1 / 8, fp16),
        const("sm_axis", -1),
        const("heads", np.array([1, HEADS, WIDTH // HEADS, TOKENS], np.int32)),
        const("merged", np.array(seq, np.int32)),
        const("split_axis", 1),
        const("split3", np.array([WIDTH] * 3, np.int32)),
        const("three", 3.0, fp16),
        const("k0", 0.044715, fp16),
        const("c", float(np.sqrt(2 / np.pi)), fp16),
        const("one", 1.0, fp16),
        const("half", 0.5, fp16),
        const("perm", np.array([1, 0], np.int32)),
        const("emb_shape", np.array(seq, np.int32)),
    ]
    wte = blob("wte", net.wte, (VOCAB, WIDTH))
    wpe = blob("wpe", net.wpe[:TOKENS], (TOKENS, WIDTH))
    e = op("gather", "emb", (TOKENS, WIDTH), {"x": wte, "indices": "input_ids", "axis": 0})
    e = op("add", "emb_pos", (TOKENS, WIDTH), {"x": e, "y": wpe})
    e = op("transpose", "emb_t", (WIDTH, TOKENS), {"x": e, "perm": "perm"})
    h = op("reshape", "h0", seq, {"x": e, "shape": "emb_shape"})
    for i, b in enumerate(net.blocks):
        p = f"l{i}_"

        def ln(x: str, g: str, bb: str, name: str, p: str = p, b: dict = b) -> str:
            gg = blob(p + g, b[g], (WIDTH,))
            be = blob(p + bb, b[bb], (WIDTH,))
            args = {"x": x, "axes": "ax1", "gamma": gg, "beta": be, "epsilon": "eps"}
            return op("layer_norm", p + name, seq, args)

        def dense(
            x: str, w: str, bias: str, n_out: int, n_in: int, name: str, p: str = p, b: dict = b
        ) -> str:
            wv = blob(p + w, b[w], (n_out, n_in, 1, 1))
            bv = blob(p + bias, b[bias], (1, n_out, 1, 1))
            y = op("conv", p + name + "_mm", (1, n_out, 1, TOKENS), {"x": x, "weight": wv})
            return op("add", p + name, (1, n_out, 1, TOKENS), {"x": y, "y": bv})

        a = ln(h, "ln1_g", "ln1_b", "ln1")
        qkv = dense(a, "qkv_w", "qkv_b", 3 * WIDTH, WIDTH, "qkv")
        ops.append(
            operation(
                "split",
                [(p + n, t(*seq)) for n in ("q", "k", "v")],
                {"x": qkv, "axis": "split_axis", "split_sizes": "split3"},
            )
        )
        hs = (1, HEADS, WIDTH // HEADS, TOKENS)
        q, k, v = (op("reshape", p + n + "h", hs, {"x": p + n, "shape": "heads"}) for n in "qkv")
        att_shape = (1, HEADS, TOKENS, TOKENS)
        s = op("matmul", p + "s", att_shape, {"x": q, "y": k, "transpose_x": "ty",
               "transpose_y": "fa"})  # fmt: skip
        s = op("mul", p + "ss", att_shape, {"x": s, "y": "scale"})
        s = op("add", p + "sm", att_shape, {"x": s, "y": "mask"})
        s = op("softmax", p + "p", att_shape, {"x": s, "axis": "sm_axis"})
        o = op("matmul", p + "o", hs, {"x": v, "y": s, "transpose_x": "fa", "transpose_y": "ty"})
        o = op("reshape", p + "om", seq, {"x": o, "shape": "merged"})
        o = dense(o, "proj_w", "proj_b", WIDTH, WIDTH, "proj")
        h = op("add", p + "r1", seq, {"x": h, "y": o})
        a = ln(h, "ln2_g", "ln2_b", "ln2")
        f = dense(a, "fc_w", "fc_b", 4 * WIDTH, WIDTH, "fc")
        wide = (1, 4 * WIDTH, 1, TOKENS)
        g = op("pow", p + "g0", wide, {"x": f, "y": "three"})
        g = op("mul", p + "g1", wide, {"x": g, "y": "k0"})
        g = op("add", p + "g2", wide, {"x": f, "y": g})
        g = op("mul", p + "g3", wide, {"x": g, "y": "c"})
        g = op("tanh", p + "g4", wide, {"x": g})
        g = op("add", p + "g5", wide, {"x": g, "y": "one"})
        hf = op("mul", p + "g6", wide, {"x": f, "y": "half"})
        g = op("mul", p + "g7", wide, {"x": hf, "y": g})
        o = dense(g, "out_w", "out_b", WIDTH, 4 * WIDTH, "mlp")
        h = op("add", p + "r2", seq, {"x": h, "y": o})
    gg, be = blob("lnf_g", net.lnf_g, (WIDTH,)), blob("lnf_b", net.lnf_b, (WIDTH,))
    h = op("layer_norm", "lnf", seq, {"x": h, "axes": "ax1", "gamma": gg, "beta": be,
           "epsilon": "eps"})  # fmt: skip
    head = blob("head", net.wte, (VOCAB, WIDTH, 1, 1))
    op("conv", "logits", (1, VOCAB, 1, TOKENS), {"x": h, "weight": head})
    inputs = (
        Binding("input_ids", t(TOKENS, dtype="int32")),
        Binding("mask", t(1, 1, TOKENS, TOKENS)),
    )
    program = MilProgram("1.3", (("coremlc-version", "3520.5.1"),),
                      (Function("main", "ios18", inputs, tuple(ops), ("logits",)),))  # fmt: skip
    (directory / "weights").mkdir(parents=True, exist_ok=True)
    writer.write(directory / "weights" / "weight.bin")
    path = directory / "model.mil"
    path.write_text(mil.print_program(program))
    return path


# --- the GEMMs alone ------------------------------------------------------------------------


GEMMS = ((768, 768, 48), (3072, 768, 12), (768, 3072, 12), (12565, 768, 4))  # (out, in, count)
ROUNDING_SIZES = (49_152, 196_608, 3_216_448)  # 64x768, 64x3072, 64x50257


def gemms(repeat: int) -> dict:
    """GPT-2 124M's 76 weight GEMMs on 64 tokens (distinct weights, as in a real run, so they
    stream from memory): numpy's BLAS as the simulator calls it (W [out, in] @ X [in, 64])
    against onnxruntime running the same products as MatMul nodes (X [64, in] @ W^T, its
    weights packed once at session creation). Alternating, with a pause after each run (idle
    BLAS and onnxruntime threads spin for a while after a call)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = [rng.standard_normal((m, k), np.float32) for m, k, n in GEMMS for _ in range(n)]
    xs = {k: rng.standard_normal((k, TOKENS), np.float32) for k in {k for _, k, _ in GEMMS}}
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(w.T), f"w{i}") for i, w in enumerate(weights)
    ]
    nodes = [helper.make_node("MatMul", [f"x{w.shape[1]}", f"w{i}"], [f"y{i}"])
             for i, w in enumerate(weights)]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "gemms",
        [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [TOKENS, k]) for k in xs],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [TOKENS, w.shape[0]])
         for i, w in enumerate(weights)],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    with tempfile.TemporaryDirectory() as tmp:  # over 2 GB: external data
        path = Path(tmp) / "gemms.onnx"
        onnx.save(model, path, save_as_external_data=True, location="gemms.data")
        del model, inits
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {f"x{k}": np.ascontiguousarray(x.T) for k, x in xs.items()}

    def ours() -> None:
        with gemm.blas_on_one_thread():  # as in a simulator run
            for w in weights:
                gemm.matmul(w, xs[w.shape[1]])

    def blas() -> None:
        for w in weights:
            np.matmul(w, xs[w.shape[1]])

    def theirs() -> None:
        sess.run(None, feeds)

    times: dict[str, list[float]] = {"sim_gemm": [], "numpy_blas": [], "onnxruntime": []}
    ours()  # warm-up
    blas()
    theirs()
    sides = (("sim_gemm", ours), ("numpy_blas", blas), ("onnxruntime", theirs))
    for i in range(repeat):
        for name, fn in sides[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            time.sleep(0.5)
    flops = 2 * TOKENS * sum(m * k * n for m, k, n in GEMMS)
    return {
        "sim_gemm_kernel": "C AVX-512F (_native.gemm)" if gemm.ACCELERATED else "numpy BLAS",
        "sim_gemm_threads": gemm.THREADS,
        "gemms": sum(n for _, _, n in GEMMS),
        "gflop": flops / 1e9,
        **{f"{name}_median_seconds": statistics.median(t) for name, t in times.items()},
        **{f"{name}_seconds": t for name, t in times.items()},
    }


def gpt2_onnx(net: Net):
    """The same network as an fp32 ONNX graph in the usual [tokens, width] layout."""
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes = [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def node(kind: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(kind, inputs, [name], name=name, **attrs))
        return name

    def shape(name: str, dims: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(dims, np.int64), name))
        return name

    hd = WIDTH // HEADS
    node("Gather", [init("wte", net.wte), "input_ids"], "emb", axis=0)
    h = node("Add", ["emb", init("wpe", net.wpe[:TOKENS])], "h0")
    shape("heads", [TOKENS, HEADS, hd])
    shape("merged", [TOKENS, WIDTH])
    init("scale", np.array(1 / 8))
    init("k0", np.array(np.float16(0.044715)))
    init("c", np.array(np.float16(np.sqrt(2 / np.pi))))
    init("one", np.array(1.0))
    init("half", np.array(0.5))
    init("three", np.array(3.0))
    for i, b in enumerate(net.blocks):
        p = f"l{i}_"
        a = node("LayerNormalization", [h, init(p + "ln1g", b["ln1_g"]), init(p + "ln1b", b["ln1_b"])],
                 p + "ln1", axis=-1, epsilon=float(np.float16(1e-5)))  # fmt: skip
        qkv = node("MatMul", [a, init(p + "wqkv", b["qkv_w"].T)], p + "qkv_mm")
        qkv = node("Add", [qkv, init(p + "bqkv", b["qkv_b"])], p + "qkv")
        nodes.append(helper.make_node("Split", [qkv, shape(p + "sz", [WIDTH] * 3)],
                                      [p + "q", p + "k", p + "v"], axis=1))  # fmt: skip
        q, k, v = (
            node(
                "Transpose",
                [node("Reshape", [p + n, "heads"], p + n + "r")],
                p + n + "t",
                perm=[1, 0, 2],
            )  # fmt: skip
            for n in "qkv"
        )
        kt = node("Transpose", [k], p + "k_swap", perm=[0, 2, 1])
        s = node("Mul", [node("MatMul", [q, kt], p + "s"), "scale"], p + "ss")
        s = node("Softmax", [node("Add", [s, "mask"], p + "sm")], p + "p", axis=-1)
        o = node("Transpose", [node("MatMul", [s, v], p + "o")], p + "ot", perm=[1, 0, 2])
        o = node("Reshape", [o, "merged"], p + "om")
        o = node("MatMul", [o, init(p + "wp", b["proj_w"].T)], p + "pmm")
        o = node("Add", [o, init(p + "bp", b["proj_b"])], p + "proj")
        h = node("Add", [h, o], p + "r1")
        a = node("LayerNormalization", [h, init(p + "ln2g", b["ln2_g"]), init(p + "ln2b", b["ln2_b"])],
                 p + "ln2", axis=-1, epsilon=float(np.float16(1e-5)))  # fmt: skip
        f = node("Add", [node("MatMul", [a, init(p + "wf", b["fc_w"].T)], p + "fmm"),
                         init(p + "bf", b["fc_b"])], p + "fc")  # fmt: skip
        g = node("Mul", [node("Pow", [f, "three"], p + "g0"), "k0"], p + "g1")
        g = node("Tanh", [node("Mul", [node("Add", [f, g], p + "g2"), "c"], p + "g3")], p + "g4")
        g = node("Mul", [node("Mul", [f, "half"], p + "g6"), node("Add", [g, "one"], p + "g5")],
                 p + "g7")  # fmt: skip
        o = node("Add", [node("MatMul", [g, init(p + "wo", b["out_w"].T)], p + "omm"),
                         init(p + "bo", b["out_b"])], p + "mlp")  # fmt: skip
        h = node("Add", [h, o], p + "r2")
    h = node("LayerNormalization", [h, init("gf", net.lnf_g), init("bf", net.lnf_b)], "lnf",
             axis=-1, epsilon=float(np.float16(1e-5)))  # fmt: skip
    node("MatMul", [h, init("head", net.wte.T)], "logits")
    graph = helper.make_graph(
        nodes,
        "gpt2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [TOKENS]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, TOKENS, TOKENS])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [TOKENS, VOCAB])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def gpt2(layers: int, repeat: int) -> dict:
    import onnxruntime as ort

    net = Net(layers)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, VOCAB, TOKENS)
    mask = np.triu(np.full((TOKENS, TOKENS), -1e4, np.float32), 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = gpt2_mil(net, Path(tmp))
        start = time.perf_counter()
        prog = SimProgram.load(path)
        load_seconds = time.perf_counter() - start
    feeds = {"input_ids": ids.astype(np.int32), "mask": mask.reshape(1, 1, TOKENS, TOKENS)}
    sim_seconds, sim_times = median_seconds(lambda: prog.run(feeds, fp32_outputs=True), repeat)
    logits = prog.run(feeds, fp32_outputs=True)["logits"][0, :, 0, :].T

    model = gpt2_onnx(net)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ort_feeds = {"input_ids": ids.astype(np.int64), "mask": mask.reshape(1, TOKENS, TOKENS)}
    ort_seconds, ort_times = median_seconds(lambda: sess.run(None, ort_feeds), repeat)
    (ort_logits,) = sess.run(None, ort_feeds)
    cosine = float(np.dot(logits.ravel(), ort_logits.ravel()) /
                   (np.linalg.norm(logits) * np.linalg.norm(ort_logits)))  # fmt: skip

    by_op: dict[str, float] = defaultdict(float)
    plan = prog._plan

    def timed(kernel, kind):
        def run(**kwargs):
            start = time.perf_counter()
            out = kernel(**kwargs)
            by_op[kind] += time.perf_counter() - start
            return out

        return run

    prog._plan = replace(plan, steps=tuple(replace(s, kernel=timed(s.kernel, s.op))
                                           for s in plan.steps))  # fmt: skip
    start = time.perf_counter()
    prog.run(feeds, fp32_outputs=True)
    instrumented = time.perf_counter() - start
    prog._plan = plan
    kernels = sum(by_op.values())
    return {
        "layers": layers,
        "tokens": TOKENS,
        "ops": len(plan.steps),
        "load_seconds": load_seconds,
        "sim_median_seconds": sim_seconds,
        "sim_seconds": sim_times,
        "onnxruntime_median_seconds": ort_seconds,
        "onnxruntime_seconds": ort_times,
        "sim_over_onnxruntime": sim_seconds / ort_seconds,
        "logits_cosine_sim_vs_onnxruntime": cosine,
        "top1_agreement": float((logits.argmax(-1) == ort_logits.argmax(-1)).mean()),
        "instrumented_run": {
            "seconds": instrumented,
            "kernel_seconds": kernels,
            "rounding_checks_and_interpreter_seconds": instrumented - kernels,
            "kernel_seconds_by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        },
    }


def _wait_for_quiet(max_load: float, max_wait: float) -> list[float]:
    """Sleep until the 1-minute load average is below ``max_load`` (at most ``max_wait`` s)."""
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(5)
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--max-load", type=float, default=1.5, help="start sections below this")
    parser.add_argument("--max-wait", type=float, default=600.0, help="seconds, per section")
    add_smoke(parser)
    args = parser.parse_args()
    n_ops = 2000
    if args.smoke:  # small GEMMs and arrays, one GPT-2 layer, no waiting
        global GEMMS, ROUNDING_SIZES
        GEMMS, ROUNDING_SIZES = ((64, 64, 2), (128, 64, 1)), (4096,)
        args.repeat, args.layers, args.max_wait, n_ops = 1, 1, 0.0, 50
    quiet = (args.max_load, args.max_wait)
    loads = {"overhead": _wait_for_quiet(*quiet)}
    section_overhead = overhead(n_ops, args.repeat)
    loads["rounding"] = _wait_for_quiet(*quiet)
    section_rounding = rounding(args.repeat)
    loads["gemms"] = _wait_for_quiet(*quiet)
    section_gemms = gemms(args.repeat)
    loads["gpt2"] = _wait_for_quiet(*quiet)
    result = {
        "benchmark": "sim_ops",
        "overhead": section_overhead,
        "rounding": section_rounding,
        "gemms": section_gemms,
        "gpt2": gpt2(args.layers, args.repeat),
        "load_average_before_each_section": loads,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1_5_15_min": list(os.getloadavg()),
            "versions": {p: metadata.version(p) for p in ("numpy", "onnxruntime")},
            "sim_rounding": "C (_native.round_in_place)" if C_ROUNDING else "numpy",
        },
    }
    write_json(results_path(RESULTS, args.smoke), result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
