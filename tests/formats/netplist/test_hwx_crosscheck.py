"""The netplists against their compiled .hwx forms: shapes, channels, kernels and weight bytes agree."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats import hwx, netplist
from anekit.ir.engine import LayerView

from .helpers import FIXTURES, NETPLIST_DIR

HWX = FIXTURES / "hwx"

# compiled program <- netplist, as each .hwx banner's `-i` names it
PAIRS = {
    "h13_conv": "simple/conv",
    "h13_concat": "simple/concat",
    "h13_sum": "plists/sum",
    "h13_relu": "simple/neuron",
    "h13_sigmoid": "simple/neuron",
}


def layer_kernel(graph, unit: str) -> np.ndarray:
    view = LayerView(graph.producer(unit))
    (weight,) = [graph.constants[i] for i in view.main_inputs if i in graph.constants]
    return weight


@pytest.mark.parametrize(("program", "source"), PAIRS.items())
def test_ports_match_the_compiled_tensors(program, source):
    compiled = hwx.read(HWX / f"{program}.hwx")
    assert compiled.banner.input == f"./{source}.plist"
    doc = netplist.parse_document((NETPLIST_DIR / f"{source}.plist").read_bytes(), source)
    graph = netplist.read(NETPLIST_DIR / f"{source}.plist")
    # same inputs, in the same order, with the same (n, c, h, w)
    assert [(t.name, t.shape) for t in compiled.inputs] == [(v.name, v.shape) for v in graph.inputs]
    # the output ports are the compiled output tensors, by name and shape
    (port,) = doc.networks[0].outputs
    (out,) = compiled.outputs
    assert out.name == port.name
    assert out.shape == graph.outputs[0].shape
    fields = compiled.task_descriptors[0].fields
    inputs = {(v.shape[1], v.shape[3]) for v in graph.inputs}
    assert (fields["Common.Cin.Cin"], fields["Common.InDim.Win"]) in inputs


def test_conv_kernel_bytes_are_the_compiled_weight_tiles():
    compiled = hwx.read(HWX / "h13_conv.hwx")
    graph = netplist.read(NETPLIST_DIR / "simple" / "conv.plist")
    kernel = layer_kernel(graph, "my_layer")  # [Cout, Cin, kh, kw]
    fields = compiled.task_descriptors[0].fields
    assert (fields["Common.Cout.Cout"], fields["Common.Cin.Cin"]) == kernel.shape[:2]
    assert (fields["Common.ConvCfg.Kh"], fields["Common.ConvCfg.Kw"]) == kernel.shape[2:]
    assert (fields["Common.ConvCfg.Sy"], fields["Common.ConvCfg.Sx"]) == tuple(
        LayerView(graph.producer("my_layer")).main_attrs["strides"]
    )
    data = (HWX / "h13_conv.hwx").read_bytes()
    tiles = sorted((t for t in compiled.weight_tiles if t.live), key=lambda t: t.lane)
    assert len(tiles) == kernel.shape[0]  # one 64-byte tile per output channel
    for lane, tile in enumerate(tiles):
        body = data[tile.file_offset : tile.file_offset + tile.size]
        row = kernel[lane].astype("<f2").tobytes()  # this output channel's Cin x kh x kw
        assert body[: len(row)] == row and not any(body[len(row) :])


def test_gemm_kernel_size_matches_the_compiled_tiles():
    """simple/gemm.plist reads /tmp/zero, which is not here: given zeros, the sizes agree."""
    path = NETPLIST_DIR / "simple" / "gemm.plist"
    with pytest.raises(FormatError, match="weight file '/tmp/zero'"):
        netplist.read(path)
    compiled = hwx.read(HWX / "h13_gemm.hwx")
    graph = netplist.parse(path.read_bytes(), files={"/tmp/zero": bytes(512 * 512 * 2)})
    kernel = layer_kernel(graph, "probs")
    fields = compiled.task_descriptors[0].fields
    assert kernel.shape == (fields["Common.Cout.Cout"], fields["Common.Cin.Cin"], 1, 1)
    assert kernel.dtype == np.float16
    live = [t for t in compiled.weight_tiles if t.live]
    assert sum(t.size for t in live) == kernel.nbytes == 512 * 512 * 2
    data = (HWX / "h13_gemm.hwx").read_bytes()
    tiles = b"".join(data[t.file_offset : t.file_offset + t.size] for t in live)
    assert tiles == kernel.astype("<f2").tobytes()


def test_golden_program_holds_the_net_plist_kernel_value():
    """h13_model_golden's banner names ./simple/conv.plist (3 -> 3 channels), not net.plist
    (3 -> 2, as FACTS.md says): what they share is Cin and the kernel value, Float32 3.0
    in model.espresso.weights stored by the compiler as fp16."""
    compiled = hwx.read(HWX / "h13_model_golden.hwx")
    graph = netplist.read(NETPLIST_DIR / "net.plist")
    kernel = layer_kernel(graph, "probs_tmp_0")
    assert kernel.dtype == np.float32 and kernel.shape[1] == compiled.inputs[0].shape[1]
    data = (HWX / "h13_model_golden.hwx").read_bytes()
    for tile in (t for t in compiled.weight_tiles if t.live):
        row = np.frombuffer(data, "<f2", kernel.shape[1], tile.file_offset)
        np.testing.assert_array_equal(row, kernel[0].reshape(-1).astype(np.float16))
    assert compiled.outputs[0].shape[1] == 3 and graph.outputs[0].shape[1] == 2
