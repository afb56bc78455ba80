"""The ``sim`` backend: a MIL interpreter with fp16 storage between ops and fp32 arithmetic inside.

Example::

    from anekit.simulator import SimProgram

    prog = SimProgram.load("model.mil")          # @model_path = the file's directory
    outputs = prog.run({"x": x})                 # dict: output name -> array

Numerics (the fp16 policy):

- every fp16-typed value is stored as float32 holding an fp16 value; an op widens nothing
  (fp16 values are exact in float32), computes in float32 (matmuls and convs with fp32
  accumulation, through the C GEMM of :mod:`.gemm` or numpy's BLAS; a few ops whose formula
  cancels badly, such as erf-GELU, in float64) and its fp16 results are rounded once, to
  nearest even (in C where the extension is built, :mod:`.fp16`);
- overflow gives +-infinity, as IEEE conversion does; nothing saturates at 65504 (clamping
  before softmax or a normalisation is a model-side practice, FACTS section 3);
- fp32 values stay fp32, integers and bools keep their types; ops that only move or select
  values (reshape, slice, gather, max_pool, relu...) are not rounded at all.

Loading checks the whole program at once (every unsupported op listed together, inputs,
constness and type domains from Apple's iOS 15-18 definitions, the dtypes the program
declares) and reads every weight; ``run`` can then be called many times, and checks each
result's shape against its declaration. :mod:`.values` confines BLOBFILE weights to the
program's directory.
"""

from __future__ import annotations

from anekit.ir.dtypes import FP16_MAX

from .fp16 import round_to_fp16
from .ops import REGISTRY
from .program import SimProgram, run_function


def supported_ops() -> tuple[str, ...]:
    """Names of the MIL ops the simulator runs (``const`` included), sorted."""
    return tuple(sorted({"const", *REGISTRY}))


__all__ = ["FP16_MAX", "SimProgram", "round_to_fp16", "run_function", "supported_ops"]
