"""Emit an H13 .hwx program from lowered engine passes: registers, weight tiles, relocations.

Register values follow what zin_ane_compiler v4.2.1 writes for the same kind of pass in
Apple's own programs (tests/data/apple/hwx); where the rule behind a value is not known the
value of the nearest Apple program is used, and benchmarks/hwx_golden.py reports every
field that still differs.
"""

from __future__ import annotations

import hashlib

import numpy as np

import anekit
from anekit.codegen.h13 import descriptor
from anekit.codegen.h13.lower import (
    Buffer,
    EmitError,
    Lowered,
    Pass,
    lanes_per_group,
    lower,
    split_rows,
)
from anekit.codegen.h13.tables import activation_table
from anekit.formats.hwx import writer
from anekit.formats.hwx.h13 import (
    DESCRIPTOR_STRIDE,
    L2_UNIT,
    MAX_BASES,
    NONLINEAR_MODES,
    PLANAR_OPS,
    UNIT,
    code_of,
    field_limit,
    field_widths,
)
from anekit.ir.graph import Graph

BASE_TEXT, BASE_CONST, BASE_INTERMEDIATE, BASE_FIRST_OUTPUT = 0, 1, 3, 4
INTERMEDIATE = "intermediate@scratch"  # the one window holding every working tensor
H13_CPUSUBTYPE = 4


