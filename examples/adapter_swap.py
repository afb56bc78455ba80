"""LoRA adapters as program inputs: compile once with adapter inputs on the q and v
projections, then swap adapters (saved in PEFT's safetensors layout) without recompiling.
Each result matches the model with the adapter merged into its weights.

    python examples/adapter_swap.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

import anekit
from anekit import ops

rng = np.random.default_rng(0)
D, RANK, ALPHA = 64, 8, 16
weights = {n: rng.standard_normal((D, D)).astype(np.float32) * 0.1 for n in ("q_proj", "v_proj")}


def block(ws: dict[str, np.ndarray]) -> anekit.Graph:
    x = anekit.input("x", (1, 16, D))
    q = ops.matmul(x, anekit.constant(ws["q_proj"], name="q_proj.weight"))
    v = ops.matmul(x, anekit.constant(ws["v_proj"], name="v_proj.weight"))
    return anekit.graph([ops.mul(ops.relu(q), v, name="y")])


lora = anekit.LoRA(rank=RANK, alpha=ALPHA, targets=["*q_proj*", "*v_proj*"])
compiled = anekit.compile(block(weights), "m4", lora=lora)
print("inputs:", [p.name for p in compiled.program.inputs])
sess = compiled.session("sim")
feeds = {"x": rng.standard_normal((1, 16, D)).astype(np.float32)}

with tempfile.TemporaryDirectory() as tmp:
    for k in range(3):
        # PEFT's names and layouts: lora_A.weight [r, d_in], lora_B.weight [d_out, r]
        tensors = {}
        for layer in ("q_proj", "v_proj"):
            tensors[f"base_model.model.{layer}.lora_A.weight"] = (
                rng.standard_normal((RANK, D)).astype(np.float32) * 0.1
            )
            tensors[f"base_model.model.{layer}.lora_B.weight"] = (
                rng.standard_normal((D, RANK)).astype(np.float32) * 0.1
            )
        path = Path(tmp) / f"adapter{k}.safetensors"
        save_file(tensors, str(path))
        adapter = anekit.lora.load(path)
        sess.set_adapter(adapter)  # hot swap: no recompile
        got = sess.run(feeds)["y"]
        merged = {
            n: weights[n] + lora.scale * adapter.layers[n][0] @ adapter.layers[n][1]
            for n in weights
        }
        want = anekit.compile(block(merged), "m4").program.run(feeds)["y"]
        print(f"adapter {k}: max |adapter - merged| = {np.abs(got - want).max():.2e}")
