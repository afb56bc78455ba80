"""Core ML state and multifunction packages: anekit's state ops are the ones coremltools
itself writes for a torch ``register_buffer`` state; functions share one weight file; every
package reloads through coremltools' milproto loader with its functions and states; the
simulator runs packages (coremltools' own included) with their state kept between calls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.codegen.mlpackage_multi import FunctionSpec, StateSpec, write_package
from anekit.formats.mlpackage import read_package
from anekit.simulator.states import StatefulProgram

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

C, T = 32, 64


class _Cache(torch.nn.Module):
    """A buffer written at the one-hot ``write`` position, then read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, C, 1, T, dtype=torch.float16))

    def forward(self, x: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        self.cache[:] = self.cache * (1 - write) + x * write
        return self.cache * 2


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """coremltools' own conversion of the torch module with its buffer as a state."""
    traced = torch.jit.trace(_Cache().eval(), (torch.zeros(1, C, 1, T), torch.zeros(1, 1, 1, T)))
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name="x", shape=(1, C, 1, T), dtype=np.float16),
                ct.TensorType(name="write", shape=(1, 1, 1, T), dtype=np.float16)],
        outputs=[ct.TensorType(name="y", dtype=np.float16)],
        states=[ct.StateType(wrapped_type=ct.TensorType(shape=(1, C, 1, T), dtype=np.float16),
                             name="cache")],
        minimum_deployment_target=ct.target.iOS18, compute_precision=ct.precision.FLOAT16,
        skip_model_load=True,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("golden") / "golden.mlpackage"
    model.save(str(path))
    return path


def _stateful_programs() -> tuple:
    """Two compiled programs over one weight: ``step`` reads the cache and writes it back
    (``cache_next``), ``fill`` writes its [1, C, 1, 16] result as the cache's first positions."""
    w = np.random.default_rng(0).standard_normal((C, C, 1, 1)).astype(np.float32) / 8
    x, cache = anekit.input("x", (1, C, 1, T)), anekit.input("cache", (1, C, 1, T))
    write = anekit.input("write", (1, 1, 1, T))
    nxt = ops.add(cache * (1.0 - write), ops.conv2d(x, w) * write, name="cache_next")
    step = anekit.compile(anekit.graph([ops.identity(nxt * 2.0, name="y"), nxt]), "m4")
    x16 = anekit.input("x", (1, C, 1, 16))
    h = ops.conv2d(x16, w, name="h")
    fill = anekit.compile(
        anekit.graph([ops.reduce_sum(h, axes=3, name="total"), ops.identity(h, name="kv")]), "m4"
    )
    return step, fill


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    step, fill = _stateful_programs()
    functions = [
        FunctionSpec("fill", fill.program, writes={"kv": "cache"}),
        FunctionSpec(
            "step", step.program, reads={"cache": "cache"}, writes={"cache_next": "cache"}
        ),
    ]
    path = tmp_path_factory.mktemp("ours") / "ours.mlpackage"
    return write_package(functions, [StateSpec("cache", (1, C, 1, T))], "ios18", "step", path)


def _ops(path: Path, function: str) -> list:
    spec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    f = spec.mlProgram.functions[function]
    return list(f.block_specializations[f.opset].operations)


def _shape(op) -> dict:  # noqa: ANN001
    """What identifies a state op: type, input keys, output types, attribute keys."""
    return {
        "type": op.type,
        "inputs": sorted(op.inputs),
        "outputs": [(o.type.tensorType.dataType, o.type.tensorType.rank) for o in op.outputs],
        "attributes": sorted(op.attributes),
    }


