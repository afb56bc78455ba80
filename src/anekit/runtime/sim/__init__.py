"""The ``sim`` backend: a MIL interpreter with fp16 storage between ops and fp32 arithmetic inside.

Example::

    from anekit.runtime.sim import SimProgram

    prog = SimProgram.load("model.mil")          # @model_path = the file's directory
    outputs = prog.run({"x": x})                 # dict: output name -> array

Loading checks the whole program at once (every unsupported op listed together, input
domains, declared output dtypes) and reads every weight; ``run`` can then be called many
times. See :mod:`.program` for the numerics and :mod:`.values` for how BLOBFILE weights are
confined to the program's directory.
"""

from __future__ import annotations

from .fp16 import FP16_MAX, round_to_fp16
from .ops import REGISTRY
from .program import SimProgram, run_function


def supported_ops() -> tuple[str, ...]:
    """Names of the MIL ops the simulator runs (``const`` included), sorted."""
    return tuple(sorted({"const", *REGISTRY}))


__all__ = ["FP16_MAX", "SimProgram", "round_to_fp16", "run_function", "supported_ops"]
