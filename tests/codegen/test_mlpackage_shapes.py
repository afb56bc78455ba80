"""Core ML enumerated shapes: examples/digits_fcn.onnx (a fully convolutional digit classifier
with dynamic batch, height and width) exported as one program for several shapes. The
saved package is read back by coremltools (the spec's enumerated shapes and default, and the
MIL program through its milproto loader); at each shape the program compiled for it runs in
anekit's simulator against onnxruntime; shapes one program cannot serve are refused with the
operation named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.cli import main
from anekit.codegen.coreml_options import CoreMLOptions, ImageInput
from anekit.errors import AnekitError
from tests.codegen.test_mlpackage_options import reload

ROOT = Path(__file__).resolve().parents[2]
FCN = ROOT / "examples" / "digits_fcn.onnx"
DIGITS_CNN = ROOT / "examples" / "digits_cnn.onnx"
ct = pytest.importorskip("coremltools")
HW_SHAPES = [(1, 1, 8, 8), (1, 1, 16, 16), (1, 1, 12, 20)]


@pytest.fixture(scope="module")
def fcn():  # noqa: ANN201
    return anekit.compile(str(FCN), "m4", input_shapes={"image": (1, 1, 8, 8)})


def _symbolic(dims) -> list[bool]:  # noqa: ANN001
    from coremltools.converters.mil.mil.types.symbolic import is_symbolic

    return [bool(is_symbolic(d)) for d in dims]


def _digits(shape: tuple[int, ...]) -> np.ndarray:
    """Held-out digits at ``shape``: 8x8 images repeated 2x2 for 16x16, zero-padded else."""
    images = np.load(ROOT / "examples" / "digits_heldout.npz")["images"][: shape[0]]
    n, _, h, w = shape
    if (h, w) == (16, 16):
        return np.ascontiguousarray(images.repeat(2, axis=2).repeat(2, axis=3))
    out = np.zeros(shape, np.float32)
    out[:, :, :8, :8] = images[:n, :, : min(h, 8), : min(w, 8)]
    return out


def test_height_and_width_enumerated_in_the_spec_and_symbolic_in_the_program(fcn, tmp_path) -> None:
    package = fcn.save_mlpackage(tmp_path / "f.mlpackage", enumerated_shapes={"image": HW_SHAPES})
    spec, program = reload(package)
    (feature,) = spec.description.input
    array = feature.type.multiArrayType
    assert [tuple(s.shape) for s in array.enumeratedShapes.shapes] == HW_SHAPES
    assert tuple(array.shape) == HW_SHAPES[0]  # the default: the first listed
    main_fn = program.functions["main"]
    assert _symbolic(main_fn.inputs["image"].shape) == [False, False, True, True]
    kinds = [op.op_type for op in main_fn.operations]
    # the engine's 8x8 input padding and its unpadding are not in the one program
    assert "slice_by_size" not in kinds and "pad" not in kinds
    pools = [op for op in main_fn.operations if op.op_type == "max_pool"]
    assert len(pools) == 1 and _symbolic(pools[0].outputs[0].shape) == [False, False, True, True]
    (probs,) = spec.description.output
    assert tuple(probs.type.multiArrayType.shape) == (1, 10)
    # at every shape, the operations compiled for it (engine padding aside) are the package's
    replayed = [k for k in kinds if k not in ("const", "cast", "identity")]
    for shape in HW_SHAPES:
        compiled = anekit.compile(str(FCN), "m4", input_shapes={"image": shape})
        ops = compiled.program.programs[0].function("main").operations
        assert [op.op for op in ops if op.op not in ("const", "slice_by_size", "pad")] == replayed


def test_each_shape_runs_in_the_simulator_as_onnxruntime_does(tmp_path) -> None:
    """The exported program performs, at each shape, the operations compiled for that shape;
    those run in anekit's simulator and agree with onnxruntime on held-out digits."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(FCN), providers=["CPUExecutionProvider"])
    for shape in [*HW_SHAPES, (4, 1, 8, 8)]:
        x = _digits(shape)
        (expected,) = session.run(None, {"image": x})
        got = anekit.compile(str(FCN), "m4", input_shapes={"image": shape}).run({"image": x}, "sim")
        np.testing.assert_allclose(got["probs"], expected, atol=2e-3)
        assert (got["probs"].argmax(-1) == expected.argmax(-1)).all()


def test_batch_sizes_get_reshapes_to_minus_one(tmp_path) -> None:
    cm = anekit.compile(str(FCN), "m4", input_shapes={"image": (2, 1, 8, 8)})
    batches = [(2, 1, 8, 8), (4, 1, 8, 8), (8, 1, 8, 8)]
    spec, program = reload(cm.save_mlpackage(tmp_path / "b.mlpackage",
                                             enumerated_shapes={"image": batches}))  # fmt: skip
    array = spec.description.input[0].type.multiArrayType
    assert [tuple(s.shape) for s in array.enumeratedShapes.shapes] == batches
    main_fn = program.functions["main"]
    assert _symbolic(main_fn.inputs["image"].shape) == [True, False, False, False]
    targets = [op.shape.val.tolist() for op in main_fn.operations if op.op_type == "reshape"]
    # the flatten, the engine's matmul view and its way back: the batch is the one -1
    assert targets == [[-1, 64], [1, 64, 1, -1], [10, -1]]


