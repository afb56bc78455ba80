"""The `.anec` file the Asahi Linux ANE userspace loads, written from an H13 `.hwx`.

eiln/ane's libane (`libane/ane.h` `struct anec`, `ane_model_init`, MIT) reads a packed
header at the start of the file and the program's bytes from offset 0x1000: the task
descriptors and the kernel section, as one block of `size` bytes. The header names the
descriptor size and count, the section sizes, the input and output counts, and per
tile (base register) the buffer size in 0x4000-byte tiles and, for an input or output,
its N, C, H, W and channel and row strides. eiln/anecc (`anecc_compile`, MIT) writes the
same file from a .hwx by scanning its words; anekit writes it from the parsed container.
"""

from __future__ import annotations

import struct

from anekit.errors import FormatError
from anekit.formats import hwx

HEADER_SIZE = 0x1000
TILE_SIZE = 0x4000
TILE_COUNT = 32
DESCRIPTOR_SIZE = 0x274  # the canonical H13 descriptor; zin 9's compact ones have no known form
KERNEL_GRANULE = 16
CMD, INTERMEDIATE, FIRST_OUTPUT = 0, 3, 4  # tile indices (libane `_get_buf_name` order)
_HEADER = struct.Struct(f"<QIIQQII{TILE_COUNT}I{TILE_COUNT * 6}Q")


def _up(value: int, to: int) -> int:
    return -(-value // to) * to


def from_hwx(data: bytes, where: str | None = None) -> bytes:
    """The .anec bytes of an H13 program (FormatError where the program has no .anec form)."""
    program = hwx.parse(data, where)
    if program.generation != "h13":
        raise FormatError("an .anec holds an H13 program", where=where)
    text = program.section("__TEXT", "__text")
    kernel = program.section("__TEXT", "__const")
    if text is None or kernel is None or not kernel.size:
        raise FormatError("an .anec needs the task (__text) and kernel (__const) sections",
                          where=where)  # fmt: skip
    descriptors = program.task_descriptors
    if any(d.size != DESCRIPTOR_SIZE for d in descriptors):
        raise FormatError(
            f"the program's descriptors are not the canonical {DESCRIPTOR_SIZE:#x} bytes "
            "(a zin 9 compact program): the Asahi loader takes canonical ones",
            where=where,
        )
    size = _up(text.size, KERNEL_GRANULE) + kernel.size
    if kernel.offset != text.offset + _up(text.size, KERNEL_GRANULE):
        raise FormatError("the kernel section does not follow the task section", where=where)
    tiles = [0] * TILE_COUNT
    nchw = [[0] * 6 for _ in range(TILE_COUNT)]
    tiles[CMD] = _up(size, TILE_SIZE) // TILE_SIZE
    windows = [s for s in program.segments if s.name in ("__FVMLIB", "__DATA")]

    def window_tiles(address: int) -> int:
        for segment in windows:
            if segment.vmaddr <= address < segment.vmaddr + segment.vmsize:
                return segment.vmsize // TILE_SIZE
        raise FormatError(f"no window holds address {address:#x}", where=where)

    scratch = [s for s in windows if s.name == "__DATA"]
    if len(scratch) > 1:
        raise FormatError("an .anec holds at most one intermediate window", where=where)
    if scratch:
        tiles[INTERMEDIATE] = scratch[0].vmsize // TILE_SIZE
    ordered = list(program.outputs) + list(program.inputs)  # outputs first, as the bases
    if FIRST_OUTPUT + len(ordered) > TILE_COUNT:
        raise FormatError(f"more than {TILE_COUNT - FIRST_OUTPUT} inputs and outputs", where=where)
    for k, tensor in enumerate(ordered):
        n, c, h, w = tensor.shape
        if tensor.address is None or tensor.strides[1] is None or tensor.strides[2] is None:
            raise FormatError(f"tensor '{tensor.name}' declares no window", where=where)
        tiles[FIRST_OUTPUT + k] = window_tiles(tensor.address)
        nchw[FIRST_OUTPUT + k] = [n, c, h, w, tensor.strides[1], tensor.strides[2]]
    header = _HEADER.pack(size, DESCRIPTOR_SIZE, len(descriptors), text.size, kernel.size,
                          len(program.inputs), len(program.outputs), *tiles,
                          *(v for row in nchw for v in row))  # fmt: skip
    return header + bytes(HEADER_SIZE - len(header)) + data[text.offset : text.offset + size]
