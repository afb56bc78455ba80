"""The engine's virtual address space for one program: its sections and I/O windows.

Constant sections (task descriptors, weight tiles) are the file's own bytes, read-only.
`__FVMLIB` windows (inputs and outputs) have no file bytes: each is a zero-filled buffer of
the window's size. Every access is bounds-checked against one region, so a descriptor
that points outside the program is a FormatError, never a stray read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anekit.errors import FormatError
from anekit.formats.hwx import HwxFile

# the emulator refuses programs whose I/O windows together exceed this (bounded memory)
MAX_WINDOW_BYTES = 512 << 20


@dataclass
class Region:
    name: str
    address: int
    data: np.ndarray  # uint8, the region's bytes
    writable: bool


class AddressSpace:
    """Regions of one program, found by engine virtual address."""

    def __init__(self, hwx: HwxFile, raw: bytes, where: str | None):
        self.where = where
        self.regions: list[Region] = []
        total = 0
        for section in hwx.sections:
            if section.size == 0:
                continue
            if section.has_file_data:
                data = np.frombuffer(raw, np.uint8, section.size, section.offset)
                self.regions.append(Region(section.full_name, section.addr, data, False))
            else:
                total += section.size
                if total > MAX_WINDOW_BYTES:
                    raise FormatError(
                        f"the program's I/O windows need more than {MAX_WINDOW_BYTES >> 20} MiB "
                        f"(section {section.full_name} is 0x{section.size:x} bytes)",
                        where=where,
                    )
                data = np.zeros(section.size, np.uint8)
                self.regions.append(Region(section.full_name, section.addr, data, True))

    def region(
        self, address: int, size: int, what: str, *, write: bool = False
    ) -> tuple[Region, int]:
        """The region holding [address, address+size) and the offset of address inside it."""
        for region in self.regions:
            start = address - region.address
            if 0 <= start and start + size <= region.data.size:
                if write and not region.writable:
                    raise FormatError(
                        f"{what} writes to read-only section {region.name} at 0x{address:x}",
                        where=self.where,
                    )
                return region, start
        raise FormatError(
            f"{what} covers [0x{address:x}, 0x{address + size:x}), which lies inside no section "
            "or I/O window of the program",
            where=self.where,
        )

    def read(self, address: int, size: int, what: str) -> np.ndarray:
        region, start = self.region(address, size, what)
        return region.data[start : start + size]


@dataclass(frozen=True)
class Window:
    """A strided fp16 tensor [groups, depth, channels, rows, width] in the address space."""

    address: int
    channels: int
    height: int
    width: int
    row_stride: int
    plane_stride: int

    @property
    def extent(self) -> int:
        """Bytes from the first element to one past the last."""
        if self.channels == 0 or self.height == 0 or self.width == 0:
            return 0
        return (
            (self.channels - 1) * self.plane_stride
            + (self.height - 1) * self.row_stride
            + 2 * self.width
        )


def _strided(space: AddressSpace, window: Window, what: str, write: bool) -> np.ndarray:
    region, start = space.region(window.address, window.extent, what, write=write)
    if start % 2 or window.row_stride % 2 or window.plane_stride % 2:
        raise FormatError(f"{what} is not 2-byte aligned", where=space.where)
    return fp16_view(region.data, start, window, write)


def fp16_view(data: np.ndarray, start: int, window: Window, write: bool) -> np.ndarray:
    """[C, H, W] fp16 elements of `data` (bytes) from `start` with the window's strides
    (the caller has checked that they lie inside `data` and are 2-byte aligned)."""
    if window.extent == 0:
        return np.zeros((window.channels, window.height, window.width), np.float16)
    halves = data[start : start + window.extent + (window.extent % 2)].view(np.float16)
    return np.lib.stride_tricks.as_strided(
        halves,
        shape=(window.channels, window.height, window.width),
        strides=(window.plane_stride, window.row_stride, 2),
        writeable=write,
    )


class L2Memory:
    """The engine's 2 MiB on-chip buffer: every pass stages its sources and its result here."""

    def __init__(self, size: int):
        self.data = np.zeros(size, np.uint8)

    def _view(self, buffer, write: bool) -> np.ndarray:
        # buffer: an L2Buffer whose bounds decode_pass has checked against the L2 size
        window = Window(0, buffer.channels, buffer.height, buffer.width, buffer.row_stride,
                        buffer.channel_stride)  # fmt: skip
        return fp16_view(self.data, buffer.start, window, write)

    def store(self, buffer, values: np.ndarray) -> None:
        self._view(buffer, True)[...] = values

    def load(self, buffer) -> np.ndarray:
        return np.array(self._view(buffer, False))


def load_tensor(space: AddressSpace, window: Window, what: str) -> np.ndarray:
    """Copy a [C, H, W] fp16 tensor out of the address space."""
    return np.array(_strided(space, window, what, write=False))


def store_tensor(space: AddressSpace, window: Window, values: np.ndarray, what: str) -> None:
    """Write a [C, H, W] fp16 tensor into a writable window."""
    _strided(space, window, what, write=True)[...] = values.astype(np.float16)
