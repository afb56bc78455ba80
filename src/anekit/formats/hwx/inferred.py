"""H13 register fields outside the shipped map, inferred from Apple's own programs.

tinygrad's aneregs.json (regs/h13.json) leaves some words and bits unnamed. These names
come from comparing the fixtures in tests/data/apple (what zin writes for a planar add/mul
against a neural-engine conv/relu), with the planar-engine words named as allbilly/ane's
M1 register map names them. docs/engine.md says what is known about each.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.formats.hwx.registers import BitRange


@dataclass(frozen=True)
class InferredField(BitRange):
    """A field outside the shipped map: name, register address, first bit, width."""

    name: str
    address: int
    bit: int
    width: int


INFERRED: tuple[InferredField, ...] = (
    # Common: words every Apple program writes the same value to (depth dimensions, a
    # configuration constant); the emulator accepts only those values.
    InferredField("Common.InDepth.Din", 0x4, 0, 32),
    InferredField("Common.OutDepth.Dout", 0x18, 0, 32),
    InferredField("Common.Word8.Const", 0x20, 0, 32),
    InferredField("Common.ChCfg.Src2En", 0x8, 3, 1),
    InferredField("Common.PECfg.Mode", 0x2C, 0, 32),
    InferredField("Common.Cfg.TaskKind", 0x34, 0, 2),
    InferredField("Common.Cfg.PEKind", 0x34, 4, 2),
    # Tile DMA source 2: the second operand of a planar-engine pass (add/mul)
    InferredField("TileDMASrc.Src2DMAConfig.Cfg", 0x13804, 0, 32),
    InferredField("TileDMASrc.Src2BaseAddr.Addr", 0x1381C, 6, 26),
    InferredField("TileDMASrc.Src2RowStride.Stride", 0x13820, 6, 26),
    InferredField("TileDMASrc.Src2PlaneStride.Stride", 0x13824, 6, 26),
    InferredField("TileDMASrc.Src2DepthStride.Stride", 0x13828, 6, 26),
    InferredField("TileDMASrc.Src2GroupStride.Stride", 0x1382C, 6, 26),
    InferredField("TileDMASrc.Src2Fmt.Fmt", 0x1383C, 0, 32),
    InferredField("TileDMASrc.Word0x40.Const", 0x13840, 0, 32),
    # L2: the second source and the spare stride words
    InferredField("L2.SourceCfg.Src2En", 0x4804, 24, 1),
    InferredField("L2.SourceDepthStride.Stride", 0x4814, 4, 17),
    InferredField("L2.SourceGroupStride.Stride", 0x4818, 4, 17),
    InferredField("L2.Source2Base.Addr", 0x481C, 4, 17),
    InferredField("L2.Source2ChannelStride.Stride", 0x4820, 4, 17),
    InferredField("L2.Source2RowStride.Stride", 0x4824, 4, 17),
    InferredField("L2.Source2DepthStride.Stride", 0x4828, 4, 17),
    InferredField("L2.Source2GroupStride.Stride", 0x482C, 4, 17),
    InferredField("L2.ResultDepthStride.Stride", 0x4840, 4, 17),
    InferredField("L2.ResultGroupStride.Stride", 0x4844, 4, 17),
    # Planar engine (allbilly/ane's M1 map names these words)
    InferredField("Planar.Cfg.En", 0x8800, 1, 1),
    InferredField("Planar.Cfg.OpMode", 0x8800, 2, 3),
    InferredField("Planar.Cfg.ReluEn", 0x8800, 5, 1),
    InferredField("Planar.Cfg.Cond", 0x8800, 6, 1),
    InferredField("Planar.Cfg.FirstSrc", 0x8800, 16, 1),
    InferredField("Planar.Cfg.SecSrc", 0x8800, 18, 2),
    InferredField("Planar.BiasScale.Bias", 0x8804, 0, 16),
    InferredField("Planar.BiasScale.Scale", 0x8804, 16, 16),
    InferredField("Planar.PreScale.PreScale", 0x8808, 16, 16),
    InferredField("Planar.FinalScale.FinalScale", 0x880C, 0, 32),
    # NE: a bit zin sets in every MACCfg
    InferredField("NE.MACCfg.Bit20", 0xC804, 20, 1),
    # Kernel DMA: words zin fills with constants (cache and prefetch hints by position)
    InferredField("KernelDMASrc.Pad0.Const", 0x1F800, 0, 32),
    *(InferredField(f"KernelDMASrc.Hint[{i}].Const", 0x1F8C8 + 4 * i, 0, 32) for i in range(4)),
    *(InferredField(f"KernelDMASrc.Hint2[{i}].Const", 0x1F8E8 + 4 * i, 0, 32) for i in range(4)),
)
