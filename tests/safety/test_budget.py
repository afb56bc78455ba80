"""One memory budget, checked before allocations whose size comes from outside; files
sniffed before they are read whole; .npy/.npz headers checked before data is inflated.

Memory is measured with tracemalloc (numpy reports its buffers to it): a refused input
must be refused before its data is allocated, not after.
"""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit import budget
from anekit.errors import AnekitError, FormatError, InputError, MemoryBudgetError
from anekit.formats import mil
from anekit.formats.blob import BlobReader, BlobWriter
from anekit.formats.npy import read_array

from .conftest import user_error

MB = 1 << 20


def peak_bytes(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """The most memory ``call`` held at once (and what it raised)."""
    tracemalloc.start()
    try:
        call()
        raised = None
    except Exception as exc:  # noqa: BLE001 - returned for the test to check
        raised = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, raised


def constant_of_shape_bomb() -> bytes:
    """About 120 bytes of ONNX that ask for a 2.4 GB constant at import."""
    dims = numpy_helper.from_array(np.array([20000, 30000], np.int64), "s")
    nodes = [helper.make_node("Constant", [], ["shape"], value=dims),
             helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")]  # fmt: skip
    graph = helper.make_graph(
        nodes, "bomb", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_the_budget_comes_from_the_api_the_environment_or_the_machine(monkeypatch) -> None:
    monkeypatch.delenv(budget.ENV, raising=False)
    assert budget.limit() == budget.physical_memory() // 2
    monkeypatch.setenv(budget.ENV, "512M")
    assert budget.limit() == 512 * MB
    with anekit.max_memory("1G"):
        assert budget.limit() == 1 << 30
        with anekit.max_memory(1000):
            assert budget.limit() == 1000
        assert budget.limit() == 1 << 30
    assert budget.limit() == 512 * MB
    for bad in ("lots", "-5", "0"):
        monkeypatch.setenv(budget.ENV, bad)
        with pytest.raises(AnekitError, match=budget.ENV):
            budget.limit()


def test_a_bad_budget_setting_is_a_user_error(cli, monkeypatch, model_file: Path) -> None:
    monkeypatch.setenv(budget.ENV, "lots")
    user_error(cli("info", model_file), budget.ENV, "not a size")


def test_import_time_folding_is_bounded(tmp_path: Path, cli, monkeypatch) -> None:
    data = constant_of_shape_bomb()
    assert len(data) < 200
    with anekit.max_memory("256M"):
        peak, raised = peak_bytes(lambda: anekit.from_onnx(data))
    assert isinstance(raised, MemoryBudgetError), raised
    assert "ConstantOfShape" in str(raised) and "2.4 GB" in str(raised)
    assert peak < 16 * MB
    (tmp_path / "bomb.onnx").write_bytes(data)
    monkeypatch.setenv(budget.ENV, "256M")
    user_error(cli("info", tmp_path / "bomb.onnx"), "fill", "2.4 GB", "memory budget")


def test_a_folded_tile_is_bounded() -> None:
    reps = numpy_helper.from_array(np.array([100000, 10000], np.int64), "r")
    c = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    graph = helper.make_graph([helper.make_node("Tile", ["c", "r"], ["y"], name="tile")], "t", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [c, reps])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with anekit.max_memory("256M"), pytest.raises(MemoryBudgetError, match="16.0 GB"):
        anekit.from_onnx(model)


def test_the_reference_backend_checks_the_runs_peak() -> None:
    """An Expand to a claimed huge shape is refused before the run allocates anything."""
    shape = numpy_helper.from_array(np.array([30000, 30000], np.int64), "s")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "s"], ["y"], name="grow")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape],
    )  # fmt: skip
    g = anekit.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with anekit.max_memory("256M"):
        peak, raised = peak_bytes(lambda: g.run({"x": np.ones((1, 1), np.float32)}))
    assert isinstance(raised, MemoryBudgetError) and "3.6 GB" in str(raised), raised
    assert peak < 16 * MB


