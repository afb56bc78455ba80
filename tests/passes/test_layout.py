"""Engine layout: rank-4 channels-on-axis-1 twins, conversions only at the edges, exact numerics."""

from __future__ import annotations

import numpy as np

import anekit
from anekit import ops
from anekit.ir.engine import UNITS, LayerView
from anekit.passes.layout import Form
from tests.passes.support import check_every_pass, compile_checked, layers, random_feeds

RNG = np.random.default_rng(7)
S, D, H = 8, 32, 4


def _lin(x, n: int, k: int):
    w = (RNG.standard_normal((n, k)) * 0.2).astype(np.float32)
    return ops.linear(x, w, (RNG.standard_normal(n) * 0.1).astype(np.float32))


def _ln(x):
    return ops.layer_norm(
        x,
        (1 + 0.1 * RNG.standard_normal(D)).astype(np.float32),
        (0.1 * RNG.standard_normal(D)).astype(np.float32),
    )


def _heads(t):
    return ops.transpose(ops.reshape(t, (1, S, H, D // H)), (0, 2, 1, 3))


def _block(x):
    """A pre-norm transformer block as torch exports it: [1, S, D] activations throughout."""
    h = _ln(x)
    a = ops.attention(
        _heads(_lin(h, D, D)), _heads(_lin(h, D, D)), _heads(_lin(h, D, D)), causal=True
    )
    x = x + _lin(ops.reshape(ops.transpose(a, (0, 2, 1, 3)), (1, S, D)), D, D)
    return x + _lin(ops.gelu(_lin(_ln(x), 4 * D, D), approximate="tanh"), D, 4 * D)


def test_transformer_blocks_run_in_channels_first_layout_with_few_layout_layers() -> None:
    x = anekit.input("x", (1, S, D))
    g = anekit.graph(_block(_block(x)))
    cm = compile_checked(g, "m4")
    views = [LayerView(n) for n in layers(cm)]
    for v in views:
        out = cm.graph.value(v.node.output)
        assert out.rank <= 5
        if v.main == "conv":  # linears became 1x1 convs over [1, C, 1, S]
            x_in = cm.graph.value(v.main_inputs[0]).shape
            assert x_in[0] == 1 and x_in[2] == 1 and x_in[3] == S
    moves = [v for v in views if UNITS[v.layer_type] == "dma"]
    # per block: the q and v head transposes (k^T is a free reshape) and the merge of the
    # heads; at the model's edges: [1, S, D] in (transpose, reshape) and out (transpose)
    assert len(moves) == 2 * 3 + 3, [v.describe() for v in moves]
    convs = [v for v in views if v.main == "conv"]
    assert len(convs) == 2 * 6


def test_every_pass_is_exact_on_the_blocks() -> None:
    x = anekit.input("x", (1, S, D))
    g = anekit.graph(_block(x))
    worst = check_every_pass(g, random_feeds(g), "m1", approximate_gelu=False)
    assert set(worst) >= {"layout", "matmul_to_conv", "fuse_epilogues"}


def test_conv1d_runs_as_a_2d_conv_with_a_unit_height() -> None:
    x = anekit.input("x", (1, 4, 16))
    w = RNG.standard_normal((6, 4, 3)).astype(np.float32)
    y = ops.relu(ops.conv1d(x, w, RNG.standard_normal(6).astype(np.float32), padding=1, name="c"))
    cm = compile_checked(anekit.graph(y), "m4")
    (conv,) = [LayerView(n) for n in layers(cm) if LayerView(n).main == "conv"]
    assert cm.graph.value(conv.main_inputs[0]).shape == (1, 4, 1, 16)
    assert conv.main_attrs["pads"] == (0, 1, 0, 1)


def test_forms_map_axes_to_the_engine_axes() -> None:
    seq = Form("seq", (2, 7, 5))
    assert seq.engine_shape == (2, 5, 1, 7) and (seq.axis(-1), seq.axis(1), seq.axis(0)) == (
        1,
        3,
        0,
    )
    assert Form("seq", (3, 4, 7, 5)).axis(1) is None  # merged into the batch axis
    assert Form("nc", (2, 5, 7)).engine_shape == (2, 5, 1, 7)
    assert Form("seq", (9,)).engine_shape == (1, 9, 1, 1)
    assert not Form("seq", (1, 1, 5)).transposes
