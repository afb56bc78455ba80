"""User mistakes are the user's: exit status 2 with a message naming what is wrong (never
"internal error ... this is a bug", exit 1), and an AnekitError subclass from the Python
API (never a raw numpy, protobuf or OS exception)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper

import anekit
from anekit.errors import InputError, ModelError
from tests.safety.model_cases import assert_user_error, cli, model, relu, save, value


@pytest.fixture
def relu_file(tmp_path):
    return save(relu(), tmp_path)


@pytest.fixture
def x_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.ones((1, 4), np.float32))
    return path


# --- output folders -------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["missing/deeper", "file.txt"])
def test_compile_into_a_folder_that_cannot_hold_it(folder, relu_file, tmp_path, capsys) -> None:
    (tmp_path / "file.txt").write_text("not a folder")
    status, err = cli(capsys, "compile", relu_file, "-o", tmp_path / folder / "m.anekit")
    assert_user_error(status, err, folder.split("/")[0])
    with pytest.raises(anekit.AnekitError):
        anekit.compile(relu_file).save(tmp_path / folder / "m.anekit")


def test_outputs_the_file_system_refuses(relu_file, x_file, capsys) -> None:
    """/proc accepts no new files, even from root: the OSError is the user's path."""
    status, err = cli(capsys, "compile", relu_file, "-o", "/proc/m.anekit")
    assert_user_error(status, err, "/proc/m.anekit")
    status, err = cli(capsys, "run", relu_file, "-i", f"x={x_file}", "-o", "/proc/y.npz")
    assert_user_error(status, err, "/proc/y.npz")
    status, err = cli(capsys, "run", relu_file, "-i", f"x={x_file}", "-o", "/missing/y.npz")
    assert_user_error(status, err, "/missing")
    with pytest.raises(anekit.AnekitError, match="/proc/m.anekit"):
        anekit.compile(relu_file).save("/proc/m.anekit")


# --- shapes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["x=99999999999999999999x4", "x=1x99999999999", "x=1.5x4", "x=-1x4"]
)
def test_shape_flags_out_of_range(spec, tmp_path, capsys) -> None:
    path = save(relu(["N", 4]), tmp_path)
    status, err = cli(capsys, "compile", path, "--shape", spec, "-o", tmp_path / "m.anekit")
    assert_user_error(status, err, "x")


@pytest.mark.parametrize(
    ("shapes", "words"),
    [
        ({"x": (1.5, 4)}, "1.5, which is not a size"),
        ({"x": (True, 4)}, "True, which is not a size"),
        ({"x": (-1, 4)}, "-1, which is not a size"),
        ({"x": (10**20, 4)}, "not a size"),
        ({"x": "1x4"}, "not a sequence of sizes"),
        ([("x", (1, 4))], "must map input names to shapes"),
    ],
)
def test_input_shapes_are_whole_sizes(shapes, words) -> None:
    with pytest.raises(ModelError, match=words.replace("(", r"\(")):
        anekit.compile(relu(["N", 4]), input_shapes=shapes)


def test_integral_input_shapes_still_work() -> None:
    cm = anekit.compile(relu(["N", 4]), input_shapes={"x": (np.int64(2), 4)})
    assert cm.graph.inputs[0].shape == (2, 4)


# --- model arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["from_onnx", "compile", "load"])
def test_model_arguments_of_the_wrong_type(call) -> None:
    fn = {"from_onnx": anekit.from_onnx, "compile": anekit.compile, "load": anekit.load}[call]
    with pytest.raises(anekit.AnekitError, match="int"):
        fn(12345)


@pytest.mark.parametrize("target", [".", b"x.anekit", "", 3])
def test_save_to_a_path_that_is_not_a_bundle_path(target) -> None:
    with pytest.raises(anekit.AnekitError):
        anekit.compile(relu()).save(target)


