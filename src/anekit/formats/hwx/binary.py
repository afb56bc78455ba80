"""A bounds-checked little-endian reader over the bytes of one untrusted file."""

from __future__ import annotations

import struct

from anekit.errors import FormatError

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class ByteView:
    """Read integers, byte runs and strings at absolute offsets, never past the end.

    Every failed read raises `FormatError` naming the offset and what was expected,
    so callers never see IndexError or struct.error.
    """

    def __init__(self, data: bytes, where: str | None = None):
        self._bytes = bytes(data)
        self._data = memoryview(self._bytes)
        self.where = where

    def __len__(self) -> int:
        return len(self._data)

    def error(self, message: str, offset: int | None = None) -> FormatError:
        """A FormatError about this file at `offset`."""
        return FormatError(message, where=self.where, offset=offset)

    def require(self, offset: int, size: int, what: str) -> None:
        """Check that `size` bytes at `offset` lie inside the file."""
        if offset < 0 or size < 0 or offset + size > len(self._data):
            raise self.error(
                f"expected {what} ({size} bytes), but the file has {len(self._data)} bytes",
                offset,
            )

    def u8(self, offset: int, what: str) -> int:
        self.require(offset, 1, what)
        return self._data[offset]

    def u16(self, offset: int, what: str) -> int:
        self.require(offset, 2, what)
        return _U16.unpack_from(self._data, offset)[0]

    def u32(self, offset: int, what: str) -> int:
        self.require(offset, 4, what)
        return _U32.unpack_from(self._data, offset)[0]

    def u64(self, offset: int, what: str) -> int:
        self.require(offset, 8, what)
        return _U64.unpack_from(self._data, offset)[0]

    def unpack(self, fmt: struct.Struct, offset: int, what: str) -> tuple[int, ...]:
        self.require(offset, fmt.size, what)
        return fmt.unpack_from(self._data, offset)

    def bytes(self, offset: int, size: int, what: str) -> bytes:
        self.require(offset, size, what)
        return bytes(self._data[offset : offset + size])

    def view(self, offset: int, size: int, what: str) -> memoryview:
        """A zero-copy window (for large runs such as weight sections)."""
        self.require(offset, size, what)
        return self._data[offset : offset + size]

    def words(self, offset: int, count: int, what: str) -> tuple[int, ...]:
        """`count` little-endian uint32 words (count already checked by `require`)."""
        self.require(offset, 4 * count, what)
        return struct.unpack_from(f"<{count}I", self._data, offset)

    def fixed_name(self, offset: int, size: int, what: str) -> str:
        """A NUL-padded ASCII name of at most `size` bytes (segment and section names)."""
        raw = self.bytes(offset, size, what).split(b"\0", 1)[0]
        return decode_text(self, raw, offset, what)

    def cstring(self, offset: int, end: int, what: str) -> str:
        """A NUL-terminated UTF-8 string starting at `offset` that must end before `end`."""
        end = min(end, len(self._data))
        if offset < 0 or offset >= end:
            raise self.error(f"expected {what} inside bytes [.., 0x{end:x})", offset)
        stop = self._bytes.find(b"\0", offset, end)
        if stop < 0:
            raise self.error(f"expected a NUL-terminated {what} before offset 0x{end:x}", offset)
        return decode_text(self, self._bytes[offset:stop], offset, what)


def decode_text(view: ByteView, raw: bytes, offset: int, what: str) -> str:
    """Decode UTF-8 text from the file, turning a bad byte into a FormatError."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise view.error(
            f"expected {what} in UTF-8, found byte 0x{raw[exc.start]:02x}", offset + exc.start
        ) from None
