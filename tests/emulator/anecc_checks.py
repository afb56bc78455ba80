"""The container checks of the Asahi Linux converter, eiln/anecc, reimplemented for tests.

anecc (MIT, by Eileen Yoon; not on PyPI) turns a .hwx into the `.anec` the Asahi ANE
driver's userspace (eiln/ane) loads. Its `anecc_convert` and `_anecc_get_nchw`
(anecc/anecc/__init__.py, commit aa7b14f455e4) locate everything by scanning the file as
little-endian 32-bit words. Every assertion they make is repeated here, in order, so a
.hwx that passes `convert` is one anecc converts:

1. the file is a whole number of words;
2. the second word equal to the base address 0x30000000 starts the task section's record
   (its size two words later, at least one descriptor of 0x274 bytes);
3. a record at base + round_up(task size, 16) gives the kernel section (size non-zero, a
   multiple of 16);
4. the first word 0x9c (the descriptor's NextSize) sits two words after a word equal to the
   base address, and the word after it (the descriptor count) is non-zero and < 0xffff;
5. buffers follow at base + round_up(task + kernel, 0x4000), each a record of a size that
   is a non-zero multiple of 0x4000 whose words 8..11 say what it is: (3,3,1,4) an
   intermediate, (1,1,1,6) an input, (2,2,1,6) an output; at least one input and output,
   at most one intermediate;
6. exactly `count` words equal the descriptor magic 0xf401f800, and the task size is the
   span from the first to the last plus one descriptor;
7. the printable strings of at least 50 characters ending in ':5' and containing ':t' are
   the tensors' symbol strings (`name:t...:...;N...n:...c=s<plane>;:...h=s<row>;:...w:5`),
   one per input and output, whose plane and row strides are round_up(2W, 64) and
   round_up(row * H, 64), and whose N*C*plane stride rounds up to the buffer's size.
"""

from __future__ import annotations

import re
import string
import struct
from dataclasses import dataclass

BASE_ADDR = 0x30000000
TD_SIZE = 0x274
TD_MAGIC = 0xF401F800
DMA_GRANULE = 16
TILE = 0x4000
NEXT_SIZE = 0x9C
KINDS = {(3, 3, 1, 4): "intermediate", (1, 1, 1, 6): "input", (2, 2, 1, 6): "output"}


class AneccRefusal(AssertionError):
    """anecc would stop on this file (the message names its check)."""


@dataclass
class AneccView:
    task_size: int
    kernel_size: int
    descriptors: int
    buffers: list[tuple[str, int]]
    tensors: list[tuple[str, tuple[int, int, int, int]]]


def _up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise AneccRefusal(message)


def _strings(data: bytes, least: int = 50) -> list[str]:
    """Runs of printable characters of at least `least` (anecc reads the file as text)."""
    text = data.decode("latin-1")
    printable = set(string.printable)
    runs, current = [], []
    for ch in text:
        if ch in printable:
            current.append(ch)
            continue
        if len(current) >= least:
            runs.append("".join(current))
        current = []
    if len(current) >= least:
        runs.append("".join(current))
    return runs


def _tensors(data: bytes) -> list[tuple[str, tuple[int, int, int, int], int, int]]:
    found = []
    for line in _strings(data):
        if not re.search(":t.*:5$", line):
            continue
        axes = line.split(":")[1:-1]
        _need(len(axes) == 4, f"symbol string {line!r} has {len(axes)} axes, not 4")
        for axis, letter in zip(axes, "nchw", strict=True):
            _need(axis.endswith(letter), f"symbol string {line!r}: axis {axis!r} lacks '{letter}'")
        n, c, h, w = (int(axis.split(";")[2]) for axis in axes)
        row = _up(2 * w, 64)
        plane = _up(row * h, 64)
        _need(plane == int(axes[1].split("=s", 1)[1][:-1]),
              f"symbol string {line!r}: channel stride is not {plane}")  # fmt: skip
        _need(row == int(axes[2].split("=s", 1)[1][:-1]),
              f"symbol string {line!r}: row stride is not {row}")  # fmt: skip
        found.append((line.split(":t", 1)[0], (n, c, h, w), plane, row))
    _need(len(found) >= 2, f"{len(found)} tensor symbol strings (anecc needs at least 2)")
    return found


