"""Pooling, LRN and transposed-convolution kernels against onnxruntime on configurations
the ONNX node cases leave out (ceil mode with pads, indices with dilation, groups...)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from anekit.ir.dtypes import to_dtype
from anekit.ir.registry import InferError, TensorType, infer_types
from tests.ir.ort_oracle import run_ir, run_ort, types

ort = pytest.importorskip("onnxruntime")


RNG = np.random.default_rng(7)

POOL_CONFIGS = [
    # kernel, strides, pads, dilations, ceil_mode, input spatial
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, (8, 9)),
    ((2, 3), (2, 1), (0, 1, 1, 0), (2, 1), True, (7, 6)),
    ((3,), (3,), (1, 2), (1,), True, (10,)),
    ((2, 2, 2), (2, 1, 2), (1, 0, 1, 0, 1, 1), (1, 2, 1), False, (5, 6, 5)),
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True, (6, 6)),
]


@pytest.mark.parametrize("config", POOL_CONFIGS)
def test_max_pool_with_indices_matches_onnxruntime(config) -> None:
    kernel, strides, pads, dil, ceil, spatial = config
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    onnx_attrs = dict(
        kernel_shape=kernel, strides=strides, pads=pads, dilations=dil, ceil_mode=int(ceil)
    )
    y_ref, i_ref = run_ort("MaxPool", [x], 2, **onnx_attrs)
    ir_attrs = dict(kernel=kernel, strides=strides, pads=pads, dilations=dil, ceil_mode=ceil)
    y, idx = run_ir("max_pool", [x], return_indices=True, **ir_attrs)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(idx, i_ref)


def test_max_pool_column_major_indices_matches_onnxruntime() -> None:
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    y_ref, i_ref = run_ort("MaxPool", [x], 2, kernel_shape=(2, 3), strides=(1, 2), storage_order=1)
    y, idx = run_ir(
        "max_pool", [x], kernel=(2, 3), strides=(1, 2), return_indices=True, storage_order=1
    )
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(idx, i_ref)


def test_max_pool_uint8_keeps_its_dtype() -> None:
    x = RNG.integers(0, 255, (1, 2, 6, 6), dtype=np.uint8)
    (y_ref,) = run_ort("MaxPool", [x], kernel_shape=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))
    (y,) = run_ir("max_pool", [x], kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, y_ref)


@pytest.mark.parametrize("config", POOL_CONFIGS)
@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool_matches_onnxruntime(config, include_pad) -> None:
    kernel, strides, pads, dil, ceil, spatial = config
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    (y_ref,) = run_ort(
        "AveragePool",
        [x],
        kernel_shape=kernel,
        strides=strides,
        pads=pads,
        dilations=dil,
        ceil_mode=int(ceil),
        count_include_pad=int(include_pad),
    )
    (y,) = run_ir(
        "avg_pool",
        [x],
        kernel=kernel,
        strides=strides,
        pads=pads,
        dilations=dil,
        ceil_mode=ceil,
        count_include_pad=include_pad,
    )
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnxruntime(p) -> None:
    x = RNG.standard_normal((1, 2, 7, 8)).astype(np.float32)
    (y_ref,) = run_ort("LpPool", [x], kernel_shape=(3, 2), strides=(2, 2), pads=(1, 0, 1, 1), p=p)
    (y,) = run_ir("lp_pool", [x], kernel=(3, 2), strides=(2, 2), pads=(1, 0, 1, 1), p=p)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size) -> None:
    x = RNG.standard_normal((2, 7, 3, 4)).astype(np.float32)
    (y_ref,) = run_ort("LRN", [x], size=size, alpha=0.3, beta=0.6, bias=2.0)
    (y,) = run_ir("lrn", [x], size=size, alpha=0.3, beta=0.6, bias=2.0)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


def test_lrn_even_size_window_follows_the_spec() -> None:
    # onnxruntime only takes odd sizes; the spec's window for size 4 is [c - 1, c + 2]
    x = RNG.standard_normal((1, 6, 2, 2)).astype(np.float32)
    (y,) = run_ir("lrn", [x], size=4, alpha=0.5, beta=0.75, bias=1.0)
    for c in range(6):
        window = (x[:, max(c - 1, 0) : c + 3] ** 2).sum(axis=1)
        expect = x[:, c] / (1.0 + 0.5 / 4 * window) ** 0.75
        np.testing.assert_allclose(y[:, c], expect, rtol=1e-6)


CONVT_CONFIGS = [
    # in channels, out per group, group, kernel, strides, pads, dilations, output_padding, spatial
    (4, 3, 2, (3, 3), (2, 2), (1, 0, 1, 2), (1, 2), (1, 0), (5, 4)),
    (3, 2, 1, (2,), (3,), (0, 1), (2,), (2,), (6,)),
    (6, 1, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (0, 0), (4, 4)),
    (2, 2, 1, (2, 2, 2), (2, 1, 2), (0, 0, 0, 1, 0, 1), (1, 1, 1), (1, 0, 0), (3, 3, 2)),
]


@pytest.mark.parametrize("config", CONVT_CONFIGS)
def test_conv_transpose_matches_onnxruntime(config) -> None:
    c, mg, g, k, s, pads, d, op, spatial = config
    x = RNG.standard_normal((2, c, *spatial)).astype(np.float32)
    w = RNG.standard_normal((c, mg, *k)).astype(np.float32)
    b = RNG.standard_normal((mg * g,)).astype(np.float32)
    (y_ref,) = run_ort(
        "ConvTranspose", [x, w, b], group=g, strides=s, pads=pads, dilations=d, output_padding=op
    )
    (y,) = run_ir(
        "conv_transpose", [x, w, b], group=g, strides=s, pads=pads, dilations=d, output_padding=op
    )
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)


def test_conv_transpose_negative_pads_append_zeros() -> None:
    x = np.ones((1, 1, 2), dtype=np.float32)
    w = np.ones((1, 1, 2), dtype=np.float32)
    (y,) = run_ir("conv_transpose", [x, w, None], pads=(-1, -2))
    np.testing.assert_array_equal(y, [[[0, 1, 2, 1, 0, 0]]])


@pytest.mark.parametrize(
    ("op", "shapes", "attrs", "message"),
    [
        ("max_pool", [(1, 1, 4, 4)], {"kernel": (5, 5)}, "does not fit the padded input"),
        ("max_pool", [(1, 4, 4)], {"kernel": (2, 2)}, "need 1 values"),
        ("max_pool", [(4, 4)], {"kernel": (2,)}, "rank >= 3"),
        ("avg_pool", [(1, 1, 4, 4)], {"kernel": (2, 2), "strides": (0, 1)}, "must be positive"),
        ("lp_pool", [(1, 1, 4, 4)], {"kernel": (2, 2), "p": 0}, "p must be a positive"),
        ("lrn", [(1, 3, 4, 4)], {"size": 0}, "size must be positive"),
        ("conv_transpose", [(1, 4, 3, 3), (3, 2, 2, 2)], {}, "expects 3 input channels"),
        ("conv_transpose", [(1, 4, 3, 3), (4, 2, 2, 2)], {"group": 3}, "do not divide into 3"),
        ("conv_transpose", [(1, 1, 2, 2), (1, 1, 2, 2)], {"pads": (2, 2, 2, 2)}, "leave no output"),
    ],
)
def test_inference_errors_name_the_problem(op, shapes, attrs, message) -> None:
    with pytest.raises(InferError, match=message):
        infer_types(op, types(*shapes), attrs)


def test_pool_rejects_int_average() -> None:
    with pytest.raises(InferError, match="float tensor"):
        infer_types("avg_pool", [TensorType((1, 1, 4, 4), to_dtype("int32"))], {"kernel": (2, 2)})


def _light_layer_configs() -> list[tuple[str, onnx.NodeProto, tuple[int, ...]]]:
    """Every distinct pooling/LRN layer of onnx's bundled light models with its input shape."""
    import glob
    import os

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    seen, configs = set(), []
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        model = onnx.shape_inference.infer_shapes(onnx.load(path))
        shapes = {
            vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            for vi in [*model.graph.value_info, *model.graph.input]
        }
        for node in model.graph.node:
            if node.op_type not in ("MaxPool", "AveragePool", "GlobalAveragePool", "LRN"):
                continue
            key = (node.op_type, shapes[node.input[0]], str(node.attribute))
            if key not in seen:
                seen.add(key)
                configs.append((os.path.basename(path), node, shapes[node.input[0]]))
    return configs


