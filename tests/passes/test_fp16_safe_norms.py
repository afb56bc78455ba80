"""Norms and softmax are fp16-safe wherever they run: each is compiled for m1 and m4, run on
the fp16 simulator, and compared with the source graph's fp32 reference at input scales where
a naive x*x overflows fp16 (std 100: 1e4 per square; std 1000: 1e6 > 65504).

Inputs are drawn on the fp16 grid (the simulator reads its inputs in fp16), so the error
measured is the program's own, not the input's rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.frontend.builder.tensor import record

CHIPS = ("m1", "m4")
STDS = (1.0, 100.0, 1000.0)
C = 32  # channels of the image-shaped norms
D = 768  # a transformer's model width (the failing case)
# fp16 keeps 11 significant bits (2^-11 = 4.9e-4 relative); a norm is a chain of about ten
# rounded ops, so its output may be off by a few units of the last place of its largest value
TOLERANCE = 8 * 2.0**-11


def _ones(n: int) -> np.ndarray:
    return np.linspace(0.5, 1.5, n, dtype=np.float32)


def _zeros(n: int) -> np.ndarray:
    return np.linspace(-0.25, 0.25, n, dtype=np.float32)


# name -> (input shape, builder of the op from its input, running variance per std if any)
CASES: dict[str, tuple[tuple[int, ...], Callable[[anekit.Tensor, float], anekit.Tensor]]] = {
    "layer_norm": ((1, 4, D), lambda x, s: ops.layer_norm(x, _ones(D), _zeros(D))),
    "rms_norm": ((1, 4, D), lambda x, s: ops.rms_norm(x, _ones(D))),
    "group_norm": ((1, C, 6, 6), lambda x, s: ops.group_norm(x, 4, _ones(C), _zeros(C))),
    "instance_norm": ((1, C, 6, 6), lambda x, s: ops.instance_norm(x, _ones(C), _zeros(C))),
    "batch_norm": (
        (1, C, 6, 6),
        lambda x, s: ops.batch_norm(
            x, np.full(C, s / 2, np.float32), np.full(C, s * s, np.float32), _ones(C), _zeros(C)
        ),
    ),
    # an L2 norm of 768 values at std 1000 is about 3e4: within fp16, its squares are not
    "reduce_l2": ((1, 4, D), lambda x, s: record("reduce_l2", [x], {"axes": (-1,)})),
    "softmax": ((1, 4, D), lambda x, s: ops.softmax(x, axis=-1)),
    "log_softmax": ((1, 4, D), lambda x, s: ops.log_softmax(x, axis=-1)),
}


def _fp16_grid(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).astype(np.float32)


def _compare(name: str, chip: str, x: np.ndarray, scale: float) -> None:
    shape, build = CASES[name]
    graph = anekit.graph([build(anekit.input("x", shape), scale)])
    compiled = anekit.compile(graph, chip)
    (want,) = graph.run({"x": x}).values()
    (got,) = compiled.run({"x": x}, "sim").values()
    assert np.isfinite(got).all(), f"{name} on {chip} at scale {scale}: non-finite output"
    err = float(np.abs(got.astype(np.float64) - want).max())
    peak = float(np.abs(want).max())
    assert err <= TOLERANCE * peak, (
        f"{name} on {chip} at scale {scale}: max error {err:.3g} > {TOLERANCE:.2g} x {peak:.3g}"
    )


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("std", STDS)
@pytest.mark.parametrize("name", list(CASES))
def test_norms_and_softmax_are_fp16_safe(name: str, std: float, chip: str) -> None:
    rng = np.random.default_rng(int(std))
    shape = CASES[name][0]
    # a residual stream has an offset as well as a spread: centring must remove it exactly
    x = _fp16_grid(rng.standard_normal(shape) * std + std / 2)
    _compare(name, chip, x, std)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_logits_near_1e4(name: str, chip: str) -> None:
    """Logits up to 1e4 a few fp16 steps apart (the grid is 8 wide there): the distribution is
    spread over several entries, not one-hot, so the test sees every entry's error."""
    rng = np.random.default_rng(4)
    shape = CASES[name][0]
    x = 9992.0 - 8.0 * rng.integers(0, 4, size=shape).astype(np.float32)
    _compare(name, chip, x, 1e4)


@pytest.mark.parametrize("chip", CHIPS)
def test_l2_norm_over_an_infinite_element_is_infinite(chip: str) -> None:
    """The peak is capped at fp16's largest value: dividing an infinite element by an
    infinite peak gave NaN, where fp32 (and torch) give an infinite norm. Finite rows are
    unchanged."""
    shape, build = CASES["reduce_l2"]
    graph = anekit.graph([build(anekit.input("x", shape), 1.0)])
    x = _fp16_grid(np.random.default_rng(5).standard_normal(shape))
    x[0, 0, 3] = np.inf
    x[0, 1, 7] = -np.inf
    (want,) = graph.run({"x": x}).values()
    (got,) = anekit.compile(graph, chip).run({"x": x}, "sim").values()
    assert np.isposinf(want[0, :2]).all() and np.isposinf(got[0, :2]).all(), got
    rows = np.abs(got[0, 2:] - want[0, 2:]) <= TOLERANCE * np.abs(want[0, 2:])
    assert rows.all(), (got, want)
