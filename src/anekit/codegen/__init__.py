"""Code generation: engine graphs to MIL programs (text + weight.bin per segment), bundles, Core ML.

- :func:`anekit.codegen.mil.emit` / :func:`~anekit.codegen.mil.emit_segment`: one MIL program
  per segment in the target's dialect (see :mod:`anekit.codegen.mil` for the rules);
- :func:`anekit.codegen.bundle.build_bundle` and :func:`~anekit.codegen.bundle.write_bundle`:
  the ``NAME.anekit`` directory (manifest, programs, weights, report), written atomically;
- :func:`anekit.codegen.mlpackage.export_mlpackage`: the whole model as one Core ML mlprogram
  (extra ``coreml``; coremltools is imported only there).
"""

from anekit.codegen.bundle import BundleContents, build_bundle, write_bundle
from anekit.codegen.mil import EmittedSegment, SegmentSpec, TensorSpec, emit, emit_segment

__all__ = [
    "BundleContents",
    "EmittedSegment",
    "SegmentSpec",
    "TensorSpec",
    "build_bundle",
    "emit",
    "emit_segment",
    "write_bundle",
]