def test_state_ops_are_the_ones_coremltools_writes(golden: Path, package: Path) -> None:
    theirs = [_shape(op) for op in _ops(golden, "main") if "state" in op.type]
    ours = [_shape(op) for op in _ops(package, "step") if "state" in op.type]
    # coremltools lowers coreml_update_state to write_state (+ read_state when the value is read)
    assert theirs[0] == ours[0] and theirs[0]["type"] == "read_state"
    assert theirs[1] == ours[1] and theirs[1]["type"] == "write_state"
    assert ours[1]["inputs"] == ["data", "input"] and ours[1]["outputs"] == []

    def state_inputs(path: Path, function: str) -> list:
        spec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
        f = spec.mlProgram.functions[function]
        return [(i.name, i.type.stateType.wrappedType.tensorType.dataType,
                 [d.constant.size for d in i.type.stateType.wrappedType.tensorType.dimensions])
                for i in f.inputs if i.type.WhichOneof("type") == "stateType"]  # fmt: skip

    assert (
        state_inputs(golden, "main")
        == state_inputs(package, "step")
        == [("cache", ct.proto.MIL_pb2.DataType.Value("FLOAT16"), [1, C, 1, T])]
    )
    g = ct.models.MLModel(str(golden), skip_model_load=True).get_spec()
    o = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    assert g.specificationVersion == o.specificationVersion == 9  # iOS 18
    assert g.description.state[0].type == o.description.functions[0].state[0].type


def test_functions_and_states_reload_through_milproto(package: Path) -> None:
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    model = ct.models.MLModel(str(package), skip_model_load=True)
    spec = model.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    assert set(program.functions) == {"fill", "step"}
    assert spec.description.defaultFunctionName == "step"
    for f in spec.description.functions:
        assert [s.name for s in f.state] == ["cache"]
    step_ops = [op.op_type for op in program.functions["step"].operations]
    assert "read_state" in step_ops and "coreml_update_state" in step_ops
    assert {i.name for i in spec.description.functions[1].input} == {"x", "write"}  # not the state


def test_functions_share_one_weight(package: Path) -> None:
    weights = package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    # one [32, 32] fp16 weight (2 KiB) plus a 64-byte record header and the file header;
    # stored twice it would be above 4 KiB
    assert weights.stat().st_size < 2 * C * C * 2


def test_simulator_runs_coremltools_own_state_package(golden: Path) -> None:
    """The package coremltools wrote runs on the simulator, its state kept between calls,
    equal to the torch module called twice."""
    pkg = read_package(golden)
    program = StatefulProgram(pkg.program, pkg.model_dir, function="main")
    module = _Cache().eval()
    state = program.new_state()
    rng = np.random.default_rng(1)
    for position in (3, 7):
        x = rng.standard_normal((1, C, 1, T)).astype(np.float16)
        write = np.zeros((1, 1, 1, T), np.float16)
        write[..., position] = 1
        got = program.run({"x": x, "write": write}, state)["y"]
        with torch.no_grad():
            want = module(torch.from_numpy(x).float(), torch.from_numpy(write).float()).numpy()
        np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(state["cache"].any(axis=(0, 1, 2))) == 2  # both positions kept


def test_simulator_runs_our_package_like_the_programs(package: Path) -> None:
    step, fill = _stateful_programs()
    pkg = read_package(package)
    assert set(pkg.functions) == {"fill", "step"} and pkg.functions["step"].states == ("cache",)
    fill_fn = StatefulProgram(pkg.program, pkg.model_dir, function="fill")
    step_fn = StatefulProgram(pkg.program, pkg.model_dir, function="step")
    rng = np.random.default_rng(2)
    state = fill_fn.new_state()
    x16 = rng.standard_normal((1, C, 1, 16)).astype(np.float32)
    fill_fn.run({"x": x16}, state)
    kv = fill.run({"x": x16}, "sim")["kv"]
    np.testing.assert_array_equal(state["cache"][..., :16], kv)
    assert not state["cache"][..., 16:].any()  # padded with zeros to the state's length
    x = rng.standard_normal((1, C, 1, T)).astype(np.float32)
    write = np.zeros((1, 1, 1, T), np.float32)
    write[..., 20] = 1
    cache = state["cache"].copy()
    got = step_fn.run({"x": x, "write": write}, state)
    want = step.run({"x": x, "cache": cache, "write": write}, "sim")
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(state["cache"], want["cache_next"])
