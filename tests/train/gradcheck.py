"""Gradient checks: anekit.train.grad against torch autograd and central differences.

A case builds a one-op graph from builder inputs; the loss is sum(output * r) with a random
fixed r, so every output element carries a different upstream gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

import anekit
from anekit.frontend.builder import ops
from anekit.train import grad


def check_gradients(
    build: Callable[..., anekit.Tensor],
    torch_fn: Callable[..., torch.Tensor],
    feeds: Mapping[str, np.ndarray],
    wrt: Sequence[str],
    *,
    rtol: float = 2e-3,
    atol: float = 2e-4,
    fd_eps: float = 1e-3,
    fd_tol: float = 2e-2,
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    tensors = {
        n: anekit.input(n, a.shape, "fp32" if a.dtype.kind == "f" else "int64")
        for n, a in feeds.items()
    }
    out = build(*tensors.values())
    r = anekit.input("r", out.shape)
    loss = ops.reduce_sum(out * r, keepdims=False)
    graph = anekit.graph([loss], inputs=[*tensors.values(), r])
    upstream = rng.standard_normal(out.shape).astype(np.float32)
    run_feeds = {**feeds, "r": upstream}
    ours = grad(graph, graph.output_names[0], list(wrt)).run(run_feeds)

    # torch autograd in float64
    tt = {
        n: torch.tensor(a.astype(np.float64) if a.dtype.kind == "f" else a,
                        requires_grad=n in wrt)
        for n, a in feeds.items()
    }  # fmt: skip
    ref = torch_fn(*tt.values())
    (ref * torch.tensor(upstream, dtype=torch.float64)).sum().backward()
    for n in wrt:
        expected = tt[n].grad.numpy()
        got = ours[f"{n}_grad"]
        assert got.shape == expected.shape, n
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=f"d/d{n} vs torch")

    # central differences along one random direction per input (fp32 forward passes)
    def f(values: Mapping[str, np.ndarray]) -> float:
        return float(graph.run(values)[graph.output_names[0]].astype(np.float64))

    for n in wrt:
        d = rng.standard_normal(feeds[n].shape).astype(np.float32)
        plus = {**run_feeds, n: (feeds[n] + fd_eps * d).astype(np.float32)}
        minus = {**run_feeds, n: (feeds[n] - fd_eps * d).astype(np.float32)}
        numeric = (f(plus) - f(minus)) / (2 * fd_eps)
        analytic = float(np.sum(ours[f"{n}_grad"].astype(np.float64) * d))
        scale = max(1.0, abs(numeric), float(np.abs(ours[f"{n}_grad"]).sum()) * 1e-3)
        assert abs(numeric - analytic) <= fd_tol * scale, (n, numeric, analytic)
