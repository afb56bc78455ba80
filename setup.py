"""The one compiled part, ``anekit._native`` (src/anekit/_native.c): fp16 rounding and
float32 <-> fp16 conversion (the simulator's storage, and every weight the compiler or a
weight update writes) and the simulator's float32 GEMM.

``optional=True``: where no C compiler is found the install still succeeds and numpy is used
instead (the same bits, several times slower; numpy's BLAS for the products).
``anekit.float16.ACCELERATED``, ``anekit.simulator.fp16.ACCELERATED`` and
``anekit.simulator.gemm.ACCELERATED`` tell which runs. Everything else is in pyproject.toml.
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3", "-fno-fast-math", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "anekit._native",
            ["src/anekit/_native.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
