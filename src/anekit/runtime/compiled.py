"""What a CompiledModel gets from code generation: its bundle in memory, saving it, exporting
it to Core ML, and its runnable Program (`CompiledModel` delegates here)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from anekit.codegen.builder import BLOB_MIN_ELEMENTS
from anekit.codegen.bundle import BundleContents, FileData, Progress, build_bundle, write_bundle
from anekit.errors import os_error, path_argument
from anekit.runtime import weight_map
from anekit.runtime.program import Program, from_contents


def bundle_contents(
    compiled: Any, *, weights: str = "fp16", progress: Progress | None = None
) -> BundleContents:
    """Every segment of the compiled model emitted as MIL, with manifest, report and the
    weight map (`anekit.runtime.weight_map`: where each source weight lies)."""
    contents = build_bundle(
        compiled.graph,
        compiled.target,
        compiled.segments,
        report=compiled.report,
        progress=progress,
        weights=weights,
        compressed=compiled.compressed,
    )
    wmap = weight_map.record(compiled.source, compiled.graph, contents.segments, BLOB_MIN_ELEMENTS)
    payload = {**contents.payload, weight_map.WEIGHT_MAP: FileData.of(wmap.to_bytes())}
    return replace(contents, payload=MappingProxyType(payload))


def save(
    compiled: Any,
    path: str | os.PathLike[str],
    *,
    weights: str = "fp16",
    progress: Progress | None = None,
) -> Path:
    """Write the bundle ``path`` (``NAME.anekit``) for the compiled model."""
    path = path_argument(path, "the bundle path")
    if weights == "fp16" and "bundle" in vars(compiled):
        contents = compiled.bundle  # emitted already
    else:
        contents = bundle_contents(compiled, weights=weights, progress=progress)
        if weights == "fp16":
            vars(compiled)["bundle"] = contents  # fills CompiledModel.bundle's cache
    try:
        return write_bundle(contents, path)
    except OSError as exc:
        raise os_error(exc, f"write the bundle '{path}'") from None


def save_mlpackage(compiled: Any, path: str | os.PathLike[str]) -> Path:
    """The compiled model as one Core ML mlprogram (extra ``coreml``)."""
    path = path_argument(path, "the .mlpackage path")
    try:
        return program_of(compiled).save_mlpackage(path)
    except OSError as exc:
        raise os_error(exc, f"write the .mlpackage '{path}'") from None


def program_of(compiled: Any) -> Program:
    """The compiled model's bundle as a runnable Program (built once per model)."""
    return from_contents(compiled.bundle, where=f"compiled model '{compiled.graph.name}'")
