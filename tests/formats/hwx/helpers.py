"""Shared helpers for the .hwx reader tests: the real Apple fixtures and byte patching."""

from __future__ import annotations

import struct

from tests.fixtures import FIXTURES

HWX_DIR = FIXTURES / "hwx"
HWX_FILES = sorted(HWX_DIR.glob("*.hwx"))
HWX_IDS = [path.stem for path in HWX_FILES]
# zin 9.x writes compact descriptors (0x1f8 bytes, the KernelDMASrc block as two streams);
# the others use the canonical 0x274-byte layout tinygrad's map gives byte offsets into
COMPACT = {"h13_mul_zin9"}
CANONICAL_FILES = [path for path in HWX_FILES if path.stem not in COMPACT]
CANONICAL_IDS = [path.stem for path in CANONICAL_FILES]


def fixture_bytes(name: str) -> bytes:
    return (HWX_DIR / f"{name}.hwx").read_bytes()


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    """A copy of `data` with one little-endian field at `offset` replaced."""
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, offset, value)
    return bytes(out)