def _tiles(p: Pass) -> list[bytes]:
    """One tile per lane: [bias x G] then [cin][kh][kw][G] fp16, padded to 64 bytes."""
    if p.kind == "pass" and p.activation == "lut":
        assert p.table is not None
        return [activation_table(p.table)]
    if p.kind != "conv":
        return []
    assert p.weights is not None
    per_lane = lanes_per_group(p.cout)
    lanes = -(-p.cout // per_lane)
    cout, cin_g, kh, kw = p.weights.shape
    padded = np.zeros((lanes * per_lane, cin_g, kh, kw), np.float16)
    padded[:cout] = p.weights
    bias = np.zeros(lanes * per_lane, np.float16)
    if p.bias is not None:
        bias[:cout] = p.bias
    tiles = []
    for lane in range(lanes):
        block = padded[lane * per_lane : (lane + 1) * per_lane].transpose(1, 2, 3, 0)
        data = np.ascontiguousarray(block).tobytes()
        if p.bias is not None:
            data = bias[lane * per_lane : (lane + 1) * per_lane].tobytes() + data
        tiles.append(data + bytes(-len(data) % 64))
    return tiles


def _chunks(width: int) -> int:
    """16-byte L2 units per channel row: a row of one channel is ceil(W/8) units of 8 fp16."""
    return -(-width // 8)


def _l2_row(channels: int, width: int) -> int:
    """An L2 row holds every channel's row in turn ([h][c][w/8] in 16-byte units)."""
    return _chunks(width) * channels * L2_UNIT


def _fields(p: Pass, index: int, last: bool, single: bool, bases: dict[str, int],
            scratch_at: dict[str, int], buffers: dict[str, Buffer], tile_offsets: list[int],
            tile_sizes: list[int]) -> dict[str, int]:  # fmt: skip
    src, dst = buffers[p.src1], buffers[p.dst]
    planar = p.planar
    conv = p.kind == "conv"
    # neural engines in use: one per output-channel group (conv) or channel (pass), up to
    # 16; Common.Cfg.ActiveNE holds its log2 and the header's ENE one more (every Apple
    # program agrees)
    groups_used = -(-p.cout // lanes_per_group(p.cout)) if conv else min(p.cout, 16)
    active_ne = (groups_used - 1).bit_length()
    f: dict[str, int] = {
        "Header.Word0.TID": index,
        "Header.Word0.LNID": int(last and not single),
        "Header.Word0.EON": int(last),
        "Header.Word1.NextSize": 0 if last else 0x9C,
        "Header.Word2.LogEvents": 0x422 if last or single else 0x400,
        "Header.Word4.DebugLogEvents": 0xFFF86A if single else (0x6A if last else 0x68),
        "Header.Word6.SPL": 1, "Header.Word6.TSR": 1, "Header.Word6.TSE": 1,
        "Header.Word6.SrcLoc": 1, "Header.Word6.DstLoc": 1,
        "Header.Word7.NextPointer": 0 if last else (index + 1) * DESCRIPTOR_STRIDE,
        "Header.Word8.RBase0": bases[p.src1], "Header.Word8.RBE0": 1,
        "Header.Word8.WBase": bases[p.dst], "Header.Word8.WBE": 1,
        "Header.Word8.ENE": 0 if planar else active_ne + 1,
        "Common.InDim.Win": p.win, "Common.InDim.Hin": p.hin,
        "Common.InDepth.Din": 1, "Common.OutDepth.Dout": 1,
        "Common.ChCfg.InFmt": 2, "Common.ChCfg.OutFmt": 2,
        "Common.Cin.Cin": p.cin, "Common.Cout.Cout": p.cout,
        "Common.OutDim.Wout": p.wout, "Common.OutDim.Hout": p.hout,
        "Common.ConvCfg.Kw": p.kernel[1], "Common.ConvCfg.Kh": p.kernel[0],
        "Common.ConvCfg.Sx": p.stride[1], "Common.ConvCfg.Sy": p.stride[0],
        "Common.ConvCfg.Px": p.padding[1], "Common.ConvCfg.Py": p.padding[0],
        "Common.ConvCfg.Ox": 1, "Common.ConvCfg.Oy": 1,
        "Common.Word8.Const": 0x2041,
        "Common.GroupConvCfg.NumGroups": p.groups, "Common.GroupConvCfg.UnicastCin": 1,
        "Common.TileCfg.TileHeight": p.hout,
        "TileDMASrc.DMAConfig.En": 1, "TileDMASrc.DMAConfig.CacheHint": 2,
        "TileDMASrc.DMAConfig.CacheHintReuse": 0xE, "TileDMASrc.DMAConfig.CacheHintNoReuse": 0xC,
        "TileDMASrc.BaseAddr.Addr": (scratch_at.get(p.src1, 0) + p.src_channel * src.plane_stride
                                     + p.row0 * src.row_stride) // UNIT,
        "TileDMASrc.RowStride.Stride": src.row_stride // UNIT,
        "TileDMASrc.PlaneStride.PlaneStride": src.plane_stride // UNIT,
        "TileDMASrc.DepthStride.Stride": src.size // UNIT,
        "TileDMASrc.Fmt.FmtMode": 1, "TileDMASrc.Fmt.Truncate": 3, "TileDMASrc.Fmt.MemFmt": 2,
        "TileDMASrc.Fmt.Interleave": 1,
        "L2.SourceCfg.SourceType": 2, "L2.SourceCfg.AliasConvSrc": 1,
        "L2.SourceCfg.AliasConvRslt": 1, "L2.SourceCfg.DMAFmt": 1,
        "L2.SourceCfg.DMAInterleave": 1, "L2.SourceCfg.AliasPlanarSrc": 1,
        "L2.SourceCfg.AliasPlanarRslt": 1,
        "L2.SourceChannelStride.Stride": _chunks(p.win),
        "L2.ResultCfg.ResultType": 2, "L2.ResultCfg.AliasConvSrc": 1,
        "L2.ResultCfg.AliasConvRslt": 1, "L2.ResultCfg.DMAFmt": 1,
        "L2.ResultCfg.DMAInterleave": 1, "L2.ResultCfg.AliasPlanarSrc": 1,
        "L2.ResultCfg.AliasPlanarRslt": 1,
        "TileDMADst.DMAConfig.En": 1, "TileDMADst.DMAConfig.CacheHint": 3,
        "TileDMADst.BaseAddr.Addr": (scratch_at.get(p.dst, 0) + p.dst_channel * dst.plane_stride
                                     + p.row0 * dst.row_stride) // UNIT,
        "TileDMADst.RowStride.RowStride": dst.row_stride // UNIT,
        "TileDMADst.PlaneStride.PlaneStride": dst.plane_stride // UNIT,
        "TileDMADst.DepthStride.DepthStride": dst.size // UNIT,
        "TileDMADst.Fmt.FmtMode": 1, "TileDMADst.Fmt.Truncate": 3, "TileDMADst.Fmt.MemFmt": 2,
        "TileDMADst.Fmt.Interleave": 1,
    }  # fmt: skip
    in_row = _l2_row(p.cin, p.win)
    f["L2.SourceRowStride.Stride"] = in_row // L2_UNIT
    f["L2.SourceDepthStride.Stride"] = f["L2.SourceGroupStride.Stride"] = in_row // L2_UNIT
    result_at = in_row * p.hin
    if planar:
        assert p.src2 is not None
        second = buffers[p.src2]
        f.update({
            "Header.Word8.RBase1": bases[p.src2], "Header.Word8.RBE1": 1,
            "Common.ChCfg.Src2En": 1, "Common.PECfg.Mode": 4,
            "Common.Cfg.TaskKind": 3, "Common.Cfg.PEKind": 3,
            "TileDMASrc.Src2DMAConfig.Cfg": 0x33880,
            "TileDMASrc.Src2BaseAddr.Addr": (scratch_at.get(p.src2, 0)
                                             + p.row0 * second.row_stride) // UNIT,
            "TileDMASrc.Src2RowStride.Stride": second.row_stride // UNIT,
            "TileDMASrc.Src2PlaneStride.Stride": second.plane_stride // UNIT,
            "TileDMASrc.Src2DepthStride.Stride": second.size // UNIT,
            "TileDMASrc.Src2Fmt.Fmt": 0x2030,
            "L2.SourceCfg.Src2En": 1,
            "Planar.Cfg.OpMode": code_of(PLANAR_OPS, p.kind), "Planar.Cfg.SecSrc": 2,
            "Planar.Cfg.ReluEn": int(p.activation == "relu"),
            "Planar.BiasScale.Scale": 0x3C00, "Planar.PreScale.PreScale": 0x3C00,
            "Planar.FinalScale.FinalScale": 0x3F800000,
            "L2.ResultCfg.L2BfrMode": 1, "TileDMADst.DMAConfig.L2BfrMode": 1,
        })  # fmt: skip
        second_at = -(-result_at // 64) * 64
        f["L2.Source2Base.Addr"] = second_at // L2_UNIT
        f["L2.Source2ChannelStride.Stride"] = _chunks(p.win)
        f["L2.Source2RowStride.Stride"] = in_row // L2_UNIT
        f["L2.Source2DepthStride.Stride"] = f["L2.Source2GroupStride.Stride"] = in_row // L2_UNIT
        result_at = second_at + in_row * p.hin
    else:
        f.update({
            "Common.Cfg.TaskKind": 1, "Common.TaskInfo.NID": 1, "Common.Cfg.ActiveNE": active_ne,
            "TileDMASrc.Word0x40.Const": 0x100, "TileDMASrc.Src2DMAConfig.Cfg": 0x8880,
            "NE.KernelCfg.PalettizedBits": 8, "NE.MACCfg.Bit20": 1, "NE.PostScale.PostScale": 0x3C00,
            "NE.MACCfg.NonlinearMode": code_of(NONLINEAR_MODES, p.activation),
            **{f"KernelDMASrc.Hint[{i}].Const": 0x80 for i in range(4)},
        })  # fmt: skip
        for lane in range(16):
            f[f"KernelDMASrc.CoeffDMAConfig[{lane}].CacheHint"] = 2
            f[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] = 1
        if conv:
            f.update({
                "Common.ConvCfg.OCGSize": lanes_per_group(p.cout).bit_length() - 1,
                "Common.Cfg.SmallSourceMode": 1, "Common.Cfg.ShPref": 4, "Common.Cfg.ShMin": 4,
                "Common.Cfg.ShMax": 4, "Common.Cfg.AccDoubleBufEn": 1,
                "NE.KernelCfg.KernelFmt": 2, "NE.MACCfg.BinaryPoint": 0x1C,
                "NE.MACCfg.BiasMode": int(p.bias is not None),
                "L2.ConvResultChannelStride.Stride": _chunks(p.wout),
            })  # fmt: skip
        else:
            f.update({
                "Common.Cfg.ShPref": 1, "Common.Cfg.ShMax": 1, "Common.Cfg.AccDoubleBufEn": 1,
                "Common.GroupConvCfg.UnicastEn": 1, "NE.MACCfg.OpMode": 4,
                "NE.MACCfg.KernelMode": 1, "L2.ResultCfg.L2BfrMode": 1,
                "TileDMADst.DMAConfig.L2BfrMode": 1,
            })  # fmt: skip
            if p.dst_channel:  # a later concat part: zin clears the planar aliases
                for side in ("Source", "Result"):
                    f[f"L2.{side}Cfg.AliasPlanarSrc"] = f[f"L2.{side}Cfg.AliasPlanarRslt"] = 0
        f["TileDMADst.Fmt.ZeroPadLast"] = f["TileDMADst.Fmt.ZeroPadFirst"] = 1
    out_row = _l2_row(p.cout, p.wout)
    f["L2.ResultBase.Addr"] = result_at // L2_UNIT
    if conv:
        f["L2.ConvResultRowStride.Stride"] = out_row // L2_UNIT
        f["L2.ResultDepthStride.Stride"] = f["L2.ResultGroupStride.Stride"] = out_row // L2_UNIT
    if tile_offsets:
        f["Header.Word9.KBase0"], f["Header.Word9.KBE0"] = BASE_CONST, 1
        f["KernelDMASrc.Pad0.Const"] = 0x40
        for lane, (offset, size) in enumerate(zip(tile_offsets, tile_sizes, strict=True)):
            f[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"] = 1
            f[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] = offset // UNIT
            f[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] = size // UNIT
    for name, value in f.items():
        if value > field_limit(name):
            raise EmitError(
                f"{name} = {value} does not fit its {field_widths()[name]} bits (at most "
                f"{field_limit(name)}): the pass {p.cin}x{p.hin}x{p.win} -> "
                f"{p.cout}x{p.hout}x{p.wout} exceeds what one H13 task descriptor holds",
                where=f"node '{p.node}'",
            )
    return {k: v for k, v in f.items() if v}


def _bases(lowered: Lowered) -> tuple[dict[str, int], dict[str, int], int]:
    """(base register per buffer, byte offset of each working tensor in the intermediate
    window, that window's size). Laid out as zin and the Asahi converter (eiln/anecc) expect:
    0 text, 1 kernel, 3 the one intermediate window, 4 the outputs, then the inputs."""
    bases: dict[str, int] = {}
    outputs = [b for b in lowered.buffers if lowered.buffers[b].role == "output"]
    for k, name in enumerate(outputs + lowered.inputs):
        if BASE_FIRST_OUTPUT + k >= MAX_BASES:
            raise EmitError(f"the program needs more than {MAX_BASES - BASE_FIRST_OUTPUT} "
                            "input and output windows")  # fmt: skip
        bases[name] = BASE_FIRST_OUTPUT + k
    offsets: dict[str, int] = {}
    size = 0
    for name, buffer in lowered.buffers.items():
        if buffer.role == "scratch":
            bases[name], offsets[name] = BASE_INTERMEDIATE, size
            size += -(-buffer.size // UNIT) * UNIT
    return bases, offsets, size


def emit(graph: Graph, *, source: str = "graph") -> bytes:
    """The .hwx program (bytes) computing `graph`'s engine layers on an H13 engine."""
    lowered = lower(graph)
    lowered.passes = [band for p in lowered.passes for band in split_rows(p)]
    if not lowered.passes:
        raise EmitError("the graph has no engine layer to emit")
    bases, scratch_at, scratch_size = _bases(lowered)
    tiles: list[writer.Tile] = []
    per_pass: list[list[writer.Tile]] = []
    for p in lowered.passes:
        datas = _tiles(p)
        digest = hashlib.sha256(b"".join(datas)).hexdigest().upper()
        named = [writer.Tile(f"K{digest}_ne_{lane}", data) for lane, data in enumerate(datas)]
        per_pass.append(named)
        tiles += [t for t in named if t.name not in {x.name for x in tiles}]  # shared weights once
    offsets = writer.const_layout(tiles)
    images, relocations = [], []
    for index, (p, named) in enumerate(zip(lowered.passes, per_pass, strict=True)):
        last = index == len(lowered.passes) - 1
        fields = _fields(p, index, last, len(lowered.passes) == 1, bases, scratch_at,
                         lowered.buffers, [offsets[t.name] for t in named],
                         [len(t.data) for t in named])  # fmt: skip
        images.append(descriptor.encode(fields))
        for lane, tile in enumerate(named):
            at = index * DESCRIPTOR_STRIDE + descriptor.field_offset(
                f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"
            )
            relocations.append((at, offsets[tile.name]))
    windows = [
        writer.Window(b.name, b.role, (1, b.channels, b.height, b.width),
                      (b.size, b.plane_stride, b.row_stride, 2), b.size)
        for key in lowered.inputs + [k for k, v in lowered.buffers.items() if v.role == "output"]
        for b in [lowered.buffers[key]]
    ]  # fmt: skip
    scratch = [(INTERMEDIATE, scratch_size)] if scratch_size else []
    names = {key: lowered.buffers[key].name for key in lowered.buffers}
    names.update(dict.fromkeys(scratch_at, INTERMEDIATE))
    image = writer.HwxImage(
        cpusubtype=H13_CPUSUBTYPE,
        descriptors=descriptor.chain(images),
        tiles=tiles,
        windows=windows,
        scratch=scratch,
        bases={index: names[key] for key, index in bases.items()}
        | {BASE_TEXT: "__text", BASE_CONST: "__const"},
        relocations=relocations,
        banner=f"ANEC v1\nanekit v{anekit.__version__}\n\t-t h13\n\t-i {source}\n",
    )
    return writer.write(image)


__all__ = ["EmitError", "emit"]
