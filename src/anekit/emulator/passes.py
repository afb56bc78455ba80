"""One engine pass per task descriptor: the decoded registers as the emulator acts on them."""

from __future__ import annotations

from dataclasses import dataclass

from anekit.errors import FormatError
from anekit.formats.hwx.h13 import (
    KERNEL_FORMATS,
    L2_BYTES,
    L2_UNIT,
    NE_OP_CONV,
    NE_OP_PASS,
    NONLINEAR_MODES,
    PLANAR_OPS,
    TASK_NE,
    TASK_PE,
    UNIT,
)


@dataclass(frozen=True)
class Dma:
    """A tile-DMA transfer: which base register, the offset and byte strides."""

    base: int  # index into the program's base-address table
    offset: int
    row_stride: int
    plane_stride: int
    depth_stride: int
    group_stride: int


@dataclass(frozen=True)
class KernelTile:
    lane: int
    register_offset: int  # byte offset of CoeffBaseAddr[lane] in the descriptor section
    offset: int  # from the kernel base register, as the descriptor holds it
    size: int


@dataclass(frozen=True)
class EnginePass:
    index: int
    unit: str  # "ne" or "pe"
    cin: int
    cout: int
    hin: int
    win: int
    hout: int
    wout: int
    kh: int
    kw: int
    sy: int
    sx: int
    py: int
    px: int
    groups: int
    lanes_per_group: int  # output channels per kernel lane (2**OCGSize)
    op: str  # "conv", "pass", or a planar op: "add", "mul", "max", "min"
    kernel_format: str | None
    kernel_base: int | None
    tiles: tuple[KernelTile, ...]
    bias: bool  # NE.MACCfg.BiasMode: each lane's tile starts with its channels' fp16 biases
    nonlinear: str  # "none", "relu", "lut"
    input_relu: bool
    src1: Dma
    src2: Dma | None
    dst: Dma
    planar_bias: int  # fp16 bits
    planar_relu: bool
    l2: tuple[L2Buffer, ...]  # source, [source 2,] result
    skip: bool


def _need(condition: bool, index: int, message: str, where: str | None) -> None:
    if not condition:
        raise FormatError(f"task descriptor {index}: {message}", where=where)


def _dma(f: dict[str, int], prefix: str, base: int, names: tuple[str, ...]) -> Dma:
    offset, row, plane, depth, group = (f.get(f"{prefix}.{n}", 0) * UNIT for n in names)
    return Dma(base, offset, row, plane, depth, group)


_SRC1 = ("BaseAddr.Addr", "RowStride.Stride", "PlaneStride.PlaneStride",
         "DepthStride.Stride", "GroupStride.Stride")  # fmt: skip
_SRC2 = ("Src2BaseAddr.Addr", "Src2RowStride.Stride", "Src2PlaneStride.Stride",
         "Src2DepthStride.Stride", "Src2GroupStride.Stride")  # fmt: skip
_DST = ("BaseAddr.Addr", "RowStride.RowStride", "PlaneStride.PlaneStride",
        "DepthStride.DepthStride", "GroupStride.GroupStride")  # fmt: skip


@dataclass(frozen=True)
class L2Buffer:
    """A tensor [C, H, W] fp16 in the on-chip L2, at a byte offset with byte strides."""

    name: str
    start: int
    channel_stride: int
    row_stride: int
    channels: int
    height: int
    width: int

    @property
    def size(self) -> int:
        return self.row_stride * self.height