@pytest.mark.parametrize(
    ("model", "node", "shape"),
    _light_layer_configs(),
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_light_model_layers_match_onnxruntime(model, node, shape) -> None:
    from anekit.frontend.onnx import from_onnx

    x = RNG.standard_normal(shape).astype(np.float32)
    layer = onnx.helper.make_node(node.op_type, ["x"], ["y"])
    layer.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph(
        [layer], "g", [onnx.helper.make_tensor_value_info("x", 1, shape)],
        [onnx.helper.make_empty_tensor_value_info("y")],
    )  # fmt: skip
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 9)], ir_version=7)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    (y,) = from_onnx(m).run({"x": x}).values()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def _single_node(op: str, shape, opset: int, **attrs) -> onnx.ModelProto:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op, ["x"], ["y"], **attrs)], "g",
        [onnx.helper.make_tensor_value_info("x", 1, shape)],
        [onnx.helper.make_empty_tensor_value_info("y")],
    )  # fmt: skip
    return onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=7
    )


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        ("GlobalLpPool", 2, {"p": 3}),
        ("GlobalLpPool", 2, {}),
        ("Upsample", 7, {"scales": [1.0, 1.0, 2.0, 3.0], "mode": "nearest"}),
        ("Upsample", 7, {"scales": [1.0, 1.0, 1.5, 2.0], "mode": "linear"}),
    ],
)
def test_ops_without_node_cases_match_onnxruntime(op, opset, attrs) -> None:
    from anekit.frontend.onnx import from_onnx

    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    model = _single_node(op, x.shape, opset, **attrs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    (y,) = from_onnx(model).run({"x": x}).values()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
