"""Reader of Apple's .hwx containers (Mach-O shape, magic 0xbeefface): `read(path_or_bytes) -> HwxFile`."""

from anekit.formats.hwx.banner import Banner, BuildModule
from anekit.formats.hwx.container import (
    MAGIC,
    Header,
    HwxSegment,
    IoBuffer,
    LoadCommand,
    Section,
    ThreadState,
)
from anekit.formats.hwx.descriptors import Stream, TaskDescriptor
from anekit.formats.hwx.model import HwxFile
from anekit.formats.hwx.reader import parse, read
from anekit.formats.hwx.relocations import Relocation
from anekit.formats.hwx.symbols import CatalogType, Symbol, Tensor, TensorAxis, WeightTile

__all__ = [
    "MAGIC",
    "Banner",
    "BuildModule",
    "CatalogType",
    "Header",
    "HwxFile",
    "IoBuffer",
    "LoadCommand",
    "Relocation",
    "Section",
    "HwxSegment",
    "Stream",
    "Symbol",
    "TaskDescriptor",
    "Tensor",
    "TensorAxis",
    "ThreadState",
    "WeightTile",
    "parse",
    "read",
]
