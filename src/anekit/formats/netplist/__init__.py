"""Apple's netplists (the ANE compiler's input): `read(path) -> Graph`, `write(graph, path)`."""

from anekit.formats.netplist.document import Netplist, Network, Unit, parse_document
from anekit.formats.netplist.reader import build_graph, parse, read
from anekit.formats.netplist.writer import dumps, to_netplist, write

__all__ = [
    "Netplist",
    "Network",
    "Unit",
    "build_graph",
    "dumps",
    "parse",
    "parse_document",
    "read",
    "to_netplist",
    "write",
]