def test_image_input_with_enumerated_sizes(fcn, tmp_path) -> None:
    options = CoreMLOptions(images={"image": ImageInput("G", scale=1 / 255)},
                            enumerated_shapes={"image": HW_SHAPES[:2]})  # fmt: skip
    spec, _ = reload(fcn.save_mlpackage(tmp_path / "i.mlpackage", options))
    image = spec.description.input[0].type.imageType
    assert image.colorSpace == ct.proto.FeatureTypes_pb2.ImageFeatureType.GRAYSCALE
    assert [(s.height, s.width) for s in image.enumeratedSizes.sizes] == [(8, 8), (16, 16)]
    assert (image.height, image.width) == (8, 8)


def test_batch_one_with_larger_batches_is_refused_naming_the_op(fcn, tmp_path) -> None:
    with pytest.raises(AnekitError) as caught:
        fcn.save_mlpackage(tmp_path / "r.mlpackage",
                           enumerated_shapes={"image": [(1, 1, 8, 8), (2, 1, 8, 8)]})  # fmt: skip
    text = str(caught.value)
    assert "'head_head_0_Flatten_output_0' (reshape)" in text
    assert "image=2x1x8x8" in text and "image=1x1x8x8" in text
    assert not (tmp_path / "r.mlpackage").exists()


def test_a_constant_that_depends_on_the_shape_is_refused_naming_the_op(tmp_path) -> None:
    """A crop to the end of a dynamic width: its MIL end index is the width itself."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array([v], np.int64), n)
              for n, v in (("starts", 1), ("ends", 2**62), ("axes", 3))]  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"], name="crop"),
         helper.make_node("Relu", ["s"], ["y"], name="act")], "crop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    cm = anekit.compile(model, "m4", input_shapes={"x": (1, 2, 8, 8)})
    with pytest.raises(AnekitError, match=r"'s' \(slice_by_index\) has different constants 'end'"):
        cm.save_mlpackage(tmp_path / "c.mlpackage",
                          enumerated_shapes={"x": [(1, 2, 8, 8), (1, 2, 8, 16)]})  # fmt: skip
    assert not (tmp_path / "c.mlpackage").exists()


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"image": [(1, 3, 8, 8)]}, "sets dimension 1 to 3, but the model fixes it to 1"),
        ({"image": [(1, 8, 8)]}, "has rank 3; the model's input has rank 4"),
        ({"pixels": [(1, 1, 8, 8)]}, "'pixels', which is not an input of the model"),
    ],
)
def test_shapes_that_contradict_the_model(fcn, tmp_path, shapes, message) -> None:
    with pytest.raises(AnekitError, match=message):
        fcn.save_mlpackage(tmp_path / "x.mlpackage", enumerated_shapes=shapes)
    assert not (tmp_path / "x.mlpackage").exists()


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"image": []}, "non-empty list of shapes"),
        ({"image": [(1, 1, 0, 8)]}, "whole positive sizes"),
        ({"image": [(1, 1, 8, 8), (1, 8, 8)]}, "different ranks"),
        ({"image": [(1, 1, 8, 8), (1, 1, 8, 8)]}, "list a shape twice"),
        ({"image": (1, 1, 8, 8)}, "not a list of whole positive sizes"),
    ],
)
def test_malformed_shape_sets(shapes, message) -> None:
    with pytest.raises(AnekitError, match=message):
        CoreMLOptions(enumerated_shapes=shapes)


def test_a_static_model_and_a_loaded_bundle_refuse(tmp_path) -> None:
    digits = anekit.compile(str(DIGITS_CNN), "m4")
    with pytest.raises(AnekitError, match="has no dynamic dimension"):
        digits.save_mlpackage(tmp_path / "s.mlpackage",
                              enumerated_shapes={"image": [(1, 1, 8, 8), (1, 1, 16, 16)]})  # fmt: skip
    with pytest.raises(AnekitError, match="compile the model again"):
        digits.program.save_mlpackage(tmp_path / "p.mlpackage",
                                      enumerated_shapes={"image": [(1, 1, 8, 8)]})  # fmt: skip


def test_command_line(tmp_path, capsys) -> None:
    package, bundle = tmp_path / "f.mlpackage", tmp_path / "f.anekit"
    code = main(["compile", str(FCN), "-o", str(bundle), "--mlpackage", str(package),
                 "--enumerated-shape", "image=1x1x8x8,1x1x16x16"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    spec, _ = reload(package)
    array = spec.description.input[0].type.multiArrayType
    assert [tuple(s.shape) for s in array.enumeratedShapes.shapes] == [(1, 1, 8, 8), (1, 1, 16, 16)]
    # the bundle takes the default shape (no --shape given)
    assert anekit.load(bundle).manifest.inputs[0].shape == (1, 1, 8, 8)
    for flags, message in [
        (["--enumerated-shape", "image=1x1x8x8,2x1x8x8"], "cannot serve every enumerated shape"),
        (["--enumerated-shape", "image=1x2x8x8"], "fixes it to 1"),
        (["--enumerated-shape", "img=1x1x8x8"], "'img', which is not an input"),
        (["--enumerated-shape", "image="], "is not NAME=DIMS,DIMS"),
        (["--enumerated-shape", "image=1x1x8x8", "--enumerated-shape", "image=1x1x9x9"], "twice"),
    ]:
        out = tmp_path / "refused.anekit"
        code = main(["compile", str(FCN), "-o", str(out), "--mlpackage",
                     str(tmp_path / "refused.mlpackage"), *flags])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (flags, err)
        assert not out.exists() and not (tmp_path / "refused.mlpackage").exists()
    code = main(["compile", str(FCN), "-o", str(tmp_path / "n.anekit"), "--shape", "image=1x1x8x8",
                 "--enumerated-shape", "image=1x1x8x8"])  # fmt: skip
    assert code == 2 and "add --mlpackage" in capsys.readouterr().err
