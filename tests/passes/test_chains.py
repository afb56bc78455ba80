"""Transpose and reshape chains: the axis algebra (property-tested) and the rules using it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import anekit
from anekit import ops, targets
from anekit.passes.canonicalize import canonicalize
from anekit.passes.chains import (
    compose,
    invert,
    is_unit_reshape,
    moves_only_units,
    reshape_then_transpose,
    transpose_then_reshape,
)
from anekit.passes.context import PassContext
from tests.passes.support import random_feeds, rel_err

DIMS = st.sampled_from([1, 2, 3, 4, 6])


@st.composite
def regrouped(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape with the same elements: adjacent axes merged, axes split, unit axes added."""
    dims = list(shape)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["merge", "split", "unit"]))
        if kind == "merge" and len(dims) > 1:
            i = draw(st.integers(0, len(dims) - 2))
            dims[i : i + 2] = [dims[i] * dims[i + 1]]
        elif kind == "split" and dims:
            i = draw(st.integers(0, len(dims) - 1))
            f = draw(st.sampled_from([f for f in range(1, dims[i] + 1) if dims[i] % f == 0]))
            dims[i : i + 1] = [f, dims[i] // f]
        else:
            dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims)


@st.composite
def chain(draw):
    x = tuple(draw(st.lists(DIMS, min_size=1, max_size=5)))
    perm = tuple(draw(st.permutations(range(len(x)))))
    return x, perm


@settings(max_examples=300, deadline=None)
@given(chain(), st.data())
def test_transpose_then_reshape_swap_is_exact(c, data) -> None:
    x, perm = c
    z = data.draw(regrouped(tuple(x[p] for p in perm)))
    a = np.arange(int(np.prod(x))).reshape(x)
    found = transpose_then_reshape(x, perm, z)
    if found is None:  # only when a merge joins axes that are not adjacent in order in x
        return
    x2, perm2 = found
    np.testing.assert_array_equal(a.reshape(x2).transpose(perm2), a.transpose(perm).reshape(z))


@settings(max_examples=300, deadline=None)
@given(chain(), st.data())
def test_reshape_then_transpose_swap_is_exact(c, data) -> None:
    x, _ = c
    y = data.draw(regrouped(x))
    perm = tuple(data.draw(st.permutations(range(len(y)))))
    a = np.arange(int(np.prod(x))).reshape(x)
    found = reshape_then_transpose(x, y, perm)
    if found is None:
        return
    perm2, z2 = found
    want = a.reshape(y).transpose(perm)
    assert a.transpose(perm2).shape == z2
    np.testing.assert_array_equal(a.transpose(perm2).reshape(want.shape), want)


@given(chain())
def test_perm_algebra(c) -> None:
    x, perm = c
    a = np.arange(int(np.prod(x))).reshape(x)
    assert compose(perm, invert(perm)) == tuple(range(len(x)))
    other = tuple(reversed(range(len(x))))
    np.testing.assert_array_equal(
        a.transpose(perm).transpose(other), a.transpose(compose(perm, other))
    )
    if moves_only_units(x, perm):
        y = a.transpose(perm)
        np.testing.assert_array_equal(a.reshape(y.shape), y)


def test_the_swaps_refuse_what_they_cannot_do() -> None:
    # merging axes 0 and 2 of x after the transpose brings them together: not a reshape of x
    assert transpose_then_reshape((2, 3, 4), (0, 2, 1), (8, 3)) is None
    assert is_unit_reshape((1, 4, 1, 5), (4, 5, 1)) and not is_unit_reshape((4, 5), (5, 4))


def _canonical(graph):
    ctx = PassContext(targets.get("m4"))
    ctx.begin("canonicalize")
    out = canonicalize(graph, ctx)
    out.validate()
    feeds = random_feeds(graph)
    want, got = graph.run(feeds), out.run(feeds)
    assert all(rel_err(got[k], want[k]) == 0.0 for k in want)  # data movement: bit-exact
    return out


def test_attention_head_split_of_a_channels_first_tensor_becomes_one_reshape_and_transpose() -> (
    None
):
    """[1, C, 1, S] -> [1, S, C] -> [1, S, H, D] -> [1, H, S, D]: what layout hands attention."""
    x = anekit.input("x", (1, 32, 1, 8))
    t = ops.transpose(ops.reshape(x, (1, 32, 8)), (0, 2, 1))
    q = ops.transpose(ops.reshape(t, (1, 8, 4, 8)), (0, 2, 1, 3))
    k_t = ops.transpose(ops.reshape(t, (1, 8, 4, 8)), (0, 2, 3, 1))
    out = _canonical(anekit.graph([ops.relu(q), ops.relu(k_t)]))
    hist = out.op_histogram()
    assert hist.get("transpose", 0) == 1  # q needs one; k^T is a pure reshape of the input
    assert hist.get("reshape", 0) == 1  # shared by both


def test_inverse_pair_and_identity_transpose_vanish() -> None:
    x = anekit.input("x", (2, 3, 4))
    y = ops.transpose(ops.transpose(x, (1, 2, 0)), (2, 0, 1))
    out = _canonical(anekit.graph(ops.relu(ops.transpose(y, (0, 1, 2)))))
    assert out.op_histogram() == {"relu": 1}


def test_reshape_chain_merges_and_noop_vanishes() -> None:
    x = anekit.input("x", (2, 12))
    y = ops.reshape(ops.reshape(ops.reshape(x, (2, 3, 4)), (6, 4)), (2, 12))
    out = _canonical(
        anekit.graph([ops.relu(y), ops.relu(ops.reshape(ops.reshape(x, (24,)), (4, 6)))])
    )
    assert out.op_histogram() == {"relu": 2, "reshape": 1}


def test_transpose_that_moves_only_unit_axes_becomes_a_reshape() -> None:
    x = anekit.input("x", (1, 5, 1, 3))
    out = _canonical(anekit.graph(ops.relu(ops.transpose(x, (2, 1, 0, 3)))))
    assert "transpose" not in out.op_histogram()
