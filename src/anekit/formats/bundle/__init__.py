"""The anekit bundle: manifest schema, canonical JSON, and a reader that treats a bundle as untrusted.

A bundle is a directory ``NAME.anekit/``::

    manifest.json                      this schema (sorted keys, no timestamps)
    report.json                        the compile report
    segments/<i>/model.mil             one MIL program per segment, in execution order
    segments/<i>/weights/weight.bin    its weights (absent when the program has none)

Manifest (``schema_version`` 1)::

    {"format": "anekit-bundle", "schema_version": 1, "generator": "anekit 0.1.0",
     "model": "name", "target": {"name", "engine", "program_version", "opset"},
     "inputs":  [{"name", "dtype", "shape"}],
     "outputs": [{"name", "dtype", "shape", "source"}],
     "segments": [{"index", "device": "ane"|"cpu", "program", "weights": path|null,
                   "function": "main", "nodes": count,
                   "inputs":  [{"value", "mil_name", "dtype", "mil_dtype", "shape", "mil_shape",
                                "source"}],
                   "outputs": [{"value", "mil_name", "dtype", "mil_dtype", "shape", "mil_shape"}],
                   "input_alloc_bytes": int|null, "output_alloc_bytes": int|null}],
     "files": {"relative/path": {"sha256": hex, "size": bytes}}}

A ``source`` is ``{"input": NAME}`` (a model input) or ``{"segment": I, "value": V}`` (output
``V`` of an earlier segment). I/O of a program carries ``shape`` (the value's) and
``mil_shape`` (the program's): padding sits at the end of each axis, the data in the leading
corner, and the runtime adds and strips it. ``dtype`` is the value's type (what callers see),
``mil_dtype`` the program's.

Reading checks everything before anything is used: the schema (clear messages naming the
field), the wiring (sources exist and come earlier), every path (relative, no ``..``, inside
the bundle after resolving symlinks, a regular file), sizes and sha256 digests, and every
``BLOBFILE`` of every program (its path inside the segment's declared weight file, its
record valid for the declared type). Errors are :class:`anekit.errors.FormatError`.
"""

from .model import (
    DEVICES,
    FORMAT,
    IR_DTYPES,
    MANIFEST,
    MIL_DTYPES,
    REPORT,
    SCHEMA_VERSION,
    FileEntry,
    Manifest,
    Port,
    SegmentEntry,
    SegmentIO,
    Source,
    TargetInfo,
    canonical_json,
    sha256_file,
)
from .reader import MODEL_PATH, Bundle, check_blobfiles, not_a_bundle, read_bundle, resolve_inside
from .schema import check_relative, parse_manifest

__all__ = [
    "DEVICES",
    "FORMAT",
    "IR_DTYPES",
    "MANIFEST",
    "MIL_DTYPES",
    "MODEL_PATH",
    "REPORT",
    "SCHEMA_VERSION",
    "Bundle",
    "FileEntry",
    "Manifest",
    "Port",
    "SegmentEntry",
    "SegmentIO",
    "Source",
    "TargetInfo",
    "canonical_json",
    "check_blobfiles",
    "check_relative",
    "parse_manifest",
    "not_a_bundle",
    "read_bundle",
    "resolve_inside",
    "sha256_file",
]
