"""A session with resident state: an RNN cell run step after step, its hidden state kept
on the engine surface between steps (here on the fp16 simulator) and read back only at
the end. Compares against the same loop written in numpy.

    python examples/session_state.py
"""

from __future__ import annotations

import numpy as np

import anekit
from anekit import ops

rng = np.random.default_rng(0)
W = rng.standard_normal((16, 32)).astype(np.float32) * 0.3
U = rng.standard_normal((32, 32)).astype(np.float32) * 0.2

x, h = anekit.input("x", (1, 16)), anekit.input("h", (1, 32))
h_next = ops.tanh(ops.add(ops.matmul(x, W), ops.matmul(h, U)), name="h_next")
y = ops.relu(h_next, name="y")
compiled = anekit.compile(anekit.graph([h_next, y], name="rnn"), "m4")

# h is fed back from h_next after every step; only x is given per step
sess = compiled.session(backend="sim", state={"h": "h_next"})
xs = rng.standard_normal((20, 1, 16)).astype(np.float32)
outputs = sess.run_steps(len(xs), [{"x": step} for step in xs])  # {"y": (20, 1, 32)}

reference = np.zeros((1, 32))
for step in xs:
    reference = np.tanh(step @ W + reference @ U)
print(f"resident states: {sess.resident}")
print(f"y over 20 steps: {outputs['y'].shape}")
print(f"final h: max |sim - numpy| = {np.abs(sess.read('h') - reference).max():.2e} (fp16 storage)")
