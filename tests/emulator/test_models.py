"""Whole CNNs emitted as chains of H13 programs: run on the emulator, compared with sim and
onnxruntime, every .hwx checked as the Asahi converter (eiln/anecc) checks it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.cli import main
from anekit.codegen.h13.program import emit_program
from anekit.emulator import EngineProgram
from anekit.errors import FormatError
from anekit.formats.anec import from_hwx
from anekit.runtime.hwx_chain import cosine, run_chain
from tests.emulator.anecc_checks import AneccRefusal, compile_anec, convert

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "hwx_models.py"
RNG = np.random.default_rng(11)


def _init(name: str, *shape: int, scale: float = 0.3):
    return numpy_helper.from_array((scale * RNG.standard_normal(shape)).astype(np.float32), name)


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hwx_models_under_test", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _emit(model: Path, folder: Path, target: str = "m1"):
    compiled = anekit.compile(str(model), target)
    program = emit_program(compiled)
    folder.mkdir()
    for name, data in program.files.items():
        (folder / name).write_bytes(data)
    return compiled, program


def _check_against_oracles(model: Path, compiled, folder: Path) -> None:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for seed in range(2):
        rng = np.random.default_rng(seed)
        feeds = {v.name: rng.standard_normal(v.shape).astype(np.float32)
                 for v in compiled.graph.inputs}  # fmt: skip
        emulated = run_chain(folder, feeds)
        simulated = compiled.run(feeds, "sim")
        exact = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                         strict=True))  # fmt: skip
        for name, value in exact.items():
            assert emulated[name].shape == value.shape
            assert cosine(emulated[name], simulated[name]) >= 0.999
            assert cosine(emulated[name], value) >= 0.999


def _every_hwx_passes_anecc(folder: Path) -> int:
    programs = sorted(folder.glob("*.hwx"))
    for path in programs:
        convert(path.read_bytes())
    return len(programs)


def test_digits_cnn_emits_runs_and_passes_the_asahi_checks(tmp_path):
    model = ROOT / "examples" / "digits_cnn.onnx"
    compiled, program = _emit(model, tmp_path / "d.hwx.d")
    # convs, the max pool whose flatten the first Gemm reads as a 4x4 kernel, both Gemms
    # with their GELU on the engine; the softmax (and its reshape) on the CPU
    assert [p.device for p in program.parts] == ["ane", "cpu"]
    assert program.parts[0].layers == 5
    assert all("Softmax" in r for p in program.parts for r in p.reasons)
    assert _every_hwx_passes_anecc(tmp_path / "d.hwx.d") == 1
    gemm = [p for p in EngineProgram.load(tmp_path / "d.hwx.d" / "part0.hwx").passes
            if p.op == "conv" and p.cout == 64]  # fmt: skip
    assert [(p.cin, p.kh, p.kw) for p in gemm] == [(32, 4, 4)]
    _check_against_oracles(model, compiled, tmp_path / "d.hwx.d")


def test_every_layer_kind_emits_on_the_engine(tmp_path):
    model = _load_benchmark().every_layer_cnn(tmp_path / "every.onnx")
    compiled, program = _emit(model, tmp_path / "e.hwx.d")
    assert [p.device for p in program.parts] == ["ane"], [p.reasons for p in program.parts]
    passes = EngineProgram.load(tmp_path / "e.hwx.d" / "part0.hwx").passes
    kinds = {(p.unit, p.op, p.nonlinear) for p in passes}
    assert {("pe", "max", "none"), ("pe", "min", "none"), ("pe", "mul", "none"),
            ("ne", "pass", "lut"), ("ne", "conv", "relu")} <= kinds  # fmt: skip
    assert any(p.groups == p.cin > 1 and p.sy == 2 for p in passes)  # depthwise, stride 2
    assert _every_hwx_passes_anecc(tmp_path / "e.hwx.d") == 1
    _check_against_oracles(model, compiled, tmp_path / "e.hwx.d")


def test_the_asahi_checks_accept_apples_programs_as_anecc_does():
    # anecc converts every zin 4-7 program; zin 9's compact descriptors (0x1f8 bytes, first
    # stream header 0x4401f800) it does not (allbilly/ane problem.md, "anecc assertion
    # failure on macOS 26 HWX")
    for path in sorted((ROOT / "tests/data/apple/hwx").glob("*.hwx")):
        if path.stem == "h13_mul_zin9":
            with pytest.raises(AneccRefusal):
                convert(path.read_bytes())
        else:
            assert convert(path.read_bytes()).descriptors >= 1


def test_the_asahi_checks_refuse_what_anecc_refuses():
    # the converter's own failure on anekit's earlier output: no [base, _, 0x9c, count] record
    data = bytearray((ROOT / "tests/data/apple/hwx/h13_conv.hwx").read_bytes())
    convert(bytes(data))
    at = bytes(data).index((0x9C).to_bytes(4, "little") + (1).to_bytes(4, "little"))
    data[at - 8 : at - 4] = bytes(4)
    with pytest.raises(AneccRefusal, match="0x9c"):
        convert(bytes(data))


def _single(path: Path, op: str, shape: list[int], out_shape: list[int], inits=(), **attrs):
    node = helper.make_node(op, ["x", *[i.name for i in inits]], ["y"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits),
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.slow
def test_layers_wider_than_one_pass_are_split(tmp_path):
    bench = _load_benchmark()
    wide = bench.wide_conv(tmp_path / "wide.onnx")
    compiled, _ = _emit(wide, tmp_path / "wide.hwx.d")
    passes = EngineProgram.load(tmp_path / "wide.hwx.d" / "part0.hwx").passes
    assert [p.cout for p in passes] == [2048] * 8
    _check_against_oracles(wide, compiled, tmp_path / "wide.hwx.d")
    big = bench.big_sigmoid(tmp_path / "big.onnx")
    compiled, _ = _emit(big, tmp_path / "big.hwx.d")
    passes = EngineProgram.load(tmp_path / "big.hwx.d" / "part0.hwx").passes
    assert len(passes) > 1 and sum(p.hin for p in passes) == 2048
    assert _every_hwx_passes_anecc(tmp_path / "big.hwx.d") == 1


def test_every_h13_chip_emits_and_other_engines_are_refused(tmp_path, capsys):
    model = _single(tmp_path / "r.onnx", "Relu", [1, 4, 3, 3], [1, 4, 3, 3])
    for chip in ("m1", "m1-pro", "m1-max", "m1-ultra"):
        out = tmp_path / f"{chip}.hwx.d"
        assert main(["compile", str(model), "-t", chip, "--emit", "hwx", "-o", str(out)]) == 0
        assert "agrees with sim" in capsys.readouterr().out
        assert _every_hwx_passes_anecc(out) == 1  # a program without kernels too
    assert main(["compile", str(model), "-t", "m2", "--emit", "hwx", "-o",
                 str(tmp_path / "m2.hwx.d")]) == 2  # fmt: skip
    assert "H14 engine" in capsys.readouterr().err


def test_what_no_register_holds_is_refused_naming_layer_and_limit(tmp_path, capsys):
    model = _single(tmp_path / "s4.onnx", "Conv", [1, 2, 16, 16], [1, 2, 4, 4],
                    [_init("w", 2, 2, 4, 4)], strides=[4, 4])  # fmt: skip
    out = tmp_path / "s4.hwx.d"
    assert main(["compile", str(model), "-t", "m1", "--emit", "hwx", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Common.ConvCfg.Sx = 4 does not fit its 2 bits (at most 3)" in err and "node '" in err
    assert not out.exists()


def test_a_zero_sized_model_is_refused(tmp_path, capsys):
    model = _single(tmp_path / "z.onnx", "Relu", [1, 0, 3, 3], [1, 0, 3, 3])
    code = main(["compile", str(model), "-t", "m1", "--emit", "hwx", "-o", str(tmp_path / "z")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no elements" in err or "zero" in err, err
    assert "Traceback" not in err and not (tmp_path / "z").exists()


def test_anekit_run_runs_an_emitted_folder(tmp_path, capsys):
    model = ROOT / "examples" / "digits_cnn.onnx"
    out = tmp_path / "d.hwx.d"
    assert main(["compile", str(model), "-t", "m1", "--emit", "hwx", "-o", str(out)]) == 0
    x = np.random.default_rng(5).standard_normal((1, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    saved = tmp_path / "y.npz"
    assert main(["run", str(out), "-i", f"image={tmp_path / 'x.npy'}", "-o", str(saved)]) == 0
    probs = np.load(saved)["probs"]
    exact = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]  # fmt: skip
    assert probs.shape == exact.shape and cosine(probs, exact) >= 0.999


def test_hwx_models_benchmark_smoke(tmp_path):
    out = tmp_path / "hwx_models.json"
    assert _load_benchmark().main(["--smoke", "--out", str(out)]) == 0
    rows = {row["model"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"digits_cnn", "every_layer_cnn"}
    assert rows["every_layer_cnn"]["cpu_layers"] == 0 and rows["digits_cnn"]["programs"] >= 1
    assert all(r["cosine_vs_onnxruntime_min"] >= 0.999 for r in rows.values())


def test_anec_written_as_anecc_writes_it(tmp_path):
    for path in sorted((ROOT / "tests/data/apple/hwx").glob("*.hwx")):
        if path.stem != "h13_mul_zin9":  # anecc refuses it (above), anekit too
            assert from_hwx(path.read_bytes()) == compile_anec(path.read_bytes()), path.stem
    with pytest.raises(FormatError, match="compact"):
        from_hwx((ROOT / "tests/data/apple/hwx/h13_mul_zin9.hwx").read_bytes())
    model = _load_benchmark().every_layer_cnn(tmp_path / "every.onnx")
    out = tmp_path / "e.hwx.d"
    assert main(["compile", str(model), "-t", "m1", "--emit", "anec", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["part0.anec", "part0.hwx", "program.e5"]
    anec = (out / "part0.anec").read_bytes()
    assert anec == compile_anec((out / "part0.hwx").read_bytes())
    assert int.from_bytes(anec[:8], "little") > 0  # libane refuses a zero size


def test_a_flatten_other_layers_read_runs_on_the_cpu(tmp_path):
    # Conv -> Relu -> Flatten -> Sigmoid -> Gemm: the sigmoid reads the flat layout, which
    # the engine cannot lay out, so the conv layer (ending in the flatten) is a CPU part
    bench = _load_benchmark()
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Sigmoid", ["f"], ["s"]),
             helper.make_node("Gemm", ["s", "g"], ["y"], transB=1)]  # fmt: skip
    model = bench._save(
        tmp_path / "flat.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [_init("w", 4, 2, 3, 3), _init("g", 5, 36)],
    )  # fmt: skip
    compiled, program = _emit(model, tmp_path / "f.hwx.d")
    assert [p.device for p in program.parts] == ["cpu", "ane"]
    assert "reshape" in program.parts[0].reasons[0]
    _check_against_oracles(model, compiled, tmp_path / "f.hwx.d")