def _l2_regions(
    index: int,
    f: dict[str, int],
    shape: tuple[int, int, int, int, int, int],
    two: bool,
    where: str | None,
) -> tuple[L2Buffer, ...]:
    """The L2 buffers of one pass (sources, then the result).

    Inferred layout (every fixture agrees): an L2 row holds each channel's row in turn, a
    channel's row being ceil(W/8) units of 16 bytes (8 fp16); a channel stride or row
    stride below that would overlap. (A pass-through or planar pass leaves the result
    strides 0: its result is laid out as its source.) Buffers must lie inside the 2 MiB L2
    and must not overlap each other.
    """
    cin, hin, win, cout, hout, wout = shape
    source = (f.get("L2.SourceChannelStride.Stride", 0), f.get("L2.SourceRowStride.Stride", 0))
    result = (f.get("L2.ConvResultChannelStride.Stride", 0),
              f.get("L2.ConvResultRowStride.Stride", 0))  # fmt: skip
    wanted = [("source", f.get("L2.SourceBase.Addr", 0), source, hin, cin, win)]
    if two:
        second = (f.get("L2.Source2ChannelStride.Stride", 0),
                  f.get("L2.Source2RowStride.Stride", 0))  # fmt: skip
        wanted.append(("source 2", f.get("L2.Source2Base.Addr", 0), second, hin, cin, win))
    wanted.append(("result", f.get("L2.ResultBase.Addr", 0), result if any(result) else source,
                   hout, cout, wout))  # fmt: skip
    regions: list[L2Buffer] = []
    for name, base, (channel, row), rows, channels, width in wanted:
        chunk = -(-width // 8)
        _need(channel >= chunk and row >= channel * channels, index, f"the L2 {name} strides "
              f"(channel {channel}, row {row} units of 16 bytes) cannot hold {channels} "
              f"channels of {width} fp16 ({chunk} units each)", where)  # fmt: skip
        buffer = L2Buffer(name, base * L2_UNIT, channel * L2_UNIT, row * L2_UNIT, channels,
                          rows, width)  # fmt: skip
        end = buffer.start + buffer.size
        _need(end <= L2_BYTES, index, f"the L2 {name} buffer [0x{buffer.start:x}, 0x{end:x}) "
              "lies outside the 2 MiB L2", where)  # fmt: skip
        for other in regions:
            _need(buffer.start >= other.start + other.size or other.start >= end, index,
                  f"the L2 {name} and {other.name} buffers overlap", where)  # fmt: skip
        regions.append(buffer)
    return tuple(regions)


def decode_pass(index: int, f: dict[str, int], where: str | None) -> EnginePass:
    """Turn one descriptor's fields into a pass, refusing combinations it cannot run."""
    kind = (f.get("Common.Cfg.TaskKind", 0), f.get("Common.Cfg.PEKind", 0))
    _need(kind in (TASK_NE, TASK_PE), index, f"task kind {kind} (Common.Cfg bits 0-1, 4-5) "
          "is neither a neural-engine (1, 0) nor a planar-engine (3, 3) pass", where)  # fmt: skip
    unit = "ne" if kind == TASK_NE else "pe"
    cin, cout = f.get("Common.Cin.Cin", 0), f.get("Common.Cout.Cout", 0)
    hin, win = f.get("Common.InDim.Hin", 0), f.get("Common.InDim.Win", 0)
    hout, wout = f.get("Common.OutDim.Hout", 0), f.get("Common.OutDim.Wout", 0)
    _need(min(cin, cout, hin, win, hout, wout) > 0, index, "a zero dimension (Common.InDim, "
          "Common.OutDim, Common.Cin or Common.Cout)", where)  # fmt: skip
    kh, kw = f.get("Common.ConvCfg.Kh", 0), f.get("Common.ConvCfg.Kw", 0)
    sy, sx = f.get("Common.ConvCfg.Sy", 0), f.get("Common.ConvCfg.Sx", 0)
    py, px = f.get("Common.ConvCfg.Py", 0), f.get("Common.ConvCfg.Px", 0)
    _need(kh > 0 and kw > 0 and sy > 0 and sx > 0, index,
          "Common.ConvCfg Kh, Kw, Sy and Sx must be at least 1", where)  # fmt: skip
    _need((f.get("Common.ConvCfg.Ox", 0), f.get("Common.ConvCfg.Oy", 0)) == (1, 1), index,
          "Common.ConvCfg.Ox/Oy other than 1 are not understood by the emulator", where)  # fmt: skip
    groups = f.get("Common.GroupConvCfg.NumGroups", 0)
    _need(groups >= 1 and cin % groups == 0 and cout % groups == 0, index,
          f"Common.GroupConvCfg.NumGroups={groups} must divide Cin={cin} and Cout={cout}", where)  # fmt: skip
    _need(f.get("Header.Word6.TDSkip", 0) in (0, 1), index, "bad TDSkip", where)
    _need(
        f.get("Header.Word8.RBE0", 0) == 1,
        index,
        "Header.Word8.RBE0 (input base) is not set",
        where,
    )
    _need(
        f.get("Header.Word8.WBE", 0) == 1, index, "Header.Word8.WBE (output base) is not set", where
    )
    _need(f.get("TileDMASrc.DMAConfig.En", 0) == 1 and f.get("TileDMADst.DMAConfig.En", 0) == 1,
          index, "the tile DMA source and destination must be enabled", where)  # fmt: skip
    src1 = _dma(f, "TileDMASrc", f["Header.Word8.RBase0"], _SRC1)
    dst = _dma(f, "TileDMADst", f["Header.Word8.WBase"], _DST)
    two = f.get("Common.ChCfg.Src2En", 0) == 1
    _need(two == (f.get("L2.SourceCfg.Src2En", 0) == 1) == (f.get("Header.Word8.RBE1", 0) == 1),
          index, "Common.ChCfg.Src2En, L2.SourceCfg.Src2En and Header.Word8.RBE1 disagree "
          "about a second source", where)  # fmt: skip
    src2 = _dma(f, "TileDMASrc", f["Header.Word8.RBase1"], _SRC2) if two else None

    nonlinear = NONLINEAR_MODES.get(f.get("NE.MACCfg.NonlinearMode", 0))
    _need(nonlinear is not None, index, f"NE.MACCfg.NonlinearMode="
          f"{f.get('NE.MACCfg.NonlinearMode')} is not understood", where)  # fmt: skip
    kernel_format = KERNEL_FORMATS.get(f.get("NE.KernelCfg.KernelFmt", 0), "unknown")
    _need(kernel_format != "unknown", index,
          f"NE.KernelCfg.KernelFmt={f.get('NE.KernelCfg.KernelFmt')} is not understood", where)  # fmt: skip
    tiles, kernel_base = _tiles(index, f, where)
    planar_bias = f.get("Planar.BiasScale.Bias", 0)
    planar_relu = bool(f.get("Planar.Cfg.ReluEn", 0))
    if unit == "ne":
        op_mode, kernel_mode = f.get("NE.MACCfg.OpMode", 0), f.get("NE.MACCfg.KernelMode", 0)
        if (op_mode, kernel_mode) == (NE_OP_CONV, 0):
            op = "conv"
            _need(kernel_format == "fp16" and tiles, index,
                  "a multiply-accumulate pass needs fp16 kernel tiles (NE.KernelCfg.KernelFmt=2, "
                  "KernelDMASrc.CoeffDMAConfig[i].En)", where)  # fmt: skip
        elif (op_mode, kernel_mode) == (NE_OP_PASS, 1):
            op = "pass"
            _need(cin == cout and (hin, win) == (hout, wout) and (kh, kw) == (1, 1), index,
                  "a pass-through pass must keep its shape", where)  # fmt: skip
        else:
            raise FormatError(
                f"task descriptor {index}: NE.MACCfg OpMode={op_mode} KernelMode={kernel_mode} "
                "is not understood by the engine emulator",
                where=where,
            )
        _need(not two, index, "a neural-engine pass with a second source is not understood", where)
        _need(op == "conv" or not f.get("NE.MACCfg.BiasMode", 0), index,
              "NE.MACCfg.BiasMode on a pass without kernel tiles", where)  # fmt: skip
        _need(nonlinear != "lut" or bool(tiles), index,
              "a lookup-table activation needs its table in kernel tile 0", where)  # fmt: skip
    else:
        op = PLANAR_OPS.get(f.get("Planar.Cfg.OpMode", 0), "unknown")
        _need(op != "unknown", index, f"Planar.Cfg.OpMode={f.get('Planar.Cfg.OpMode')} is not "
              "understood", where)  # fmt: skip
        _need(two and f.get("Planar.Cfg.SecSrc", 0) == 2, index,
              "a planar-engine pass needs its second source (Planar.Cfg.SecSrc=2)", where)  # fmt: skip
        _need(cin == cout and (hin, win) == (hout, wout), index,
              "a planar-engine pass must keep its shape", where)  # fmt: skip
        _need(not tiles and nonlinear == "none", index,
              "a planar-engine pass with kernel tiles or a NE activation is not understood", where)  # fmt: skip
    if op != "conv":
        _need((kh, kw, sy, sx, py, px, groups) == (1, 1, 1, 1, 0, 0, 1), index,
              "an element-wise pass with a kernel window, stride, padding or groups", where)  # fmt: skip
    else:
        _need(hout == (hin + 2 * py - kh) // sy + 1 and wout == (win + 2 * px - kw) // sx + 1,
              index, f"output {hout}x{wout} does not follow from input {hin}x{win}, kernel "
              f"{kh}x{kw}, stride {sy}x{sx} and padding {py}x{px}", where)  # fmt: skip
    regions = _l2_regions(index, f, (cin, hin, win, cout, hout, wout), two, where)
    return EnginePass(
        index, unit, cin, cout, hin, win, hout, wout, kh, kw, sy, sx, py, px, groups,
        1 << f.get("Common.ConvCfg.OCGSize", 0), op, kernel_format, kernel_base, tiles,
        bool(f.get("NE.MACCfg.BiasMode", 0)), nonlinear, bool(f.get("L2.L2Cfg.InputReLU", 0)), src1, src2, dst, planar_bias,
        planar_relu, regions, bool(f.get("Header.Word6.TDSkip", 0)),
    )  # fmt: skip


def _tiles(
    index: int, f: dict[str, int], where: str | None
) -> tuple[tuple[KernelTile, ...], int | None]:
    tiles = []
    for lane in range(16):
        if f.get(f"KernelDMASrc.CoeffDMAConfig[{lane}].En", 0):
            tiles.append(
                KernelTile(
                    lane,
                    0,
                    f.get(f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr", 0) * UNIT,
                    f.get(f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize", 0) * UNIT,
                )
            )
    if not tiles:
        return (), None
    _need(f.get("Header.Word9.KBE0", 0) == 1, index,
          "kernel tiles are enabled but Header.Word9.KBE0 (kernel base) is not", where)  # fmt: skip
    _need([t.lane for t in tiles] == list(range(len(tiles))), index,
          "enabled kernel lanes must be 0..n-1", where)  # fmt: skip
    return tuple(tiles), f["Header.Word9.KBase0"]
