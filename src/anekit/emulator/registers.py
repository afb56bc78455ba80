"""Which H13 register fields the emulator understands, and the bits the shipped map leaves unnamed.

Every bit a task descriptor writes falls into one of three classes:

- a field the emulator *uses* (its value drives the arithmetic or the data movement);
- a field it *accepts* with no effect on the values computed (scheduling, cache hints, logging),
  listed with the values known to be harmless (``None``: any value);
- everything else, which must be zero. A set bit there is an error naming the register.

The shipped map (tinygrad's aneregs.json, `anekit.formats.hwx.regs/h13.json`) names most
fields; `anekit.formats.hwx.inferred.INFERRED` names the others (labelled as inferred in
docs/engine.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from anekit.errors import FormatError
from anekit.formats.hwx import TaskDescriptor

_ANY = None
_FP16_ONE = 0x3C00

# field -> the values the emulator accepts (None: any). Fields not listed here and not in
# USED must be zero.
ACCEPTED: Mapping[str, frozenset[int] | None] = MappingProxyType(
    {
        # descriptor header: identity, logging, scheduling and chaining bookkeeping
        **{
            f"Header.{name}": _ANY
            for name in (
                "Word0.TID",
                "Word0.NID",
                "Word0.LNID",
                "Word0.EON",
                "Word1.ExeCycles",
                "Word1.NextSize",
                "Word2.LogEvents",
                "Word3.Exceptions",
                "Word4.DebugLogEvents",
                "Word5.DebugExceptions",
                "Word6.DisallowAbort",
                "Word6.KPC",
                "Word6.SPL",
                "Word6.TSR",
                "Word6.SPC",
                "Word6.DPC",
                "Word6.TSE",
                "Word6.NextPriority",
                "Word6.TDE",
                "Word6.TQDis",
                "Word7.NextPointer",
                "Word8.ENE",
                "Word8.TBase",
                "Word8.TBE",
            )
        },  # fmt: skip
        "Header.Word6.SrcLoc": frozenset({1}),
        "Header.Word6.DstLoc": frozenset({1}),
        "Common.TaskInfo.TaskID": _ANY,
        "Common.TaskInfo.TaskQ": _ANY,
        "Common.TaskInfo.NID": _ANY,
        "Common.DPE.Category": _ANY,
        "Common.TileCfg.TileHeight": _ANY,
        "Common.Cfg.SmallSourceMode": _ANY,
        "Common.Cfg.ShPref": _ANY,
        "Common.Cfg.ShMin": _ANY,
        "Common.Cfg.ShMax": _ANY,
        "Common.Cfg.ActiveNE": _ANY,
        "Common.Cfg.AccDoubleBufEn": _ANY,
        "Common.GroupConvCfg.UnicastEn": _ANY,
        "Common.GroupConvCfg.UnicastCin": _ANY,
        "Common.InDepth.Din": frozenset({1}),
        "Common.OutDepth.Dout": frozenset({1}),
        "Common.Word8.Const": frozenset({0x2041}),
        "Common.PECfg.Mode": frozenset({0, 4}),
        "NE.MACCfg.Bit20": _ANY,
        "NE.KernelCfg.PalettizedBits": _ANY,  # unused while PalettizedEn is 0
        # the fixed-point binary point has no effect on fp16 arithmetic
        "NE.MACCfg.BinaryPoint": _ANY,
        "NE.PostScale.PostScale": frozenset({0, _FP16_ONE}),
        "KernelDMASrc.Pad0.Const": frozenset({0x40}),
        **{f"KernelDMASrc.Hint[{i}].Const": frozenset({0x80}) for i in range(4)},
        **{f"KernelDMASrc.Hint2[{i}].Const": frozenset({0x40}) for i in range(4)},
        **{
            f"KernelDMASrc.CoeffDMAConfig[{i}].{f}": _ANY
            for i in range(16)
            for f in ("CrH", "CacheHint", "PrefetchParticipateEn")
        },  # fmt: skip
        "TileDMASrc.DMAConfig.CrH": _ANY,
        "TileDMASrc.DMAConfig.CacheHint": _ANY,
        "TileDMASrc.DMAConfig.CacheHintReuse": _ANY,
        "TileDMASrc.DMAConfig.CacheHintNoReuse": _ANY,
        "TileDMASrc.DMAConfig.DependencyMode": _ANY,
        "TileDMASrc.Src2DMAConfig.Cfg": frozenset({0x8880, 0x33880}),
        "TileDMASrc.Fmt.FmtMode": frozenset({1}),
        "TileDMASrc.Fmt.Truncate": frozenset({3}),
        "TileDMASrc.Fmt.MemFmt": frozenset({2}),
        "TileDMASrc.Fmt.Interleave": frozenset({1}),
        "TileDMASrc.Src2Fmt.Fmt": frozenset({0x2030}),
        "TileDMASrc.Word0x40.Const": frozenset({0x100}),
        "TileDMADst.DMAConfig.CrH": _ANY,
        "TileDMADst.DMAConfig.CacheHint": _ANY,
        "TileDMADst.DMAConfig.L2BfrMode": _ANY,
        "TileDMADst.DMAConfig.BypassEOW": _ANY,
        "TileDMADst.Fmt.FmtMode": frozenset({1}),
        "TileDMADst.Fmt.Truncate": frozenset({3}),
        "TileDMADst.Fmt.MemFmt": frozenset({2}),
        "TileDMADst.Fmt.Interleave": frozenset({1}),
        "TileDMADst.Fmt.ZeroPadLast": _ANY,  # fills the row tail past Wout, not the tensor
        "TileDMADst.Fmt.ZeroPadFirst": _ANY,
        "L2.SourceCfg.SourceType": frozenset({2}),
        "L2.SourceCfg.Dependent": _ANY,
        "L2.SourceCfg.AliasConvSrc": _ANY,
        "L2.SourceCfg.AliasConvRslt": _ANY,
        "L2.SourceCfg.AliasPlanarSrc": _ANY,
        "L2.SourceCfg.AliasPlanarRslt": _ANY,
        "L2.SourceCfg.DMAFmt": frozenset({1}),
        "L2.SourceCfg.DMAInterleave": frozenset({1}),
        "L2.ResultCfg.ResultType": frozenset({2}),
        "L2.ResultCfg.L2BfrMode": _ANY,
        "L2.ResultCfg.AliasConvSrc": _ANY,
        "L2.ResultCfg.AliasConvRslt": _ANY,
        "L2.ResultCfg.AliasPlanarSrc": _ANY,
        "L2.ResultCfg.AliasPlanarRslt": _ANY,
        "L2.ResultCfg.DMAFmt": frozenset({1}),
        "L2.ResultCfg.DMAInterleave": frozenset({1}),
        "Planar.Cfg.FirstSrc": frozenset({0}),
        "Planar.Cfg.SecSrc": frozenset({0, 2}),
        "Planar.BiasScale.Scale": frozenset({0, _FP16_ONE}),
        "Planar.PreScale.PreScale": frozenset({0, _FP16_ONE}),
        "Planar.FinalScale.FinalScale": frozenset({0, 0x3F800000}),
        "Common.ChCfg.InFmt": frozenset({2}),
        "Common.ChCfg.OutFmt": frozenset({2}),
    }
)

# fields whose values the emulator reads and acts on (any value it can act on is checked
# where it is used)
USED: frozenset[str] = frozenset(
    {
        "Header.Word6.TDSkip",
        "Header.Word8.RBase0",
        "Header.Word8.RBE0",
        "Header.Word8.RBase1",
        "Header.Word8.RBE1",
        "Header.Word8.WBase",
        "Header.Word8.WBE",
        "Header.Word9.KBase0",
        "Header.Word9.KBE0",
        "Common.InDim.Win",
        "Common.InDim.Hin",
        "Common.Cin.Cin",
        "Common.Cout.Cout",
        "Common.OutDim.Wout",
        "Common.OutDim.Hout",
        "Common.ConvCfg.Kw",
        "Common.ConvCfg.Kh",
        "Common.ConvCfg.OCGSize",
        "Common.ConvCfg.Sx",
        "Common.ConvCfg.Sy",
        "Common.ConvCfg.Px",
        "Common.ConvCfg.Py",
        "Common.ConvCfg.Ox",
        "Common.ConvCfg.Oy",
        "Common.GroupConvCfg.NumGroups",
        "Common.ChCfg.Src2En",
        "Common.Cfg.TaskKind",
        "Common.Cfg.PEKind",
        "TileDMASrc.DMAConfig.En",
        "TileDMASrc.BaseAddr.Addr",
        "TileDMASrc.RowStride.Stride",
        "TileDMASrc.PlaneStride.PlaneStride",
        "TileDMASrc.DepthStride.Stride",
        "TileDMASrc.GroupStride.Stride",
        "TileDMASrc.Src2BaseAddr.Addr",
        "TileDMASrc.Src2RowStride.Stride",
        "TileDMASrc.Src2PlaneStride.Stride",
        "TileDMASrc.Src2DepthStride.Stride",
        "TileDMASrc.Src2GroupStride.Stride",
        "TileDMADst.DMAConfig.En",
        "TileDMADst.BaseAddr.Addr",
        "TileDMADst.RowStride.RowStride",
        "TileDMADst.PlaneStride.PlaneStride",
        "TileDMADst.DepthStride.DepthStride",
        "TileDMADst.GroupStride.GroupStride",
        "L2.L2Cfg.InputReLU",
        "L2.SourceBase.Addr",
        "L2.SourceChannelStride.Stride",
        "L2.SourceRowStride.Stride",
        "L2.ResultBase.Addr",
        "L2.ConvResultChannelStride.Stride",
        "L2.ConvResultRowStride.Stride",
        "L2.SourceCfg.Src2En",
        "L2.SourceDepthStride.Stride",
        "L2.SourceGroupStride.Stride",
        "L2.Source2Base.Addr",
        "L2.Source2ChannelStride.Stride",
        "L2.Source2RowStride.Stride",
        "L2.Source2DepthStride.Stride",
        "L2.Source2GroupStride.Stride",
        "L2.ResultDepthStride.Stride",
        "L2.ResultGroupStride.Stride",
        "NE.KernelCfg.KernelFmt",
        "NE.MACCfg.OpMode",
        "NE.MACCfg.KernelMode",
        "NE.MACCfg.NonlinearMode",
        "NE.MACCfg.BiasMode",
        "Planar.Cfg.En",
        "Planar.Cfg.OpMode",
        "Planar.Cfg.ReluEn",
        "Planar.BiasScale.Bias",
    }  # fmt: skip
    | {f"KernelDMASrc.CoeffDMAConfig[{i}].En" for i in range(16)}
    | {f"KernelDMASrc.CoeffBaseAddr[{i}].Addr" for i in range(16)}
    | {f"KernelDMASrc.CoeffBfrSize[{i}].MemBfrSize" for i in range(16)}
)


def decode(descriptor: TaskDescriptor, where: str | None) -> dict[str, int]:
    """Every field (mapped and inferred) of one descriptor, after checking that no bit the
    emulator does not understand is set. Raises FormatError naming the register."""
    for stream in descriptor.streams:
        if stream.name is None:
            raise FormatError(
                f"task descriptor {descriptor.index} writes registers at 0x{stream.address:x}, "
                "a block the engine emulator does not know",
                where=where,
            )
    if descriptor.unknown:
        address, stray = next(iter(descriptor.unknown.items()))
        raise FormatError(
            f"task descriptor {descriptor.index}: register 0x{address:05x} sets bits "
            f"0x{stray:08x} that no known field covers; the engine emulator does not know "
            "what they do",
            where=where,
        )
    fields = {**descriptor.fields, **descriptor.inferred}
    for name, value in fields.items():
        if value == 0 or name in USED:
            continue
        if name not in ACCEPTED:
            raise FormatError(
                f"task descriptor {descriptor.index}: register field {name} = 0x{value:x} is not "
                "understood by the engine emulator (it must be 0)",
                where=where,
            )
        allowed = ACCEPTED[name]
        if allowed is not None and value not in allowed:
            shown = ", ".join(f"0x{v:x}" for v in sorted(allowed))
            raise FormatError(
                f"task descriptor {descriptor.index}: register field {name} = 0x{value:x} is not "
                f"understood by the engine emulator (known values: {shown})",
                where=where,
            )
    return fields
