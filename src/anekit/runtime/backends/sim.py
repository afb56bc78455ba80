"""``sim``: each segment's MIL on the fp16 simulator (`anekit.simulator`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.runtime.backends import Backend, Capabilities, SegmentRunner, SegmentSource


class SimRunner:
    """A segment loaded into the simulator; outputs in fp32 storage (fp16 values)."""

    def __init__(self, program: mil.MilProgram, base_dir, where: str, weights=None):
        from anekit.simulator.program import SimProgram
        from anekit.simulator.values import WeightBytes

        # without a directory the weight file's bytes are decoded in place (no inlined copy)
        blobs = None if base_dir is not None else WeightBytes(weights)
        self.program = SimProgram(program, base_dir, where=where, blobs=blobs)

    def run(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.program.run(args, fp32_outputs=True)

    def run_stored(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``run`` on inputs already in storage form (fp16 values as float32): a session's
        resident values go in without another rounding pass."""
        return self.program.run_stored(args)


def inlined(segment: SegmentSource) -> mil.MilProgram:
    """The segment's program with its weights inlined from its weight file."""
    from anekit.runtime.widen import inline_blobs

    reader = None if segment.weights is None else BlobReader(segment.weights)
    try:
        return inline_blobs(segment.program, reader)
    finally:
        if reader is not None:
            reader.close()


class SimBackend(Backend):
    name = "sim"
    summary = "compiled MIL on the fp16 simulator"
    runs_segments = True
    capabilities = Capabilities(
        state=True, resident_state=True, stored_runs=True, weight_reload=True
    )

    def prepare(self, segment: SegmentSource) -> SegmentRunner:
        if segment.base_dir is not None:
            # on disk: the simulator resolves BLOBFILE inside the segment's own directory
            return SimRunner(segment.program, segment.base_dir, segment.where)
        return SimRunner(segment.program, None, segment.where, segment.weights)


BACKEND = SimBackend()
