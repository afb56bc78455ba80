"""The engine emulator under fuzz: mutated Apple .hwx programs decoded *and run*.

A case passes when the program runs or raises FormatError; anything else (an exception,
a case slower than the engine's limit) is a finding. Besides the reader's structural
fields, every register word of every task descriptor is a field the mutations corrupt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from format_fuzzer.binary_targets import _hwx_boundaries, _hwx_fields, hwx_fixtures
from format_fuzzer.engine import Field, FuzzTarget


def _run(data: bytes) -> Any:
    from anekit.emulator import EngineProgram

    program = EngineProgram(data)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}
    return program.run(feeds)


def _fields(data: bytes) -> list[Field]:
    from anekit.formats import hwx

    f = hwx.read(data)
    fields = _hwx_fields(data)
    text = f.section("__TEXT", "__text")
    if text is not None:
        for descriptor in f.task_descriptors:
            for stream in descriptor.streams:
                first = text.offset + stream.offset + 4
                fields += [
                    Field(first + 4 * i, 4, f"register 0x{stream.address + 4 * i:x}")
                    for i in range(len(stream.words))
                ]
    return fields


def engine_target() -> FuzzTarget:
    return FuzzTarget(
        name="hwx.engine",
        fixtures=hwx_fixtures,
        decode=_run,
        fields=_fields,
        boundaries=_hwx_boundaries,
    )