def _tiles_program(n: int, count: int) -> str:
    """MIL that makes ``count`` live tensors of n floats each (every one an output)."""
    ops = "\n".join(
        f'        tensor<fp32, [{n}]> t{i} = tile(x = x, reps = tensor<int32, [1]>([{n}]))[name = string("t{i}")];'
        for i in range(count)
    )
    outs = ", ".join(f"t{i}" for i in range(count))
    return ("program(1.3)\n{\n    func main<ios18>(tensor<fp32, [1]> x) {\n" + ops
            + f"\n    }} -> ({outs});\n}}\n")  # fmt: skip


def test_the_simulator_checks_the_programs_total_not_each_op(
    tmp_path: Path, cli, monkeypatch
) -> None:
    """Eight ops of 200 MB each: every one fits a 1 GB budget, together they do not."""
    text = _tiles_program(50_000_000, 8)
    assert len(text) < 2048
    path = tmp_path / "tiles.mil"
    path.write_text(text)
    with anekit.max_memory("1G"):
        peak, raised = peak_bytes(lambda: anekit.load(path).run({"x": np.ones(1, np.float32)}))
    assert isinstance(raised, MemoryBudgetError), raised
    assert "1.6 GB" in str(raised) and "live values" in str(raised)
    assert peak < 16 * MB
    monkeypatch.setenv(budget.ENV, "1G")
    np.save(tmp_path / "x.npy", np.ones(1, np.float32))
    user_error(cli("run", path, "--input", f"x={tmp_path / 'x.npy'}"), "1.6 GB", "memory budget")
    small = tmp_path / "small.mil"
    small.write_text(_tiles_program(1000, 8))  # the control: the same program, small, runs
    out = anekit.load(small).run({"x": np.full(1, 2, np.float32)})
    assert all(np.array_equal(v, np.full(1000, 2, np.float32)) for v in out.values())


def test_weight_decoding_is_bounded() -> None:
    writer = BlobWriter()
    offset = writer.add(np.ones(1 << 20, np.float32))
    reader = BlobReader(writer.to_bytes())
    with anekit.max_memory("1M"), pytest.raises(MemoryBudgetError, match="weight at offset"):
        reader.read(offset)
    assert reader.read(offset).sum() == 1 << 20


@pytest.fixture
def sparse(tmp_path: Path) -> Callable[[str, int, bytes], Path]:
    """A file of ``size`` bytes that costs no disk: ``head`` then zeros."""

    def make(name: str, size: int, head: bytes = b"") -> Path:
        path = tmp_path / name
        with open(path, "wb") as f:
            f.write(head)
            f.truncate(size)
        return path

    return make


def test_files_are_sniffed_before_they_are_read(sparse, cli) -> None:
    nul_mil = sparse("zeros.mil", 100 * MB)
    peak, raised = peak_bytes(lambda: mil.parse_file(nul_mil))
    assert isinstance(raised, FormatError) and "NUL byte at offset 0" in str(raised), raised
    assert peak < MB
    user_error(cli("run", nul_mil), "not MIL text")
    user_error(cli("inspect", nul_mil), "not MIL text")
    big = sparse("big.onnx", 3 << 30)  # 3 GB of zeros
    peak, raised = peak_bytes(lambda: anekit.from_onnx(big))
    assert isinstance(raised, FormatError) and "not an ONNX model" in str(raised), raised
    assert peak < MB
    user_error(cli("info", big), "not an ONNX model")
    looks_right = sparse("big2.onnx", 3 << 30, head=b"\x08\x07")  # starts like ONNX
    peak, raised = peak_bytes(lambda: anekit.from_onnx(looks_right))
    assert isinstance(raised, FormatError) and "more than" in str(raised), raised
    assert peak < MB
    user_error(cli("compile", looks_right), "3.2 GB")


def test_a_file_larger_than_the_budget_is_not_read(sparse) -> None:
    path = sparse("m.mil", 64 * MB, head=b"program(1.3)\n{" + b" " * 5000)  # looks like MIL
    with anekit.max_memory("16M"), pytest.raises(MemoryBudgetError, match="reading MIL file"):
        mil.parse_file(path)


