"""The one compiled part: the simulator's kernels (src/anekit/runtime/sim/_native.c), fp16
rounding and a float32 GEMM.

``optional=True``: where no C compiler is found the install still succeeds and the simulator
uses numpy instead (the same rounding bit for bit, about 5x slower; numpy's BLAS for the
products). ``anekit.runtime.sim.fp16.ACCELERATED`` and ``anekit.runtime.sim.gemm.ACCELERATED``
tell which runs. Everything else is in pyproject.toml.
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3", "-fno-fast-math"]

setup(
    ext_modules=[
        Extension(
            "anekit.runtime.sim._native",
            ["src/anekit/runtime/sim/_native.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
