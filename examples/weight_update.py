"""A weight update without recompiling: compile once, save the bundle, then write new values
of a weight into its weight file in place (atomically, digests updated, MIL untouched).
The program's identity stays the same and the output equals a fresh compile.

    python examples/weight_update.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import anekit
from anekit import ops

rng = np.random.default_rng(0)


def model(w1: np.ndarray, w2: np.ndarray) -> anekit.Graph:
    x = anekit.input("x", (1, 64))
    h = ops.relu(ops.matmul(x, anekit.constant(w1, name="fc1.weight")))
    return anekit.graph([ops.matmul(h, anekit.constant(w2, name="fc2.weight"), name="y")])


w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.1 for s in ((64, 128), (128, 10)))
feeds = {"x": rng.standard_normal((1, 64)).astype(np.float32)}

with tempfile.TemporaryDirectory() as tmp:
    path = anekit.compile(model(w1, w2), "m4").save(Path(tmp) / "mlp.anekit")
    program = anekit.load(path)
    sess = program.session("sim")  # a live session sees the update on its next step
    print("weights:", program.weight_names())
    identity = program.identity
    new_w2 = rng.standard_normal((128, 10)).astype(np.float32) * 0.1
    report = program.update_weights({"fc2.weight": new_w2})
    print(
        f"updated {report.names} in {report.seconds * 1e3:.1f} ms, "
        f"{report.bytes_written} bytes, took effect: {report.took_effect}"
    )
    fresh = anekit.compile(model(w1, new_w2), "m4").program.run(feeds)["y"]
    print("equals a fresh compile:", np.array_equal(sess.run(feeds)["y"], fresh))
    print("identity unchanged:", program.identity == identity)
    print("a new process sees it:", np.array_equal(anekit.load(path).run(feeds)["y"], fresh))
