"""``ane``: engine segments on the Apple Neural Engine through e5rt (`anekit.runtime.e5rt`).

Written to e5rt-reference's documented interface and not yet run on Apple hardware. CPU segments
run on the simulator (they are fp32 CPU programs). Each engine segment is compiled in this
process (a compiled program cannot move to another process) and holds one of the process's
128 program slots until released (`Program.release`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anekit.formats.mil import print_program
from anekit.runtime import e5rt
from anekit.runtime.backends import Backend, Capabilities, SegmentRunner, SegmentSource
from anekit.runtime.backends.sim import BACKEND as SIM
from anekit.runtime.binding import check_engine_segment, min_surface_bytes

_cache_dir: Path | None = None


def compiler_cache() -> Path:
    """One cache bundle location per process (aned keeps signed programs per process)."""
    global _cache_dir
    if _cache_dir is None:
        _cache_dir = Path(tempfile.mkdtemp(prefix="anekit-e5rt-cache-"))
    return _cache_dir


class AneRunner(e5rt.E5Program):
    """An engine segment compiled through e5rt; a staged copy of an in-memory program is
    removed on release."""

    def __init__(self, segment: SegmentSource, surface: int):
        self._staged: Path | None = None
        if segment.base_dir is not None:
            mil_path = segment.base_dir / Path(segment.entry.program).name
        else:
            weights = segment.weights
            if isinstance(weights, Path):
                data = weights.read_bytes()
            else:  # bytes, a chunked weight file (joined for staging) or None
                data = None if weights is None else bytes(weights)
            text = print_program(segment.program, legacy_scalars=segment.program.version == "1.0")
            self._staged = e5rt.stage(text, data)
            mil_path = self._staged / "model.mil"
        try:
            super().__init__(mil_path, segment.entry.inputs, segment.entry.outputs, surface,
                             compiler_cache())  # fmt: skip
        except BaseException:
            self._remove_staged()
            raise

    def run_stored(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``run``: values already in storage form are written to the surfaces as they are."""
        return self.run(args)

    def release(self) -> None:
        try:
            super().release()
        finally:
            self._remove_staged()

    def _remove_staged(self) -> None:
        if self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
            self._staged = None


class AneBackend(Backend):
    name = "ane"
    summary = "the Apple Neural Engine through e5rt (macOS on Apple silicon)"
    runs_segments = True
    # engine segments are their own surfaces (state aliased or double-buffered on them);
    # CPU segments are simulator runners
    capabilities = Capabilities(
        state=True, aliasing=True, paired_surfaces=True, stored_runs=True, weight_reload=True
    )

    def unavailable(self) -> str | None:
        return e5rt.unavailable()

    def prepare(self, segment: SegmentSource) -> SegmentRunner:
        if segment.entry.device != "ane":
            return SIM.prepare(segment)  # an fp32 CPU program
        surface = check_engine_segment(
            segment.entry, segment.program, min_surface_bytes(segment.chip), segment.where
        )
        return AneRunner(segment, surface)

    def release(self, runner: SegmentRunner) -> None:
        if isinstance(runner, AneRunner):  # CPU segments' simulator runners hold nothing
            runner.release()


BACKEND = AneBackend()
