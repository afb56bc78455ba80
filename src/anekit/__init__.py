"""anekit: a toolchain for the Apple Neural Engine."""

from __future__ import annotations

from anekit.errors import (
    AnekitError,
    FormatError,
    InputError,
    ModelError,
    ShapeError,
    TargetError,
    UnsupportedModelError,
)

__version__ = "0.1.0"

__all__ = [
    "AnekitError",
    "FormatError",
    "InputError",
    "ModelError",
    "ShapeError",
    "TargetError",
    "UnsupportedModelError",
    "__version__",
]