def convert(data: bytes) -> AneccView:
    """What anecc learns from the file; AneccRefusal where one of its checks fails."""
    _need(len(data) % 4 == 0, "the file is not a whole number of 32-bit words")
    words = struct.unpack(f"<{len(data) // 4}I", data)

    def index(value: int, after: int = -1) -> int:
        for i in range(after + 1, len(words)):
            if words[i] == value:
                return i
        raise AneccRefusal(f"no word 0x{value:x} (after word {after})")

    first = index(BASE_ADDR)
    at = index(BASE_ADDR, first)
    task_size = words[at + 2]
    _need(task_size >= TD_SIZE, f"task section size 0x{task_size:x} < 0x{TD_SIZE:x}")
    at = index(BASE_ADDR + _up(task_size, DMA_GRANULE))
    kernel_size = words[at + 2]
    _need(kernel_size > 0 and kernel_size % DMA_GRANULE == 0,
          f"kernel section size 0x{kernel_size:x} is zero or not a multiple of 16")  # fmt: skip
    size = _up(task_size, DMA_GRANULE) + kernel_size
    at = index(NEXT_SIZE)
    _need(at >= 2 and words[at - 2] == BASE_ADDR,
          "the first word 0x9c does not follow the base address by two words")  # fmt: skip
    count = words[at + 1]
    _need(0 < count < 0xFFFF, f"descriptor count {count}")
    address = BASE_ADDR + _up(size, TILE)
    buffers = []
    for _ in range(32):
        try:
            at = index(address)
        except AneccRefusal:
            break
        buffer_size = words[at + 2]
        _need(buffer_size > 0 and buffer_size % TILE == 0 and buffer_size < 0x10000 * TILE,
              f"buffer at 0x{address:x} has size 0x{buffer_size:x}")  # fmt: skip
        kind = KINDS.get(tuple(words[at + 8 : at + 12]))
        _need(kind is not None, f"buffer at 0x{address:x} has kind words "
              f"{tuple(words[at + 8 : at + 12])}")  # fmt: skip
        buffers.append((kind, buffer_size))
        address += buffer_size
    kinds = [k for k, _ in buffers]
    _need(kinds.count("input") > 0 and kinds.count("output") > 0 and
          kinds.count("intermediate") <= 1, f"buffers {kinds}")  # fmt: skip
    magics = [i for i, w in enumerate(words) if w == TD_MAGIC]
    _need(len(magics) == count, f"{len(magics)} descriptor magics for {count} descriptors")
    _need(task_size - (max(magics) - min(magics)) * 4 == TD_SIZE,
          "the task size is not the descriptors' span")  # fmt: skip
    tensors = _tensors(data)
    sources = [s for k, s in buffers if k == "input"]
    results = [s for k, s in buffers if k == "output"]
    _need(len(tensors) == len(sources) + len(results),
          f"{len(tensors)} tensor strings for {len(sources)} inputs and {len(results)} outputs")  # fmt: skip
    for order in (tensors, tensors[len(results) :] + tensors[: len(results)]):
        sizes = [_up(n * c * plane, TILE) for _, (n, c, _h, _w), plane, _ in order]
        if sizes == sources + results:
            return AneccView(task_size, kernel_size, count, buffers,
                             [(name, shape) for name, shape, _, _ in order])  # fmt: skip
    raise AneccRefusal("the tensor strings' sizes do not match the buffers")


def compile_anec(data: bytes) -> bytes:
    """The .anec anecc writes for `data` (its `anecc_compile` on what `anecc_convert`
    found): the libane header, then the task and kernel sections from the page holding
    the first descriptor magic."""
    view = convert(data)
    words = struct.unpack(f"<{len(data) // 4}I", data)
    start = min(i for i, w in enumerate(words) if w == TD_MAGIC) * 4 // 0x1000 * 0x1000
    size = _up(view.task_size, DMA_GRANULE) + view.kernel_size
    tiles = [0] * 32
    nchw = [[0] * 6 for _ in range(32)]
    tiles[0] = _up(size, TILE) // TILE
    sizes = {kind: [s for k, s in view.buffers if k == kind] for kind in KINDS.values()}
    for n, s in enumerate(sizes["intermediate"]):
        tiles[3 + n] = s // TILE
    outputs, inputs = len(sizes["output"]), len(sizes["input"])
    for n, s in enumerate(sizes["output"]):
        tiles[4 + n] = s // TILE
    for n, s in enumerate(sizes["input"]):
        tiles[4 + outputs + n] = s // TILE
    for k, (_, (n, c, h, w)) in enumerate(view.tensors):  # inputs first, then outputs
        row = _up(2 * w, 64)
        slot = 4 + outputs + k if k < inputs else 4 + (k - inputs)
        nchw[slot] = [n, c, h, w, _up(row * h, 64), row]
    header = struct.pack(f"<QIIQQII32I{32 * 6}Q", size, TD_SIZE, view.descriptors,
                         view.task_size, view.kernel_size, inputs, outputs, *tiles,
                         *(v for r in nchw for v in r))  # fmt: skip
    return header + bytes(0x1000 - len(header)) + data[start : start + size]