def _npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return b"\x93NUMPY\x01\x00"[:0] + buffer.getvalue()


def test_npz_headers_are_checked_before_data_is_inflated(
    tmp_path: Path, cli, monkeypatch, model_file: Path
) -> None:
    """A member that claims 8 GB, and one that really inflates to 64 MB: neither is inflated
    beyond the budget."""
    claims = tmp_path / "claims.npz"
    with zipfile.ZipFile(claims, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy_header((1 << 30,)) + b"\0" * 4096)
    with anekit.max_memory("256M"):
        peak, raised = peak_bytes(lambda: read_array(claims, "feed"))
    assert isinstance(raised, MemoryBudgetError) and "8.6 GB" in str(raised), raised
    assert peak < MB
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, x=np.zeros(8 * MB, np.float64))  # 64 MB inflated
    assert bomb.stat().st_size < MB
    with anekit.max_memory("16M"):
        peak, raised = peak_bytes(lambda: read_array(bomb, "feed"))
    assert isinstance(raised, MemoryBudgetError), raised
    assert peak < 2 * MB
    assert read_array(bomb, "feed").shape == (8 * MB,)  # the control: within the budget
    monkeypatch.setenv(budget.ENV, "256M")
    user_error(cli("run", model_file, "--input", f"x={claims}"), "8.6 GB")


def test_feeds_that_are_not_plain_arrays_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(InputError, match="Python objects"):
        read_array(tmp_path / "objects.npz", "feed")
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="Python objects"):
        read_array(tmp_path / "objects.npy", "feed")
    truncated = tmp_path / "short.npy"
    np.save(truncated, np.ones(1000, np.float32))
    truncated.write_bytes(truncated.read_bytes()[:-10])
    with pytest.raises(InputError, match="truncated"):
        read_array(truncated, "feed")
    fortran = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    np.save(tmp_path / "f.npy", fortran)
    assert np.array_equal(read_array(tmp_path / "f.npy", "feed"), fortran)
    np.savez(tmp_path / "two.npz", a=np.ones(1), b=np.ones(1))
    with pytest.raises(InputError, match="2 arrays"):
        read_array(tmp_path / "two.npz", "feed")


def test_an_npz_of_many_arrays_is_read_within_one_budget(tmp_path: Path) -> None:
    """read_arrays (training data, numerics inputs): every member checked as read_array
    checks one, and the members together within the budget; objects refused."""
    from anekit.formats.npy import read_arrays

    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "target": np.arange(3)}
    np.savez(tmp_path / "ok.npz", **arrays)
    got = read_arrays(tmp_path / "ok.npz", "data")
    assert got.keys() == arrays.keys() and all(np.array_equal(got[k], arrays[k]) for k in arrays)
    np.savez(tmp_path / "three.npz", a=np.zeros(MB), b=np.zeros(MB), c=np.zeros(MB))  # 8 MB each
    with anekit.max_memory("20M"):
        with pytest.raises(MemoryBudgetError, match="the arrays of data"):
            read_arrays(tmp_path / "three.npz", "data")
    assert len(read_arrays(tmp_path / "three.npz", "data")) == 3  # the control
    np.savez(tmp_path / "objects.npz", x=np.zeros(2), y=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="Python objects"):
        read_arrays(tmp_path / "objects.npz", "data")
    np.save(tmp_path / "one.npy", np.zeros(2))
    with pytest.raises(InputError, match="not an .npz archive"):
        read_arrays(tmp_path / "one.npy", "data")


def test_onnx_sniff_accepts_real_models(model_file: Path) -> None:
    """The control: every ONNX model onnx ships for its backend tests starts as a model may."""
    from anekit.frontend.onnx.loader import sniff_onnx

    data_dir = Path(onnx.__file__).parent / "backend" / "test" / "data"
    models = sorted(data_dir.rglob("model.onnx"))[:400] + [model_file]
    assert len(models) > 100
    for path in models:
        assert sniff_onnx(path.read_bytes()[:16]) is None, path
