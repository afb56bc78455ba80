"""Datasets from files already on the machine (nothing is downloaded).

`read_idx` reads the IDX format of (Fashion-)MNIST, gzip-compressed or not, as untrusted
input: magic number, element type, rank and every dimension are checked against the
file's length before anything is allocated. `fashion_mnist` reads Debian's
``dataset-fashion-mnist`` package (/usr/share/datasets/fashion-mnist).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from anekit.errors import FormatError, InputError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}  # fmt: skip
MAX_IDX_BYTES = 1 << 31


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"'{path}' is not a regular file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read(MAX_IDX_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise FormatError(f"cannot read ({exc})", where=str(path)) from None
    if len(raw) > MAX_IDX_BYTES:
        raise FormatError("larger than 2 GiB; not an IDX file anekit reads", where=str(path))
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise FormatError("not an IDX file (bad magic number)", where=str(path), offset=0)
    dtype, rank = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    header = 4 + 4 * rank
    if len(raw) < header:
        raise FormatError(f"truncated header for rank {rank}", where=str(path), offset=4)
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank))
    size = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != size:
        raise FormatError(
            f"dimensions {list(dims)} need {size} bytes of data, the file has {len(raw) - header}",
            where=str(path), offset=header,
        )  # fmt: skip
    return (
        np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))
    )


def fashion_mnist(
    directory: str | os.PathLike[str] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """{"train": {"x": [60000, 1, 28, 28] float32 in [0, 1], "target": int64}, "test": ...}."""
    root = Path(directory) if directory is not None else FASHION_MNIST_DIR
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        files = [
            root / f"{prefix}-{kind}-idx{n}-ubyte.gz" for kind, n in (("images", 3), ("labels", 1))
        ]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise InputError(
                f"Fashion-MNIST is not installed (missing {missing[0]})",
                hint="sudo apt-get install dataset-fashion-mnist  (Debian/Ubuntu), or pass "
                "the directory holding the four IDX files",
            )  # fmt: skip
        images, labels = (read_idx(f) for f in files)
        if images.ndim != 3 or labels.shape != images.shape[:1]:
            raise FormatError(f"images {images.shape} and labels {labels.shape} do not match",
                              where=str(root))  # fmt: skip
        out[split] = {"x": (images[:, None].astype(np.float32) / 255.0),
                      "target": labels.astype(np.int64)}  # fmt: skip
    return out


def python_source_text(limit: int = 400_000) -> str:
    """Real text without a download: the Python standard library's own sources (sorted
    .py files of the running interpreter's stdlib directory, up to ``limit`` characters,
    non-ASCII characters replaced by '?')."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(root.glob("*.py")):
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    text = "".join(parts)[:limit]
    return "".join(c if 32 <= ord(c) < 127 or c == "\n" else "?" for c in text)


class CharVocab:
    """Printable ASCII plus newline: 96 symbols; id = position in ``symbols``."""

    symbols = "\n" + "".join(chr(c) for c in range(32, 127))

    def __init__(self) -> None:
        self.index = {c: i for i, c in enumerate(self.symbols)}

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> np.ndarray:
        unknown = self.index["?"]
        return np.array([self.index.get(c, unknown) for c in text], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.symbols[int(i)] for i in ids)


def char_windows(
    ids: np.ndarray, seq: int, count: int, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """``count`` random windows: inputs ids[i:i+seq] and targets ids[i+1:i+seq+1]."""
    starts = rng.integers(0, len(ids) - seq - 1, count)
    x = np.stack([ids[s : s + seq] for s in starts]).astype(np.int32)
    y = np.stack([ids[s + 1 : s + seq + 1] for s in starts]).astype(np.int64)
    return {"ids": x, "target": y}
