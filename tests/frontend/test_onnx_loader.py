"""External data: mapped read-only without copies, and every hostile offset, size and path refused."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.errors import AnekitError, FormatError
from anekit.frontend.onnx import loader

RNG = np.random.default_rng(7)
WEIGHT = RNG.standard_normal((128, 256)).astype(np.float32)  # 128 KiB: mapped
BIAS = RNG.standard_normal((128,)).astype(np.float32)  # 512 bytes: copied


def _model() -> onnx.ModelProto:
    """y = x @ W^T + b, with the Transpose of W a constant sub-graph (folded at import)."""
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="t"),
        helper.make_node("MatMul", ["x", "Wt"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 128])],
        [numpy_helper.from_array(WEIGHT, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save(directory: Path) -> Path:
    path = directory / "model.onnx"
    onnx.save_model(
        _model(), str(path), save_as_external_data=True, location="w.data", size_threshold=0
    )
    return path


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a memory map (the file's pages, not a copy)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return isinstance(array.base, memoryview) and isinstance(array.base.obj, mmap.mmap)


def test_large_weights_are_read_only_views_of_the_mapped_file(tmp_path: Path) -> None:
    graph = anekit.from_onnx(_save(tmp_path))
    (folded,) = [a for a in graph.constants.values() if a.shape == (256, 128)]
    bias = graph.constant("b")
    np.testing.assert_array_equal(folded, WEIGHT.T)
    np.testing.assert_array_equal(bias, BIAS)
    # the folded Transpose is a view of W, which is a view of the file's pages: no copy
    assert _mapped(folded) and not folded.flags.c_contiguous and not folded.flags.writeable
    assert not _mapped(bias)  # small tensors are copied out of the map
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], x @ WEIGHT.T + BIAS, rtol=1e-5)


def test_without_maps_the_data_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_MAPPED_FILES", 0)
    graph = anekit.from_onnx(_save(tmp_path))
    (folded,) = [a for a in graph.constants.values() if a.shape == (256, 128)]
    assert not _mapped(folded)
    np.testing.assert_array_equal(folded, WEIGHT.T)


def _hostile(directory: Path, **fields: str) -> Path:
    """The saved model with W's external data fields replaced by ``fields``."""
    path = _save(directory)
    proto = onnx.load(str(path), load_external_data=False)
    (w,) = [t for t in proto.graph.initializer if t.name == "W"]
    info = {e.key: e.value for e in w.external_data}
    info.update(fields)
    del w.external_data[:]
    for key, value in info.items():
        w.external_data.add(key=key, value=value)
    if "dims" in fields:
        del w.dims[:]
        w.dims.extend(int(d) for d in fields["dims"].split(","))
        w.external_data.pop(len(w.external_data) - 1)  # not an external data key
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"offset": "1000000"}, "does not fit"),
        ({"offset": "-64"}, "does not fit"),
        ({"length": "64"}, "does not fit"),
        ({"offset": "four"}, "not integers"),
        ({"location": "../w.data"}, "leaves the model's directory"),
        ({"location": "/etc/passwd"}, "leaves the model's directory"),
        ({"location": ""}, "no location"),
        ({"dims": "-128,-256"}, "negative dimension"),
        ({"dims": "1099511627776,1099511627776"}, "does not fit"),  # would wrap in int64
    ],
)
def test_hostile_external_data_is_refused(
    tmp_path: Path, fields: dict[str, str], message: str
) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "w.data").write_bytes(b"\0" * (1 << 20))  # a file outside the model's dir
    path = _hostile(tmp_path / "model", **fields)
    with pytest.raises(FormatError, match=message):
        anekit.from_onnx(path)


def test_a_missing_data_file_is_a_clear_error(tmp_path: Path) -> None:
    path = _save(tmp_path)
    (tmp_path / "w.data").unlink()
    with pytest.raises(AnekitError, match="missing next to the model"):
        anekit.from_onnx(path)


def test_a_data_file_that_shrank_after_the_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    (w,) = [t for t in proto.graph.initializer if t.name == "W"]
    checked = loader._locate(w, tmp_path)  # bounds checked against the whole file
    data = tmp_path / "w.data"
    data.write_bytes(data.read_bytes()[: WEIGHT.nbytes // 2])  # then it shrinks
    monkeypatch.setattr(loader, "_locate", lambda tensor, base_dir: checked)
    with pytest.raises(FormatError, match="ends past the end of its file"):
        loader.ExternalData(tmp_path).array(w)


def test_four_bit_initializers_are_widened_and_checked() -> None:
    """int4/uint4 codes (two a byte) read as int8/uint8 values; a short payload is refused."""
    codes = [1, -2, 3, 4, -8, 7, 0]
    widened = loader.tensor_to_array(helper.make_tensor("q", TensorProto.INT4, [7], codes), None)
    assert widened.dtype == np.int8 and list(widened) == codes
    short = helper.make_tensor("q", TensorProto.UINT4, [7], [1, 2, 3, 4, 5, 6, 7])
    short.ClearField("int32_data")
    short.raw_data = bytes(3)  # 7 codes need 4 bytes
    with pytest.raises(FormatError, match="3 bytes of 4-bit codes, but its dims \\[7\\] need 4"):
        loader.tensor_to_array(short, None)


def test_quantizing_to_four_bits_is_refused_not_saturated_to_a_byte() -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q4")
    graph = helper.make_graph(
        [node], "q4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT4, None)],
        [numpy_helper.from_array(np.float32(0.1), "s"), helper.make_tensor("z", TensorProto.INT4, [], [0])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(AnekitError, match="q4.*4-bit codes .* not supported"):
        anekit.compile(model, "m4")
