"""``sim-fp32``: a segment's MIL with every fp16 type widened to fp32, on the simulator.

It needs nothing but the bundle (the weights are the bundle's own, already rounded to fp16
for engine segments); set beside ``sim`` it isolates what fp16 storage between ops costs.
"""

from __future__ import annotations

from anekit.runtime.backends import Backend, Capabilities, SegmentRunner, SegmentSource
from anekit.runtime.backends.sim import SimRunner, inlined


class SimFp32Backend(Backend):
    name = "sim-fp32"
    summary = "compiled MIL on the simulator with fp16 widened to fp32"
    runs_segments = True
    # state is handed from step to step in the widened program's storage form; no surfaces
    capabilities = Capabilities(state=True, stored_runs=True, weight_reload=True)

    def prepare(self, segment: SegmentSource) -> SegmentRunner:
        from anekit.runtime.widen import widen_program

        return SimRunner(widen_program(inlined(segment)), None, segment.where)


BACKEND = SimFp32Backend()
