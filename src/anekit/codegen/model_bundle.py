"""A compiled model's bundle: emitted in memory (MIL per segment, weights, manifest, report,
weight map) and written to disk. `CompiledModel.bundle` and `.save` delegate here."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from anekit.codegen import weight_map
from anekit.codegen.builder import BLOB_MIN_ELEMENTS
from anekit.codegen.bundle import BundleContents, FileData, Progress, build_bundle, write_bundle
from anekit.errors import os_error, path_argument


def bundle_contents(
    compiled: Any, *, weights: str = "fp16", progress: Progress | None = None
) -> BundleContents:
    """Every segment of the compiled model emitted as MIL, with manifest, report and the
    weight map (`anekit.codegen.weight_map`: where each source weight lies)."""
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
