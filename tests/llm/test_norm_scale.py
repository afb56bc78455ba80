"""The language models' norms are fp16-safe at the scale of real residual streams."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.frontend.builder.tensor import graph, input
from anekit.llm.config import LMConfig
from anekit.llm.graph import _Builder


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("std", [1.0, 100.0, 1000.0])
def test_norm_on_sim_matches_float64_at_large_scale(norm: str, std: float) -> None:
    c, s = 64, 16
    cfg = LMConfig.__new__(LMConfig)  # only the two fields a norm reads
    object.__setattr__(cfg, "norm", norm)
    object.__setattr__(cfg, "norm_eps", 1e-5)
    rng = np.random.default_rng(0)
    weight = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.normal(size=c).astype(np.float32) if norm == "layer_norm" else None
    x = input("x", (1, c, 1, s))
    y = _Builder(cfg, None, 16).norm(x, (weight, bias), "n")
    g = graph([y])
    feeds = {"x": (rng.normal(size=(1, c, 1, s)) * std).astype(np.float32)}
    out = next(iter(anekit.compile(g, "m4").run(feeds, "sim").values()))
    x64 = feeds["x"].astype(np.float64)
    if norm == "layer_norm":
        x64 = x64 - x64.mean(axis=1, keepdims=True)
    want = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5)
    want = want * weight.reshape(1, -1, 1, 1) + (0 if bias is None else bias.reshape(1, -1, 1, 1))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, atol=1.5e-2 * np.abs(want).max())
