"""Field-by-field comparison of two .hwx programs' task descriptors (golden tests)."""

from __future__ import annotations

from dataclasses import dataclass

from anekit.formats.hwx.model import HwxFile


@dataclass(frozen=True)
class FieldDifference:
    descriptor: int
    field: str
    expected: int | None  # None: that descriptor is missing on this side
    actual: int | None


@dataclass(frozen=True)
class Comparison:
    total: int  # register fields compared (the map's fields of every descriptor pair)
    equal: int
    differences: tuple[FieldDifference, ...]

    @property
    def fraction(self) -> float:
        return self.equal / self.total if self.total else 1.0


def compare_fields(expected: HwxFile, actual: HwxFile) -> Comparison:
    """Every register-map field of descriptor i in `expected` against descriptor i in `actual`."""
    total = equal = 0
    differences = []
    count = max(len(expected.task_descriptors), len(actual.task_descriptors))
    for index in range(count):
        left = (
            expected.task_descriptors[index].fields
            if index < len(expected.task_descriptors)
            else {}
        )
        right = (
            actual.task_descriptors[index].fields if index < len(actual.task_descriptors) else {}
        )
        for name in dict.fromkeys([*left, *right]):
            total += 1
            a, b = left.get(name), right.get(name)
            if a == b:
                equal += 1
            else:
                differences.append(FieldDifference(index, name, a, b))
    return Comparison(total, equal, tuple(differences))
