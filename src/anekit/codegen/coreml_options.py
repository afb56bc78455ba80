"""What a Core ML package says about itself beyond the program: I/O types, image inputs,
enumerated input shapes, classifier labels, metadata, compute units and deployment target.
Checked here, before coremltools is imported; `anekit.codegen.mlpackage` applies them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral

from anekit.errors import AnekitError

COLOR_LAYOUTS = ("RGB", "BGR", "G", "G_FLOAT16")  # coremltools' ct.colorlayout names
COMPUTE_UNITS = ("all", "cpu_only", "cpu_and_gpu", "cpu_and_ne")
IO_DTYPES = ("fp32", "fp16")
_TARGET = re.compile(r"^(iOS|macOS|watchOS|tvOS)(\d+)$")
MAX_DIMENSION = 2**31 - 1  # MIL shapes are int32


@dataclass(frozen=True)
class ImageInput:
    """An input Core ML takes as an image: ``pixel * scale + bias`` feeds the model (bias per
    channel in the layout's order, or one value for grayscale)."""

    color_layout: str = "RGB"
    scale: float = 1.0
    bias: Sequence[float] = (0.0,)

    def __post_init__(self) -> None:
        if self.color_layout not in COLOR_LAYOUTS:
            raise AnekitError(f"colour layout {self.color_layout!r} is not one of "
                              f"{', '.join(COLOR_LAYOUTS)}")  # fmt: skip
        channels = 1 if self.color_layout.startswith("G") else 3
        if len(self.bias) not in (1, channels):
            raise AnekitError(f"an image bias has 1 or {channels} values for {self.color_layout}, "
                              f"not {len(self.bias)}")  # fmt: skip

    @property
    def channels(self) -> int:
        return 1 if self.color_layout.startswith("G") else 3

    def biases(self) -> list[float]:
        return [float(b) for b in self.bias] * (self.channels if len(self.bias) == 1 else 1)


@dataclass(frozen=True)
class CoreMLOptions:
    """``io_dtype``: the type of float inputs and outputs (``fp16`` is the engine's own);
    ``images``: inputs taken as images; ``enumerated_shapes``: the shapes an input takes
    (input name -> shapes, the first the default; the model is compiled at each, see
    `anekit.codegen.coreml_shapes`); ``class_labels``: make the model a classifier over
    ``classifier_output`` (default: its only float output); metadata; ``compute_units``: the
    load-time choice Core ML is asked for (kept in the package's metadata); and the minimum
    ``deployment_target`` (default: the one the chip's MIL opset needs)."""

    io_dtype: str = "fp32"
    images: Mapping[str, ImageInput] = field(default_factory=dict)
    enumerated_shapes: Mapping[str, Sequence[Sequence[int]]] = field(default_factory=dict)
    class_labels: Sequence[str | int] | None = None
    classifier_output: str | None = None
    author: str | None = None
    license: str | None = None
    description: str | None = None
    version: str | None = None
    compute_units: str = "all"
    deployment_target: str | None = None

    def __post_init__(self) -> None:
        if self.io_dtype not in IO_DTYPES:
            raise AnekitError(f"io_dtype {self.io_dtype!r} is not one of {', '.join(IO_DTYPES)}")
        if self.compute_units not in COMPUTE_UNITS:
            raise AnekitError(f"compute units {self.compute_units!r} are not one of "
                              f"{', '.join(COMPUTE_UNITS)}")  # fmt: skip
        if self.deployment_target is not None and not _TARGET.match(self.deployment_target):
            raise AnekitError(f"deployment target {self.deployment_target!r} is not a platform "
                              "and version", hint="e.g. iOS17 or macOS14")  # fmt: skip
        object.__setattr__(self, "enumerated_shapes", _checked_shapes(self.enumerated_shapes))
        if self.class_labels is not None:
            labels = list(self.class_labels)
            if not labels or len(set(map(str, labels))) != len(labels):
                raise AnekitError("class labels must be a non-empty list of distinct labels")
            if len({type(label) for label in labels}) != 1:
                raise AnekitError("class labels are all strings or all integers")


def given_options(options: CoreMLOptions | None, fields: Mapping[str, object]) -> CoreMLOptions:
    """``options``, or one made of its fields given as keywords (not both)."""
    if options is not None and fields:
        raise AnekitError("give options= or its fields as keywords, not both")
    return options or CoreMLOptions(**fields)  # type: ignore[arg-type]


def _checked_shapes(given: object) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each input's shapes as tuples: at least one, whole positive sizes, one rank, distinct."""
    if not isinstance(given, Mapping):
        raise AnekitError("enumerated_shapes maps input names to lists of shapes",
                          hint="e.g. enumerated_shapes={'image': [(1, 3, 224, 224), (1, 3, 320, 320)]}")  # fmt: skip
    checked = {}
    for name, shapes in given.items():
        if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence) or not shapes:
            raise AnekitError(f"enumerated shapes of '{name}': give a non-empty list of shapes")
        rows = []
        for shape in shapes:
            dims = list(shape) if isinstance(shape, Sequence) and not isinstance(shape, str) else None
            if not dims or not all(isinstance(d, Integral) and not isinstance(d, bool)
                                   and 0 < d <= MAX_DIMENSION for d in dims):  # fmt: skip
                raise AnekitError(f"enumerated shape {shape!r} of '{name}' is not a list of "
                                  "whole positive sizes")  # fmt: skip
            rows.append(tuple(int(d) for d in dims))
        if len({len(r) for r in rows}) != 1:
            raise AnekitError(f"the enumerated shapes of '{name}' have different ranks: {rows}")
        if len(set(rows)) != len(rows):
            raise AnekitError(f"the enumerated shapes of '{name}' list a shape twice: {rows}")
        checked[str(name)] = tuple(rows)
    return checked


def read_class_labels(spec: str) -> list[str]:
    """``--class-labels``: a file with one label per line, or labels separated by commas."""
    from pathlib import Path

    from anekit.files import read_file

    path = Path(spec)
    if path.is_file():
        text = read_file(path, "class labels file", max_bytes=16 << 20).decode("utf-8")
        return [line.strip() for line in text.splitlines() if line.strip()]
    return [label.strip() for label in spec.split(",") if label.strip()]
