"""Apple's own H13 programs run in the engine emulator and give what their networks compute.

The expected values come from the netplist each program was compiled from (its banner names
it), run on anekit's netplist reference backend in fp32, never from the emulator. Where a
fixture's network is not in the test data as such, the netplist is edited the way the
program differs (the relu program was compiled from neuron.plist with ReLU for Sigmoid; the
golden model from conv.plist with 3.0 weights for 2.0; mul from sum.plist with Mul for Add).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit.emulator import EngineProgram
from anekit.formats import netplist

DATA = Path(__file__).resolve().parents[1] / "data" / "apple"
HWX = DATA / "hwx"
PLIST = DATA / "netplist"

# per-op tolerances (absolute, relative) against the fp32 oracle:
EXACT = (0.0, 0.0)  # relu, concat: the engine copies fp16 values
ONE_ROUNDING = (0.0, 2.0**-11)  # one fp16 rounding of an fp32 result (add, mul, 1x1 conv)
SIGMOID = (4e-3, 0.0)  # 33-sample piecewise-linear table: <= 3.0e-3 + one fp16 rounding


def _feeds(program: EngineProgram, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        t.name: (scale * rng.standard_normal(t.shape)).astype(np.float16).astype(np.float32)
        for t in program.inputs
    }


def _edited_netplist(tmp_path: Path, relative: str, edits: dict[str, str]) -> Path:
    """A copy of a netplist with text replaced, at the same depth (its ../ weights resolve)."""
    text = (PLIST / relative).read_text()
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    target = tmp_path / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def _check(name: str, oracle_path: Path, tolerance: tuple[float, float], seed: int = 0,
           scale: float = 1.0) -> None:  # fmt: skip
    program = EngineProgram.load(HWX / f"h13_{name}.hwx")
    feeds = _feeds(program, seed, scale)
    oracle = netplist.read(oracle_path)
    shapes = {v.name: v.shape for v in oracle.inputs}
    expected = oracle.run({k: v.reshape(shapes[k]) for k, v in feeds.items()})
    got = program.run(feeds)
    assert set(got) == set(expected)
    atol, rtol = tolerance
    for key, value in expected.items():
        np.testing.assert_allclose(
            got[key].ravel(), np.asarray(value).ravel(), rtol=rtol, atol=atol
        )


def test_relu(tmp_path):
    oracle = _edited_netplist(tmp_path, "simple/neuron.plist", {"Sigmoid": "ReLU"})
    _check("relu", oracle, EXACT)


def test_sigmoid():
    _check("sigmoid", PLIST / "simple/neuron.plist", SIGMOID, scale=4.0)


def test_conv():
    _check("conv", PLIST / "simple/conv.plist", ONE_ROUNDING)


def test_model_golden(tmp_path):
    oracle = _edited_netplist(tmp_path, "simple/conv.plist", {})
    (tmp_path / "twos.weights").write_bytes(np.full(128, 3.0, np.float16).tobytes())
    _check("model_golden", oracle, ONE_ROUNDING)


# gemm.plist declares BatchSize 512, but the program Apple compiled from it takes one
# [1, 512, 1, 1] input (its tensor stabs); the oracle runs that one row.
_BATCH_1 = {
    "<key>BatchSize</key>\n\t\t\t<integer>512</integer>": "<key>BatchSize</key><integer>1</integer>"
}


def test_gemm(tmp_path):
    oracle = _edited_netplist(tmp_path, "simple/gemm.plist", {"/tmp/zero": "zero", **_BATCH_1})
    (oracle.parent / "zero").write_bytes(bytes(512 * 512 * 2))
    _check("gemm", oracle, ONE_ROUNDING)


def test_gemm_with_weights_in_its_tiles(tmp_path):
    """Apple's gemm holds zeros; with random weights packed into its 16 tiles (lane l holds
    output channels 32l..32l+31, [input][channel] order) it must compute the matrix product
    the netplist computes with the same weights."""
    rng = np.random.default_rng(3)
    weights = (rng.standard_normal((512, 512)) / 16).astype(np.float16)  # [out, in]
    data = bytearray((HWX / "h13_gemm.hwx").read_bytes())
    program = EngineProgram(bytes(data))
    for tile in program.hwx.weight_tiles:
        block = weights[32 * tile.lane : 32 * tile.lane + 32].T  # [in, channel]
        data[tile.file_offset : tile.file_offset + tile.size] = np.ascontiguousarray(
            block
        ).tobytes()
    oracle_path = _edited_netplist(tmp_path, "simple/gemm.plist", {"/tmp/zero": "w", **_BATCH_1})
    (oracle_path.parent / "w").write_bytes(weights.tobytes())
    oracle = netplist.read(oracle_path)
    feeds = _feeds(program, 4)
    got = EngineProgram(bytes(data)).run(feeds)["probs"].ravel()
    expected = np.asarray(oracle.run({"image": feeds["image"]})["probs"]).ravel()
    # fp32 accumulation in a different order, then one fp16 rounding
    np.testing.assert_allclose(got, expected, rtol=2.0**-10, atol=1e-3)


def test_sum():
    _check("sum", PLIST / "plists/sum.plist", ONE_ROUNDING)


def test_concat():
    _check("concat", PLIST / "simple/concat.plist", EXACT)


@pytest.mark.parametrize("compiler", ["zin5", "zin7", "zin9"])
def test_mul(tmp_path, compiler):
    oracle = _edited_netplist(
        tmp_path, "plists/sum.plist", {"<string>Add</string>": "<string>Mul</string>"}
    )
    _check(f"mul_{compiler}", oracle, ONE_ROUNDING)
