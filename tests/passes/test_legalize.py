"""Legalization: vocabulary heads, kernel memory and conv groups split within the target's limits."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.ir.engine import LayerView, Slot
from tests.passes.support import compile_checked, layers, row, with_limits

RNG = np.random.default_rng(1)
VOCAB = 50257  # GPT-2's vocabulary


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_vocabulary_projection_is_split_within_the_channel_limit(target: str) -> None:
    x = anekit.input("x", (1, 4, 64))
    w = (RNG.standard_normal((64, VOCAB)) * 0.1).astype(np.float32)
    cm = compile_checked(anekit.graph(ops.matmul(x, w, name="lm_head")), target)
    limit = targets.get(target).limits.max_channels
    parts = [LayerView(n) for n in layers(cm) if "lm_head" in LayerView(n).main_origin]
    assert len(parts) == -(-VOCAB // limit)  # as few pieces as the limit allows
    widths = [max(cm.graph.value(p.main_inputs[0]).shape) for p in parts]
    assert sum(p.node.attrs["main"] in ("conv", "matmul") for p in parts) == len(parts)
    channels = [cm.graph.value(p.node.output).shape[1] for p in parts]
    assert sum(channels) == VOCAB and max(channels) <= limit
    assert all(w_ == 64 or w_ <= limit for w_ in widths)
    joined = [n for n in cm.graph.nodes if n.op == "ane_layer" and n.attrs["main"] == "concat"]
    assert len(joined) == 1 and cm.graph.value(joined[0].inputs[0]).shape[1] <= limit
    # on M1 the [1, 4, 50257] output itself exceeds the engine's extent on axis 2: the final
    # layout change and the concat feeding it run on the CPU; the projections stay on the ANE
    on_cpu = cm.placement[joined[0].name].device == "cpu"
    assert on_cpu == (VOCAB > targets.get(target).limits.max_dim)
    r = row(cm, "lm_head")
    assert r.placement == "ane" and f"{VOCAB} output channels > {limit}" in r.reason


def test_split_pieces_keep_their_share_of_the_bias_and_activation() -> None:
    x = anekit.input("x", (1, 8, 1, 3))
    w = (RNG.standard_normal((40, 8, 1, 1)) * 0.3).astype(np.float32)
    y = ops.relu(ops.conv2d(x, w, RNG.standard_normal(40).astype(np.float32), name="conv"))
    cm = compile_checked(anekit.graph(y), with_limits("m4", max_channels=16))
    parts = [LayerView(n) for n in layers(cm) if LayerView(n).main == "conv"]
    assert [cm.graph.value(p.node.output).shape[1] for p in parts] == [14, 14, 12]
    for p in parts:
        assert [s.slot for s in p.epilogue] == [Slot.GOC, Slot.POST_ACT]


def test_weights_over_the_kernel_memory_cap_are_split() -> None:
    x = anekit.input("x", (1, 32, 1, 4))
    w = (RNG.standard_normal((64, 32, 1, 1)) * 0.3).astype(np.float32)
    target = with_limits("m4", kmem_cap_bytes=64 * 32 * 2 // 3)  # fp16 bytes / 3, rounded down
    cm = compile_checked(anekit.graph(ops.conv2d(x, w, name="conv")), target)
    parts = [LayerView(n) for n in layers(cm) if LayerView(n).main == "conv"]
    assert len(parts) == 4  # three pieces would not fit: 64 / 3 channels rounds up
    for p in parts:
        assert cm.graph.constants[p.main_inputs[1]].size * 2 <= target.kmem_cap_bytes
    assert "kernel-memory cap" in row(cm, "conv").reason


def test_convolution_with_too_many_groups_is_split_by_groups() -> None:
    x = anekit.input("x", (1, 12, 5, 5))
    w = (RNG.standard_normal((12, 1, 3, 3)) * 0.3).astype(np.float32)  # depthwise, 12 groups
    target = with_limits("m4", max_groups=5)
    cm = compile_checked(anekit.graph(ops.conv2d(x, w, padding=1, groups=12, name="dw")), target)
    convs = [LayerView(n) for n in layers(cm) if LayerView(n).main == "conv"]
    assert [c.main_attrs["group"] for c in convs] == [4, 4, 4]
    assert all(c.main_attrs["group"] <= 5 for c in convs)
    assert "groups" in row(cm, "dw").reason


def test_layer_within_limits_is_left_alone() -> None:
    x = anekit.input("x", (1, 8, 4, 4))
    w = (RNG.standard_normal((16, 8, 1, 1)) * 0.3).astype(np.float32)
    cm = compile_checked(anekit.graph(ops.conv2d(x, w, name="conv")), "m1")
    assert len(layers(cm)) == 1
    assert [r.name for r in cm.pass_log if r.name == "legalize" and r.changes] == []
