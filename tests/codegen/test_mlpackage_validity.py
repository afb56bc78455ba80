"""Every Core ML package anekit writes is valid: each zoo model, each architecture of the
placement zoo and each legalised or decomposed form is compiled for the M1, M2, M4 and M5
dialects, exported as an .mlpackage and read back through coremltools' milproto loader,
which type-checks every op against Apple's definitions (a reflect pad's fp32 default
constant beside an fp16 input was refused on M4 and later).

The one-node forms and two zoo models run by default; every zoo model and architecture is
`slow`."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit.compiler import compile as compile_model

ct = pytest.importorskip("coremltools")

CHIPS = ("m1", "m2", "m4", "m5")
RNG = np.random.default_rng(24)


def _load_through_milproto(path: Path) -> int:
    """The number of ops coremltools' milproto loader reads from the package (raises if it
    refuses one)."""
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    return sum(len(f.operations) for f in program.functions.values())


def _roundtrip(model, chip: str, where: Path) -> None:
    cm = compile_model(model, chip)
    errors = [d for d in cm.diagnostics if d.severity == "error"]
    assert not errors, f"{chip}: {errors}"
    package = cm.save_mlpackage(where / f"{chip}.mlpackage")
    assert _load_through_milproto(package) > 0, chip


def _one_node(op: str, x_shape, consts=None, out_rank: int | None = None, opset=18, **attrs):
    consts = consts or {}
    node = helper.make_node(op, ["x", *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [
            helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, [None] * (out_rank or len(x_shape))
            )
        ],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


_PADS = np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)

# the legalised (engine_forms, split_kernels) and decomposed forms, one node each
FORMS = {
    "pad_reflect": lambda: _one_node("Pad", [1, 4, 8, 8], {"pads": _PADS}, mode="reflect"),
    "pad_edge": lambda: _one_node("Pad", [1, 4, 8, 8], {"pads": _PADS}, mode="edge"),
    "pad_constant": lambda: _one_node("Pad", [1, 4, 8, 8], {"pads": _PADS}, mode="constant"),
    "einsum": lambda: _one_node("Einsum", [2, 3, 4], {"w": _w(2, 4, 5)}, equation="bij,bjk->bik"),
    "depth_to_space": lambda: _one_node("DepthToSpace", [1, 8, 3, 3], blocksize=2, mode="CRD"),
    "space_to_depth": lambda: _one_node("SpaceToDepth", [1, 2, 4, 4], blocksize=2),
    "tile": lambda: _one_node("Tile", [1, 3, 4, 5], {"r": np.array([1, 2, 1, 3], np.int64)}),
    "cumsum": lambda: _one_node("CumSum", [1, 3, 6], {"axis": np.array(2, np.int64)}),
    "fractional_pow": lambda: _one_node("Pow", [1, 3, 6], {"e": np.array(1.5, np.float32)}),
    "conv_transpose_1d": lambda: _one_node(
        "ConvTranspose", [1, 4, 10], {"w": _w(4, 3, 4)}, strides=[2], pads=[1, 1]
    ),
    "wide_kernel_conv": lambda: _one_node("Conv", [1, 2, 1, 64], {"w": _w(3, 2, 1, 40)}),
    "strided_wide_conv": lambda: _one_node("Conv", [1, 1, 600], {"w": _w(10, 1, 400)}, strides=[160]),
    "short_lstm": lambda: _one_node(
        "LSTM", [1, 1, 5], {"w": _w(1, 24, 5), "r": _w(1, 24, 6), "b": _w(1, 48)}, 4, hidden_size=6
    ),
    "layer_norm": lambda: _one_node(
        "LayerNormalization", [1, 4, 16], {"s": _w(16), "b": _w(16)}, axis=-1
    ),
    "group_norm": lambda: _one_node(
        "GroupNormalization", [1, 8, 4, 4], {"s": _w(8), "b": _w(8)}, opset=21, num_groups=2
    ),
    "instance_norm": lambda: _one_node(
        "InstanceNormalization", [1, 4, 5, 5], {"s": _w(4), "b": _w(4)}
    ),
    "softmax": lambda: _one_node("Softmax", [1, 4, 16], axis=-1),
    "log_softmax": lambda: _one_node("LogSoftmax", [1, 4, 16], axis=-1),
    "erf": lambda: _one_node("Erf", [1, 4, 16]),
    "lrn": lambda: _one_node("LRN", [1, 8, 4, 4], size=3),
    "resize": lambda: _one_node(
        "Resize",
        [1, 3, 4, 4],
        {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
        mode="linear",
    ),
}


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("form", list(FORMS))
def test_every_legalised_form_is_a_valid_mlpackage(form: str, chip: str, tmp_path: Path) -> None:
    model = FORMS[form]()
    onnx.checker.check_model(model)
    _roundtrip(model, chip, tmp_path)


def _zoo_names() -> list:
    from tests import zoo

    fast = {"resnet_cnn", "transformer_layer"}
    return [pytest.param(n, marks=() if n in fast else pytest.mark.slow) for n in zoo.model_names()]


@pytest.mark.parametrize("name", _zoo_names())
def test_every_zoo_model_is_a_valid_mlpackage(name: str, tmp_path: Path) -> None:
    from tests import zoo

    case = zoo.load(name)
    for chip in CHIPS:
        _roundtrip(str(case.path), chip, tmp_path)


def _architectures() -> list[str]:
    from tests.arch_zoo import ARCHITECTURES

    return list(ARCHITECTURES)


@pytest.mark.slow
@pytest.mark.parametrize("name", _architectures())
def test_every_architecture_is_a_valid_mlpackage(name: str, tmp_path: Path) -> None:
    from anekit.frontend.torch import from_torch
    from tests.arch_zoo import ARCHITECTURES

    module, inputs, names = ARCHITECTURES[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = from_torch(module, inputs, list(names))
    for chip in CHIPS:
        _roundtrip(graph, chip, tmp_path)
