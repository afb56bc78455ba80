"""Every IR op declaration; importing this package fills the registry."""

from anekit.ir.ops import conv, elementwise, linalg, norm, reduce, shape  # noqa: F401
