"""Small graphs, one or two IR ops each, covering every lowering of the MIL emitter.

Each case builds a Graph with the builder (``record`` for ops the builder does not wrap) and
seeded feeds. ``engine_layer_cases`` hand-build ``ane_layer`` nodes with filled epilogue
slots, as the fusion pass would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import anekit
from anekit import ops
from anekit.frontend.builder.tensor import record
from anekit.ir.engine import EpilogueStep, Slot, layer_attrs
from anekit.ir.graph import Graph


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[np.random.Generator], tuple[Graph, dict[str, np.ndarray]]]
    # fp16 programs of this case are compared with this relative tolerance (of the max magnitude)
    fp16_tolerance: float = 2e-2


def _rng_array(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def unary(op: str, attrs: dict | None = None, *, low: float | None = None, high: float | None = None,
          shape: tuple[int, ...] = (1, 4, 3, 5)) -> Case:  # fmt: skip
    def build(rng: np.random.Generator):
        x = anekit.input("x", shape)
        g = anekit.graph([record(op, [x], attrs or {}, name="y")])
        data = _rng_array(rng, shape)
        if low is not None and high is not None:
            data = rng.uniform(low, high, shape).astype(np.float32)
        return g, {"x": data}

    suffix = "_".join(f"{k}{v}" for k, v in (attrs or {}).items())
    return Case(f"{op}{'_' + suffix if suffix else ''}", build)


def binary(op: str, *, const_b: bool = False, positive: bool = False, shape_b=(1, 4, 1, 5)) -> Case:  # noqa: ANN001
    def build(rng: np.random.Generator):
        shape = (1, 4, 3, 5)
        x = anekit.input("x", shape)
        b_data = _rng_array(rng, shape_b)
        if positive:
            b_data = np.abs(b_data) + 0.5
        b = anekit.constant(b_data) if const_b else anekit.input("b", shape_b)
        g = anekit.graph([record(op, [x, b], {}, name="y")])
        feeds = {
            "x": np.abs(_rng_array(rng, shape)) + 0.1 if op == "pow" else _rng_array(rng, shape)
        }
        if not const_b:
            feeds["b"] = b_data
        return g, feeds

    return Case(f"{op}{'_const' if const_b else ''}", build)


def simple(
    name: str, fn: Callable[[np.random.Generator], tuple[Graph, dict]], tol: float = 2e-2
) -> Case:
    return Case(name, fn, tol)


# --- cases built with the builder API ----------------------------------------------------------


def _conv(rng, *, bias=True, groups=1, stride=1, padding=1, dilation=1):  # noqa: ANN001, ANN202
    x = anekit.input("x", (1, 4, 7, 6))
    w = _rng_array(rng, (6, 4 // groups, 3, 3), 0.3)
    b = _rng_array(rng, (6,)) if bias else None
    y = ops.conv2d(
        x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups, name="y"
    )
    return anekit.graph([y]), {"x": _rng_array(rng, (1, 4, 7, 6))}


def _conv_integer(rng):  # noqa: ANN001, ANN202
    """uint8 activations centred on 128, int8 weights with a zero point per output channel."""
    x = anekit.input("x", (1, 3, 6, 6), "uint8")
    w = anekit.constant(rng.integers(-60, 60, (4, 3, 3, 3)).astype(np.int8))
    zx = anekit.constant(np.asarray(128, np.uint8))
    zw = anekit.constant(np.asarray([0, 3, -2, 1], np.int8))
    attrs = {"strides": (2, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    y = record("conv_integer", [x, w, zx, zw], attrs, name="y")
    return anekit.graph([y]), {"x": rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}


def _conv1d(rng):  # noqa: ANN001, ANN202
    x = anekit.input("x", (1, 3, 9))
    y = ops.conv1d(
        x, _rng_array(rng, (5, 3, 3), 0.3), _rng_array(rng, (5,)), stride=2, padding=1, name="y"
    )
    return anekit.graph([y]), {"x": _rng_array(rng, (1, 3, 9))}


def _conv_transpose(rng, output_padding=0):  # noqa: ANN001, ANN202
    x = anekit.input("x", (1, 4, 5, 5))
    w = _rng_array(rng, (4, 3, 3, 3), 0.3)
    y = ops.conv_transpose2d(x, w, _rng_array(rng, (3,)), stride=2, padding=1,
                             output_padding=output_padding, name="y")  # fmt: skip
    return anekit.graph([y]), {"x": _rng_array(rng, (1, 4, 5, 5))}


def _matmul(rng, const=True):  # noqa: ANN001, ANN202
    a = anekit.input("a", (2, 3, 8))
    b = anekit.constant(_rng_array(rng, (8, 5), 0.3)) if const else anekit.input("b", (2, 8, 5))
    g = anekit.graph([ops.matmul(a, b, name="y")])
    feeds = {"a": _rng_array(rng, (2, 3, 8))}
    if not const:
        feeds["b"] = _rng_array(rng, (2, 8, 5))
    return g, feeds


def _attention(rng, mask=False):  # noqa: ANN001, ANN202
    q, k, v = (anekit.input(n, (1, 2, 6, 8)) for n in "qkv")
    feeds = {n: _rng_array(rng, (1, 2, 6, 8)) for n in "qkv"}
    m = anekit.constant(np.triu(np.full((6, 6), -1e4, np.float32), 1)) if mask else None
    y = record("attention", [q, k, v, m] if m is not None else [q, k, v], {}, name="y")
    return anekit.graph([y]), feeds


def _norm(op, rng):  # noqa: ANN001, ANN202
    shape = (2, 6, 3, 4)
    x = anekit.input("x", shape)
    c = shape[1]
    if op == "batch_norm":
        args = [x, *(anekit.constant(a) for a in (_rng_array(rng, (c,)), _rng_array(rng, (c,)),
                                                  _rng_array(rng, (c,)), np.abs(_rng_array(rng, (c,))) + 0.5))]  # fmt: skip
        y = record(op, args, {"epsilon": 1e-3}, name="y")
    elif op == "instance_norm":
        y = record(
            op,
            [x, anekit.constant(_rng_array(rng, (c,))), anekit.constant(_rng_array(rng, (c,)))],
            {},
            name="y",
        )
    elif op == "group_norm":
        y = record(op, [x, anekit.constant(_rng_array(rng, (c,))), anekit.constant(_rng_array(rng, (c,)))],
                   {"num_groups": 3}, name="y")  # fmt: skip
    elif op == "layer_norm":
        y = record(op, [x, anekit.constant(_rng_array(rng, (4,))), anekit.constant(_rng_array(rng, (3, 4)))],
                   {"axis": 2}, name="y")  # fmt: skip
    elif op == "rms_norm":
        y = record(op, [x, anekit.constant(_rng_array(rng, (4,)))], {"axis": -1}, name="y")
    else:
        y = record(op, [x], {"size": 3}, name="y")
    return anekit.graph([y]), {"x": _rng_array(rng, shape, 2.0)}


def _pool(op, rng, **attrs):  # noqa: ANN001, ANN202
    x = anekit.input("x", (1, 3, 7, 8))
    y = record(op, [x], attrs, name="y")
    return anekit.graph([y]), {"x": _rng_array(rng, (1, 3, 7, 8))}


def _reduce(op, rng, **attrs):  # noqa: ANN001, ANN202
    x = anekit.input("x", (2, 3, 4, 5))
    y = record(op, [x], attrs, name="y")
    data = (
        np.abs(_rng_array(rng, (2, 3, 4, 5))) + 0.1
        if op == "reduce_log_sum"
        else _rng_array(rng, (2, 3, 4, 5))
    )
    return anekit.graph([y]), {"x": data}


def _shape(fn, shape=(2, 3, 4, 5), dtype="fp32"):  # noqa: ANN001, ANN202
    def build(rng: np.random.Generator):
        x = anekit.input("x", shape, dtype)
        y = fn(x)
        data = (
            _rng_array(rng, shape)
            if dtype == "fp32"
            else rng.integers(-5, 5, shape).astype(np.int64)
        )
        return anekit.graph([y] if not isinstance(y, tuple) else list(y)), {"x": data}

    return build


def _gather(rng, live=True):  # noqa: ANN001, ANN202
    table = anekit.constant(_rng_array(rng, (11, 6)))
    if live:
        ids = anekit.input("ids", (1, 4), "int64")
        feeds = {"ids": np.array([[3, -1, 0, 10]], np.int64)}
    else:
        ids, feeds = anekit.constant(np.array([2, -3], np.int64)), {}
    x = anekit.input("x", (1, 4, 6)) if not live else None
    if x is not None:
        feeds["x"] = _rng_array(rng, (1, 4, 6))
        y = ops.add(record("gather", [table, ids], {"axis": 0}), ops.reduce_mean(x, [1]), name="y")
    else:
        y = record("gather", [table, ids], {"axis": 0}, name="y")
    return anekit.graph([y]), feeds


def _gather_nd_live(rng):  # noqa: ANN001, ANN202
    x = anekit.input("x", (3, 4, 5))
    idx = anekit.input("idx", (2, 2), "int64")
    g = anekit.graph([record("gather_nd", [x, idx], {}, name="y")])
    return g, {"x": _rng_array(rng, (3, 4, 5)), "idx": np.array([[2, -1], [0, 1]], np.int64)}


def _einsum(rng, equation, *shapes):  # noqa: ANN001, ANN002, ANN202
    inputs = [anekit.input(f"x{i}", s) for i, s in enumerate(shapes)]
    g = anekit.graph([ops.einsum(equation, *inputs, name="y")])
    return g, {f"x{i}": _rng_array(rng, s) for i, s in enumerate(shapes)}


def _recurrent(
    rng, op, *, direction="forward", layout=0, peepholes=False, initial=False, lengths=None, **attrs
):  # noqa: ANN001, ANN002, ANN202
    """A recurrent layer over 5 steps of a batch of 3 (x and the initial states are inputs)."""
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[op]
    seq, batch, size, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = (seq, batch, size) if layout == 0 else (batch, seq, size)
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    x = anekit.input("x", x_shape)
    args = [
        x,
        *(
            anekit.constant(_rng_array(rng, s, 0.5))
            for s in (
                (dirs, gates * hidden, size),
                (dirs, gates * hidden, hidden),
                (dirs, 2 * gates * hidden),
            )
        ),
    ]
    args.append(anekit.constant(np.array(lengths, np.int64)) if lengths else None)
    feeds = {"x": _rng_array(rng, x_shape)}
    if initial:
        args.append(anekit.input("h0", state_shape))
        feeds["h0"] = _rng_array(rng, state_shape, 0.5)
        if op == "lstm":
            args.append(anekit.constant(_rng_array(rng, state_shape, 0.5)))
    elif op == "lstm" and peepholes:
        args += [None, None]
    if peepholes:
        args.append(anekit.constant(_rng_array(rng, (dirs, 3 * hidden), 0.5)))
    while args and args[-1] is None:
        args.pop()
    outs = record(
        op, args, {"hidden_size": hidden, "direction": direction, "layout": layout, **attrs}
    )
    return anekit.graph(list(outs)), feeds


def _resize(rng, **attrs):  # noqa: ANN001, ANN202
    x = anekit.input("x", (1, 2, 4, 5))
    y = ops.resize(x, **attrs, name="y")
    return anekit.graph([y]), {"x": _rng_array(rng, (1, 2, 4, 5))}


CASES: tuple[Case, ...] = (
    *(unary(op) for op in ("relu", "sigmoid", "tanh", "exp", "abs", "neg", "sign", "floor", "ceil",
                           "round", "erf", "sin", "cos", "softplus", "softsign", "silu", "mish",
                           "hard_swish", "identity", "atan", "sinh", "cosh", "asinh")),  # fmt: skip
    unary("sqrt", low=0.1, high=4.0),
    unary("log", low=0.1, high=4.0),
    unary("reciprocal", low=0.5, high=4.0),
    unary("acos", low=-0.9, high=0.9),
    unary("asin", low=-0.9, high=0.9),
    unary("atanh", low=-0.9, high=0.9),
    unary("tan", low=-1.0, high=1.0),
    unary("acosh", low=1.1, high=4.0),
    unary("leaky_relu", {"alpha": 0.2}),
    unary("elu", {"alpha": 0.7}),
    unary("celu", {"alpha": 1.5}),
    unary("selu"),
    unary("hard_sigmoid", {"alpha": 0.3, "beta": 0.4}),
    unary("thresholded_relu", {"alpha": 0.5}),
    unary("gelu", {"approximate": "none"}),
    unary("gelu", {"approximate": "tanh"}),
    unary("clip", {"min": -0.5, "max": 0.7}),
    unary("clip", {"min": -0.5}),
    unary("clip", {"max": 0.7}),
    unary("isnan"),
    unary("isinf"),
    unary("cast", {"to": "int32"}),
    unary("cast", {"to": "bool"}),
    unary("cast", {"to": "fp16"}),
    *(binary(op) for op in ("add", "sub", "mul", "maximum", "minimum", "equal", "less", "greater",
                            "less_equal", "greater_equal", "not_equal", "prelu")),  # fmt: skip
    binary("div", positive=True),
    binary("pow", const_b=True),
    binary("add", const_b=True),
    binary("mod", positive=True),
    simple("fmod", lambda rng: (anekit.graph([record("mod", [anekit.input("x", (3, 4)), anekit.constant(np.float32(0.7))], {"fmod": True}, name="y")]),
                                 {"x": _rng_array(rng, (3, 4), 3.0)})),  # fmt: skip
    simple("where", _shape(lambda x: ops.where(ops.greater(x, 0.0), x, anekit.constant(np.float32(-1.0)), name="y"))),
    simple("where_scalars", _shape(lambda x: ops.where(ops.greater(x, 0.0), anekit.constant(np.float32(2.0)), anekit.constant(np.float32(-1.0)), name="y"))),
    simple("logic", _shape(lambda x: record("xor", [record("and", [ops.greater(x, 0.0), ops.less(x, 0.5)]),
                                                    record("or", [record("not", [ops.greater(x, -0.5)]), ops.less(x, -1.0)])],
                                            name="y"))),  # fmt: skip
    simple("int_div", _shape(lambda x: record("div", [x, anekit.constant(np.int64(3))], name="y"), dtype="int64")),
    simple("conv", lambda rng: _conv(rng)),
    simple("conv_no_bias", lambda rng: _conv(rng, bias=False)),
    simple("conv_grouped_strided", lambda rng: _conv(rng, groups=2, stride=2, padding=0)),
    simple("conv_dilated", lambda rng: _conv(rng, dilation=2, padding=2)),
    simple("conv_integer", _conv_integer, tol=0.0),
    simple("conv1d", _conv1d),
    simple("conv_transpose", lambda rng: _conv_transpose(rng)),
    simple("conv_transpose_output_padding", lambda rng: _conv_transpose(rng, 1)),
    simple("matmul_const", lambda rng: _matmul(rng)),
    simple("matmul_live", lambda rng: _matmul(rng, const=False)),
    simple("attention", lambda rng: _attention(rng)),
    # causal and boolean-mask attention reach codegen only decomposed (test_mil refuses them)
    simple("attention_float_mask", lambda rng: _attention(rng, mask=True)),
    simple("softmax", _shape(lambda x: ops.softmax(x, axis=1, name="y"))),
    simple("log_softmax", _shape(lambda x: ops.log_softmax(x, axis=-1, name="y"))),
    *(simple(op, lambda rng, op=op: _norm(op, rng), 3e-2)
      for op in ("batch_norm", "instance_norm", "group_norm", "layer_norm", "rms_norm", "lrn")),  # fmt: skip
    simple("max_pool", lambda rng: _pool("max_pool", rng, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    simple("max_pool_ceil", lambda rng: _pool("max_pool", rng, kernel=(2, 3), strides=(2, 2), ceil_mode=True)),
    simple("avg_pool", lambda rng: _pool("avg_pool", rng, kernel=(3, 3), strides=(1, 2), pads=(1, 0, 1, 1))),
    simple("avg_pool_include_pad", lambda rng: _pool("avg_pool", rng, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                                     count_include_pad=True, ceil_mode=True)),  # fmt: skip
    simple("lp_pool", lambda rng: _pool("lp_pool", rng, kernel=(2, 2), strides=(2, 2), p=2)),
    *(simple(op, lambda rng, op=op: _reduce(op, rng, axes=(1, 3), keepdims=False), 3e-2)
      for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1",
                 "reduce_l2", "reduce_log_sum", "reduce_log_sum_exp", "reduce_sum_square")),  # fmt: skip
    simple("reduce_all_keep", lambda rng: _reduce("reduce_mean", rng)),
    simple("argmax", lambda rng: _reduce("argmax", rng, axis=2, keepdims=False)),
    simple("argmin_last", lambda rng: _reduce("argmin", rng, axis=1, select_last_index=True)),
    simple("reshape", _shape(lambda x: ops.reshape(x, (6, 20), name="y"))),
    simple("transpose", _shape(lambda x: ops.transpose(x, (0, 2, 3, 1), name="y"))),
    simple("concat", _shape(lambda x: ops.concat([x, ops.relu(x), ops.neg(x)], axis=2, name="y"))),
    simple("split", _shape(lambda x: record("split", [x], {"axis": 3, "sizes": (2, 3)}))),
    simple("slice", _shape(lambda x: ops.slice(x, starts=[1, -2], ends=[4, 0], axes=[2, 3], steps=[2, -1], name="y"))),
    simple("slice_to_start", _shape(lambda x: record("slice", [x], {"starts": (-1,), "ends": (-100,), "axes": (3,), "steps": (-2,)}, name="y"))),
    simple("gather_live", lambda rng: _gather(rng)),
    simple("gather_const", lambda rng: _gather(rng, live=False)),
    simple("gather_elements", _shape(lambda x: record("gather_elements", [x, anekit.constant(np.array([[[[0, 2, 1, -1, 0]]]] * 1, np.int64).repeat(2, 0).repeat(3, 1))], {"axis": 2}, name="y"))),
    simple("expand", _shape(lambda x: ops.expand(x, (3, 1, 1, 1, 1), name="y"), shape=(1, 3, 1, 5))),
    simple("tile", _shape(lambda x: ops.tile(x, (1, 2, 1, 3), name="y"))),
    simple("pad_constant", _shape(lambda x: record("pad", [x], {"pads": (0, 1, 2, 0, 0, 0, 1, 2), "value": 1.5}, name="y"))),
    simple("pad_reflect", _shape(lambda x: record("pad", [x], {"pads": (0, 0, 1, 2, 0, 0, 1, 2), "mode": "reflect"}, name="y"))),
    simple("pad_edge_crop", _shape(lambda x: record("pad", [x], {"pads": (0, 0, -1, 2, 0, 0, 1, -2), "mode": "edge"}, name="y"))),
    simple("trilu", _shape(lambda x: record("trilu", [x], {"upper": False, "k": 1}, name="y"))),
    simple("depth_to_space_dcr", _shape(lambda x: ops.depth_to_space(x, 2, name="y"), shape=(1, 8, 2, 3))),
    simple("depth_to_space_crd", _shape(lambda x: ops.depth_to_space(x, 2, mode="CRD", name="y"), shape=(1, 8, 2, 3))),
    simple("space_to_depth", _shape(lambda x: record("space_to_depth", [x], {"block_size": 2}, name="y"), shape=(1, 2, 4, 6))),
    simple("gather_nd", _shape(lambda x: record("gather_nd", [x, anekit.constant(np.array([[[1, -1], [0, 2]], [[1, 0], [0, -4]]], np.int64))], {"batch_dims": 1}, name="y"))),
    simple("gather_nd_live", lambda rng: _gather_nd_live(rng)),
    simple("gather_nd_bool", _shape(lambda x: record("gather_nd", [ops.greater(x, 0.0), anekit.constant(np.array([[1, -1], [0, 2]], np.int64))], {}, name="y"))),
    simple("gather_elements_bool", _shape(lambda x: record("gather_elements", [ops.greater(x, 0.0), anekit.constant(np.zeros((2, 3, 4, 2), np.int64))], {"axis": 3}, name="y"))),
    simple("scatter_elements", _shape(lambda x: record("scatter_elements", [x, anekit.constant(np.array([[[[1, 0, -1, 2, 0]]]], np.int64).repeat(2, 0).repeat(3, 1)), anekit.constant(np.ones((2, 3, 1, 5), np.float32))], {"axis": 2, "reduction": "add"}, name="y"))),
    simple("scatter_nd", _shape(lambda x: record("scatter_nd", [x, anekit.constant(np.array([[1, 2], [0, -1]], np.int64)), anekit.constant(np.full((2, 4, 5), 7.0, np.float32))], {}, name="y"))),
    simple("one_hot", _shape(lambda x: record("one_hot", [x, anekit.constant(np.array([-1.0, 2.0], np.float32))], {"depth": 5, "axis": 1}, name="y"), shape=(2, 3), dtype="int64")),
    simple("topk", _shape(lambda x: record("topk", [x], {"k": 3, "axis": 2}))),
    simple("cumsum", _shape(lambda x: record("cumsum", [x], {"axis": 3, "exclusive": True, "reverse": True}, name="y"))),
    simple("hardmax", _shape(lambda x: record("hardmax", [x], {"axis": 1}, name="y"))),
    simple("shrink", _shape(lambda x: record("shrink", [x], {"lambd": 0.4, "bias": 0.1}, name="y"))),
    simple("einsum_matmul", lambda rng: _einsum(rng, "bij,bkj->bik", (2, 3, 4), (2, 5, 4))),
    simple("einsum_outer_sum", lambda rng: _einsum(rng, "ij,kj", (3, 4), (5, 4))),
    simple("einsum_batch_free", lambda rng: _einsum(rng, "abc,cbd->dab", (2, 3, 4), (4, 3, 5))),
    simple("einsum_reduce", lambda rng: _einsum(rng, "abc->ca", (2, 3, 4))),
    simple("lstm", lambda rng: _recurrent(rng, "lstm", direction="bidirectional")),
    simple("lstm_peepholes_layout1", lambda rng: _recurrent(rng, "lstm", layout=1, peepholes=True, initial=True, clip=2.0)),
    simple("lstm_lengths_input_forget", lambda rng: _recurrent(rng, "lstm", direction="reverse", lengths=(5, 0, 3), input_forget=True)),
    simple("gru", lambda rng: _recurrent(rng, "gru", direction="bidirectional", initial=True)),
    simple("gru_linear_before_reset", lambda rng: _recurrent(rng, "gru", linear_before_reset=True, activations=("hardsigmoid", "softsign"), activation_alpha=(0.3,), activation_beta=(0.4,))),
    simple("rnn_relu", lambda rng: _recurrent(rng, "rnn", activations=("relu",), layout=1)),
    simple("resize_nearest_2x", lambda rng: _resize(rng, sizes=(1, 2, 8, 10), mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    simple("resize_nearest_odd", lambda rng: _resize(rng, sizes=(1, 2, 7, 3), mode="nearest")),
    simple("resize_linear", lambda rng: _resize(rng, sizes=(1, 2, 6, 9), mode="linear")),
    simple("resize_cubic", lambda rng: _resize(rng, sizes=(1, 2, 6, 3), scales=(1, 1, 1.5, 0.6), mode="cubic")),
)  # fmt: skip


# --- engine layers ---------------------------------------------------------------------------


def _layer_graph(
    rng: np.random.Generator, main: str, kind: str
) -> tuple[Graph, dict[str, np.ndarray]]:
    """A graph of one ane_layer: conv/matmul/add as the main op with GOC, activations, transpose."""
    if main == "conv":
        x = anekit.input("x", (1, 4, 1, 16))
        base = anekit.graph([x])
        ed = base.edit()
        w = ed.add_constant(_rng_array(rng, (8, 4, 1, 1), 0.4), "w")
        main_inputs, main_attrs = ["x", w], {}
        out_shape = (1, 8, 1, 16)
    elif main == "matmul":
        x = anekit.input("x", (1, 16, 4))
        base = anekit.graph([x])
        ed = base.edit()
        w = ed.add_constant(_rng_array(rng, (4, 8), 0.4), "w")
        main_inputs, main_attrs = ["x", w], {}
        out_shape = (1, 16, 8)
    elif main == "goc":  # a gain/offset layer of its own (a constant elementwise op)
        x = anekit.input("x", (1, 8, 1, 16))
        base = anekit.graph([x])
        ed = base.edit()
        scale = ed.add_constant(_rng_array(rng, (1, 8, 1, 1)), "scale")
        shift = ed.add_constant(_rng_array(rng, (1, 8, 1, 1)), "shift")
        main_inputs, main_attrs = ["x", scale, shift], {}
        out_shape = (1, 8, 1, 16)
    else:  # a two-input elementwise layer
        x = anekit.input("x", (1, 8, 1, 16))
        z = anekit.input("z", (1, 8, 1, 16))
        base = anekit.graph([x, z])
        ed = base.edit()
        main_inputs, main_attrs = ["x", "z"], {}
        out_shape = (1, 8, 1, 16)
    inputs = list(main_inputs)
    channel = (
        (1, out_shape[1]) + (1,) * (len(out_shape) - 2)
        if main != "matmul"
        else (1, 1, out_shape[-1])
    )
    gain = ed.add_constant(_rng_array(rng, channel), "gain")
    offset = ed.add_constant(_rng_array(rng, channel), "offset")
    inputs += [gain, offset]
    n = len(main_inputs)
    steps = [EpilogueStep(Slot.GOC, "goc", {}, (n, n + 1))]
    if kind == "full":
        steps += [
            EpilogueStep(Slot.PRE_ACT, "relu"),
            EpilogueStep(Slot.POST_ACT, "gelu", {"approximate": "tanh"}),
        ]
        perm = (0, 3, 2, 1) if len(out_shape) == 4 else (0, 2, 1)
        steps.append(EpilogueStep(Slot.TRANSPOSE, "transpose", {"perm": perm}))
    else:
        steps.append(EpilogueStep(Slot.POST_ACT, "sigmoid"))
    attrs = layer_attrs(main, main_attrs, n, steps)
    (y,) = ed.add("ane_layer", inputs, attrs, name="layer")
    ed.name_outputs(["y"] + (["z_out"] if main == "add" else []))
    ed.output_names = [y] + (["z"] if main == "add" else [])
    g = ed.build()
    feeds = {v.name: _rng_array(rng, v.shape) for v in g.inputs}
    return g, feeds


ENGINE_LAYER_CASES: tuple[Case, ...] = tuple(
    simple(
        f"layer_{main}_{kind}",
        lambda rng, main=main, kind=kind: _layer_graph(rng, main, kind),
        3e-2,
    )
    for main in ("conv", "matmul", "add", "goc")
    for kind in ("full", "goc_sigmoid")
)
ALL_CASES = CASES + ENGINE_LAYER_CASES

# (case, device) pairs an engine program refuses, so they are lowered for the CPU only: exact
# GELU never reaches an engine program of a chip without the MIL gelu op (decompose
# approximates it, or validate sends it to the CPU); integer convolution is exact only in
# fp32, and its int8 operands keep it off the engine
CPU_ONLY = frozenset({("gelu_approximatenone", "ane"), ("conv_integer", "ane")})