# --- feeds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "sim"])
@pytest.mark.parametrize(
    ("feeds", "words"),
    [
        ({"x": [[1.0, 2.0], [3.0]]}, "is not an array"),
        ([np.ones((1, 4), np.float32)], "must map each input name"),
        ({"x": np.full((1, 4), 1e300)}, "outside the range of fp32"),
        ({"x": np.array([["a", "b", "c", "d"]])}, "astype(numpy.float32)"),
    ],
)
def test_bad_feeds_through_the_api(feeds, words, backend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning reaches the user
        with pytest.raises(InputError) as info:
            anekit.compile(relu()).run(feeds, backend=backend)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("elem", "numpy_name"),
    [(onnx.TensorProto.INT64, "int64"), (onnx.TensorProto.UINT8, "uint8"),
     (onnx.TensorProto.BOOL, "bool")],
)  # fmt: skip
def test_dtype_hint_names_the_dtype_the_graph_expects(elem, numpy_name, tmp_path, capsys) -> None:
    proto = model([helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)],
                  [value("x", [4], elem)], [value("y", [4])])  # fmt: skip
    with pytest.raises(InputError) as info:
        anekit.from_onnx(proto).run({"x": np.ones(4, np.float32)})
    assert f"astype(numpy.{numpy_name})" in str(info.value)
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    status, err = cli(capsys, "run", save(proto, tmp_path), "-i", f"x={tmp_path / 'x.npy'}")
    assert_user_error(status, err, f"astype(numpy.{numpy_name})")


def test_float64_feed_beyond_fp32_prints_no_warning(relu_file, tmp_path, capsys) -> None:
    np.save(tmp_path / "big.npy", np.full((1, 4), 1e300))
    status, err = cli(capsys, "run", relu_file, "-i", f"x={tmp_path / 'big.npy'}")
    assert_user_error(status, err, "outside the range of fp32")
    assert "RuntimeWarning" not in err


def test_float64_feed_in_range_still_runs(relu_file) -> None:
    out = anekit.from_onnx(relu_file).run({"x": np.full((1, 4), -2.5)})
    np.testing.assert_array_equal(out["y"], np.zeros((1, 4), np.float32))


def test_object_array_inside_an_npz(relu_file, tmp_path, capsys) -> None:
    np.savez(tmp_path / "x.npz", x=np.array([[1, "a", None, 2]], dtype=object))
    status, err = cli(capsys, "run", relu_file, "-i", f"x={tmp_path / 'x.npz'}")
    assert_user_error(status, err, "x.npz")


# --- resources ------------------------------------------------------------------------------


def test_memory_error_is_reported_as_the_users(monkeypatch, relu_file, capsys) -> None:
    """Running out of memory is the machine's limit, not a bug: exit 2 with a message."""
    from anekit.frontend.onnx import importer

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(importer.Importer, "run", exhausted)
    status, err = cli(capsys, "compile", relu_file, "-o", relu_file.with_suffix(".anekit"))
    assert_user_error(status, err, "out of memory")


def test_simulator_feeds_are_checked_the_same_way() -> None:
    """A MIL program run directly on the simulator: its own dtype named, ragged lists refused."""
    from anekit.simulator import SimProgram

    proto = model([helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)],
                  [value("x", [4], onnx.TensorProto.INT64)], [value("y", [4])])  # fmt: skip
    program = SimProgram(anekit.compile(proto).bundle.programs[0], None)
    with pytest.raises(InputError, match=r"astype\(numpy.int32\)"):
        program.run({"x": np.ones(4, np.float32)})
    with pytest.raises(InputError, match="is not an array"):
        program.run({"x": [[1, 2], [3]]})


@pytest.mark.parametrize(
    ("elem", "feed", "words"),
    [
        (onnx.TensorProto.INT32, np.array([1, 2, 3, 2**40]), "outside the range of int32"),
        (
            onnx.TensorProto.FLOAT16,
            np.array([1, 2, 3, 1e5], np.float32),
            "outside the range of fp16",
        ),
    ],
)
def test_feeds_beyond_the_graphs_dtype_are_refused_not_wrapped(elem, feed, words) -> None:
    proto = model([helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)],
                  [value("x", [4], elem)], [value("y", [4])])  # fmt: skip
    with pytest.raises(InputError, match=words):
        anekit.from_onnx(proto).run({"x": feed})
