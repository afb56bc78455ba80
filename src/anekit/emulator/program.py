"""`EngineProgram`: an H13 .hwx program run pass by pass on the register-level emulator."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anekit.emulator import arithmetic
from anekit.emulator.memory import (
    AddressSpace,
    L2Memory,
    Window,
    load_tensor,
    store_tensor,
)
from anekit.emulator.passes import Dma, EnginePass, decode_pass
from anekit.emulator.registers import decode
from anekit.errors import FormatError, InputError, check_input_names
from anekit.formats import hwx
from anekit.formats.hwx.h13 import L2_BYTES, LUT_ENTRIES, MAX_BASES

BASE_FLAVOR = 1  # the LC_THREAD flavor whose state words are the base-address table
# The emulator's envelope: one pass may not exceed this many multiply-accumulates or tensor
# elements (strides may be 0, so a file's size does not bound its work; a mutated file must
# neither hang nor exhaust memory).
MAX_MACS_PER_PASS = 1 << 30
MAX_ELEMENTS_PER_TENSOR = 1 << 24


class EngineProgram:
    """A decoded .hwx program: its passes, address space layout and tensors."""

    def __init__(self, data: bytes, where: str | None = None):
        self.where = where
        self.data = bytes(data)
        self.hwx = hwx.parse(self.data, where)
        if self.hwx.generation != "h13":
            raise FormatError(
                f"the engine emulator runs H13 programs; this one is for cpusubtype "
                f"{self.hwx.header.cpusubtype} ({self.hwx.generation or 'no known register map'})",
                where=where,
            )
        if not self.hwx.task_descriptors:
            raise FormatError("the program has no task descriptors to run", where=where)
        self.bases = self._base_table()
        self.passes = tuple(
            decode_pass(td.index, decode(td, where), where) for td in self.hwx.task_descriptors
        )
        self._kernel_relocations = self._relocated_tiles()
        for engine_pass in self.passes:
            self._check_work(engine_pass)
        self.inputs = self.hwx.inputs
        self.outputs = self.hwx.outputs

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EngineProgram:
        path = Path(path)
        if not path.is_file():
            raise FormatError("expected a regular .hwx file", where=str(path))
        return cls(path.read_bytes(), str(path))

    # --- decoding --------------------------------------------------------------------------

    def _base_table(self) -> tuple[int, ...]:
        """The base-address registers the descriptors index (RBase, WBase, KBase): the
        first LC_THREAD state holds them as 64-bit words (text, kernel, ..., output, inputs)."""
        state = next((t for t in self.hwx.threads if t.flavor == BASE_FLAVOR), None)
        if state is None or len(state.words) < 2 * MAX_BASES:
            raise FormatError(
                "expected an LC_THREAD (flavor 1) holding the base-address table the task "
                "descriptors index",
                where=self.where,
            )
        words = state.words
        return tuple(words[2 * i] | (words[2 * i + 1] << 32) for i in range(MAX_BASES))

    def _relocated_tiles(self) -> dict[tuple[int, int], int]:
        """(descriptor, lane) -> the weight tile's address as the loader would patch it into
        KernelDMASrc.CoeffBaseAddr[lane] (the reader located each relocation's register)."""
        prefix = "KernelDMASrc.CoeffBaseAddr["
        found = {}
        for relocation in self.hwx.relocations:
            register = relocation.register or ""
            if (
                relocation.descriptor is not None
                and relocation.target_address is not None
                and register.startswith(prefix)
            ):
                lane = int(register[len(prefix) : -1])
                found[(relocation.descriptor, lane)] = relocation.target_address
        return found

    def _check_work(self, p: EnginePass) -> None:
        for what, count in (("input", p.cin * p.hin * p.win), ("output", p.cout * p.hout * p.wout)):
            if count > MAX_ELEMENTS_PER_TENSOR:
                raise FormatError(
                    f"task descriptor {p.index}'s {what} has {count} elements, more than the "
                    f"emulator moves in one pass ({MAX_ELEMENTS_PER_TENSOR})",
                    where=self.where,
                )
        macs = p.cout * p.hout * p.wout * (p.cin // p.groups) * p.kh * p.kw
        if macs > MAX_MACS_PER_PASS:
            raise FormatError(
                f"task descriptor {p.index} asks for {macs} multiply-accumulates, more than the "
                f"emulator runs in one pass ({MAX_MACS_PER_PASS})",
                where=self.where,
            )

    # --- running ---------------------------------------------------------------------------

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run every pass in chain order; outputs are float32 arrays of the declared shapes."""
        names = [t.name for t in self.inputs]
        check_input_names(names, feeds, f"the program takes {names}")
        space = AddressSpace(self.hwx, self.data, self.where)
        l2 = L2Memory(L2_BYTES)
        for tensor in self.inputs:
            values = np.asarray(feeds[tensor.name], dtype=np.float32)
            if values.shape != tensor.shape and values.size == int(np.prod(tensor.shape)):
                values = values.reshape(tensor.shape)
            if values.shape != tensor.shape:
                raise InputError(
                    f"input '{tensor.name}' has shape {values.shape}; the program takes "
                    f"{tensor.shape} (n, c, h, w)"
                )
            self._write_io(space, tensor, values.astype(np.float16))
        for engine_pass in self.passes:
            if not engine_pass.skip:
                self._execute(space, l2, engine_pass)
        return {
            _public_name(t.name): self._read_io(space, t).astype(np.float32) for t in self.outputs
        }

    def _io_window(self, tensor: hwx.Tensor, batch: int) -> Window:
        if tensor.address is None or None in tensor.strides:
            raise FormatError(
                f"tensor '{tensor.name}' declares no window address or strides", where=self.where
            )
        n_stride, c_stride, h_stride, w_stride = tensor.strides
        if w_stride != 2 or tensor.dtype != "float16":
            raise FormatError(
                f"tensor '{tensor.name}' is {tensor.dtype} with a width stride of {w_stride}; the "
                "emulator moves packed fp16 rows",
                where=self.where,
            )
        _, c, h, w = tensor.shape
        return Window(tensor.address + batch * n_stride, c, h, w, h_stride, c_stride)

    def _write_io(self, space: AddressSpace, tensor: hwx.Tensor, values: np.ndarray) -> None:
        for batch in range(tensor.shape[0]):
            store_tensor(space, self._io_window(tensor, batch), values[batch],
                         f"input '{tensor.name}'")  # fmt: skip

    def _read_io(self, space: AddressSpace, tensor: hwx.Tensor) -> np.ndarray:
        return np.stack(
            [
                load_tensor(space, self._io_window(tensor, batch), f"output '{tensor.name}'")
                for batch in range(tensor.shape[0])
            ]
        )

    def _execute(self, space: AddressSpace, l2: L2Memory, p: EnginePass) -> None:
        """DRAM -(tile DMA)-> L2 source buffer(s) -> engine -> L2 result -(tile DMA)-> DRAM."""
        what = f"task descriptor {p.index}"
        source, *second, result = p.l2
        l2.store(source, load_tensor(space, self._window(p.src1, p.cin, p.hin, p.win),
                                     f"{what}'s tile DMA source"))  # fmt: skip
        if p.src2 is not None:
            l2.store(second[0], load_tensor(space, self._window(p.src2, p.cin, p.hin, p.win),
                                            f"{what}'s second tile DMA source"))  # fmt: skip
        x = l2.load(source)
        if p.input_relu:
            x = np.maximum(x, np.float16(0))
        if p.op == "conv":
            weights, bias = self._weights(space, p)
            acc = arithmetic.conv(x, weights, (p.sy, p.sx), (p.py, p.px),
                                  p.groups, (p.hout, p.wout))  # fmt: skip
            if bias is not None:
                acc += bias.astype(np.float32)[:, None, None]
        elif p.op == "pass":
            acc = x.astype(np.float32)
        else:
            y = l2.load(second[0]).astype(np.float32)
            acc = arithmetic.planar(p.op, x.astype(np.float32), y)
            acc = acc + np.float32(np.uint16(p.planar_bias).view(np.float16))
            if p.planar_relu:
                acc = np.maximum(acc, 0.0)
        if p.nonlinear == "relu":
            acc = np.maximum(acc, 0.0)
        elif p.nonlinear == "lut":
            acc = arithmetic.lookup(acc, self._lut(space, p))
        l2.store(result, arithmetic.to_fp16(acc))
        store_tensor(space, self._window(p.dst, p.cout, p.hout, p.wout), l2.load(result),
                     f"{what}'s tile DMA destination")  # fmt: skip

    def _window(self, dma: Dma, channels: int, height: int, width: int) -> Window:
        base = self.bases[dma.base]
        return Window(base + dma.offset, channels, height, width, dma.row_stride, dma.plane_stride)

    def _tile_bytes(self, space: AddressSpace, p: EnginePass, lane: int, size: int) -> np.ndarray:
        tile = p.tiles[lane]
        address = self._kernel_relocations.get((p.index, lane))
        if address is None:
            assert p.kernel_base is not None
            address = self.bases[p.kernel_base] + tile.offset
        if size > tile.size:
            raise FormatError(
                f"task descriptor {p.index}: kernel lane {lane} holds {tile.size} bytes "
                f"(KernelDMASrc.CoeffBfrSize[{lane}]) but the pass reads {size}",
                where=self.where,
            )
        return space.read(address, size, f"task descriptor {p.index}'s kernel tile {lane}")

    def _weights(self, space: AddressSpace, p: EnginePass) -> tuple[np.ndarray, np.ndarray | None]:
        """Gather [Cout, Cin/groups, Kh, Kw] (and [Cout] biases) from the lanes: lane l holds
        output channels l*G .. l*G+G-1, its G biases first when BiasMode is set, then the
        weights laid out [cin][kh][kw][g] (g innermost)."""
        per_lane = p.lanes_per_group
        lanes = -(-p.cout // per_lane)
        if lanes > len(p.tiles):
            raise FormatError(
                f"task descriptor {p.index}: {p.cout} output channels at {per_lane} per lane "
                f"need {lanes} kernel lanes, but {len(p.tiles)} are enabled",
                where=self.where,
            )
        cin_g = p.cin // p.groups
        lead = per_lane if p.bias else 0
        count = lead + cin_g * p.kh * p.kw * per_lane
        blocks, biases = [], []
        for lane in range(lanes):
            values = self._tile_bytes(space, p, lane, 2 * count).view(np.float16)
            biases.append(values[:lead])
            block = values[lead:].reshape(cin_g, p.kh, p.kw, per_lane)
            blocks.append(block.transpose(3, 0, 1, 2))
        bias = np.concatenate(biases)[: p.cout] if p.bias else None
        return np.concatenate(blocks)[: p.cout], bias

    def _lut(self, space: AddressSpace, p: EnginePass) -> np.ndarray:
        return self._tile_bytes(space, p, 0, 2 * LUT_ENTRIES).view(np.float16)

    # --- description ----------------------------------------------------------------------

    def describe(self) -> list[str]:
        lines = []
        for p in self.passes:
            lines.append(
                f"pass {p.index}: {p.unit} {p.op} {p.cin}x{p.hin}x{p.win} -> "
                f"{p.cout}x{p.hout}x{p.wout} kernel {p.kh}x{p.kw} stride {p.sy}x{p.sx} "
                f"pad {p.py}x{p.px} groups {p.groups} activation {p.nonlinear}"
            )
        return lines


def _public_name(name: str) -> str:
    """Apple's compilers name outputs `<name>@output`; callers see `<name>`."""
    return name[: -len("@output")] if name.endswith("@output") else name


def load(path: str | os.PathLike[str]) -> EngineProgram:
    return EngineProgram.load(path)
