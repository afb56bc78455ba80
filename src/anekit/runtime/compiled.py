"""What a CompiledModel gets from code generation: its bundle in memory, saving it, exporting
it to Core ML, and its runnable Program (`CompiledModel` delegates here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anekit.codegen.bundle import BundleContents, Progress, build_bundle, write_bundle
from anekit.runtime.program import Program, from_contents


def bundle_contents(
    compiled: Any, *, weights: str = "fp16", progress: Progress | None = None
) -> BundleContents:
    """Every segment of the compiled model emitted as MIL, with manifest and report."""
    return build_bundle(
        compiled.graph,
        compiled.target,
        compiled.segments,
        report=compiled.report,
        progress=progress,
        weights=weights,
        compressed=compiled.compressed,
    )


def save(
    compiled: Any,
    path: str | os.PathLike[str],
    *,
    weights: str = "fp16",
    progress: Progress | None = None,
) -> Path:
    """Write the bundle ``path`` (``NAME.anekit``) for the compiled model."""
    if weights == "fp16" and "bundle" in vars(compiled):
        contents = compiled.bundle  # emitted already
    else:
        contents = bundle_contents(compiled, weights=weights, progress=progress)
        if weights == "fp16":
            vars(compiled)["bundle"] = contents  # fills CompiledModel.bundle's cache
    return write_bundle(contents, path)


def save_mlpackage(compiled: Any, path: str | os.PathLike[str]) -> Path:
    """The compiled model as one Core ML mlprogram (extra ``coreml``)."""
    return program_of(compiled).save_mlpackage(path)


def program_of(compiled: Any) -> Program:
    """The compiled model's bundle as a runnable Program (built once per model)."""
    return from_contents(compiled.bundle, where=f"compiled model '{compiled.graph.name}'")
