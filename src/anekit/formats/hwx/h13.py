"""The H13 (M1) engine's hardware facts: units, the activation-table layout, mode values, widths.

One table read by the writer (`anekit.codegen.h13`) and the emulator (`anekit.emulator`)
alike. It states what a register value *is*; how a value is computed from a layer stays
with the writer, and how the engine acts on it stays with the emulator, so the emulator
can still judge the writer. Sources are named per fact (docs/sources.md: tinygrad's
aneregs.json, allbilly/ane's register notes, Apple's programs in tests/data/apple).
"""

from __future__ import annotations

import functools
from types import MappingProxyType

from anekit.formats.hwx.inferred import INFERRED
from anekit.formats.hwx.registers import generation_layout

ENGINE = "H13"  # the chip database's engine code (src/anekit/targets/chips.json)

# Tile-DMA addresses and strides count 64-byte units (the fields sit at bit 6); L2
# addresses and strides count 16-byte units (bit 4); 17-bit L2 fields span 2 MiB.
UNIT = 64
L2_UNIT = 16
L2_BYTES = 1 << 21

MAX_LANES = 16  # kernel-DMA coefficient lanes (KernelDMASrc.CoeffDMAConfig[0..15])
MAX_BASES = 32  # 5-bit base indices (Header.Word8 RBase/WBase, Word9 KBase)
DESCRIPTOR_STRIDE = 0x300  # zin places chained descriptors 0x300 bytes apart

# The activation table (NE.MACCfg.NonlinearMode 2): 128 bytes in kernel tile 0, whose fp16
# entries 4..36 hold 33 samples of the function on [-8, 8] at a step of 0.5 (Apple's
# sigmoid program, tests/data/apple/hwx/h13_sigmoid.hwx, holds sigmoid(-8 + k/2) there).
LUT_BYTES = 128
LUT_ENTRIES = LUT_BYTES // 2
LUT_FIRST, LUT_SAMPLES, LUT_LOW, LUT_STEP = 4, 33, -8.0, 0.5

# NE.MACCfg.NonlinearMode. allbilly/ane (REGISTER_PROGRMMING.md, "Family 2a") calls 2
# "sigmoid" because that is the table zin writes; the engine reads whatever table tile 0
# holds, so anekit names it for what it does.
NONLINEAR_MODES = MappingProxyType({0: "none", 1: "relu", 2: "lut"})
# Planar.Cfg.OpMode: add and mul from Apple's programs (h13_sum, h13_mul_zin*); max and min
# measured on an M1 by allbilly/ane (REGISTER_PROGRMMING.md, "Family 1 — PE Elementwise").
PLANAR_OPS = MappingProxyType({0: "add", 1: "mul", 2: "max", 3: "min"})
# NE.MACCfg.OpMode with KernelMode: multiply-accumulate against the kernel (conv, matmul),
# or the input passed through (no kernel), as Apple's conv and relu programs write them.
NE_OP_CONV, NE_OP_PASS = 0, 4
KERNEL_FORMATS = MappingProxyType({0: None, 2: "fp16"})  # NE.KernelCfg.KernelFmt
TASK_NE, TASK_PE = (1, 0), (3, 3)  # (Common.Cfg.TaskKind, Common.Cfg.PEKind)


def code_of(table: MappingProxyType, meaning: str) -> int:
    """The register value with `meaning` in one of the tables above."""
    return next(code for code, name in table.items() if name == meaning)


@functools.cache
def field_widths() -> MappingProxyType:
    """Every H13 descriptor field (the shipped map and the inferred ones) -> its bit width."""
    widths = {spec.name: spec.width for spec in generation_layout("h13").fields}
    widths.update({extra.name: extra.width for extra in INFERRED})
    return MappingProxyType(widths)


def field_limit(name: str) -> int:
    """The largest value field `name` holds."""
    return (1 << field_widths()[name]) - 1
