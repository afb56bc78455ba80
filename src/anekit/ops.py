"""`anekit.ops`: the builder API's functional ops (conv2d, linear, matmul, relu, ...)."""

from anekit.frontend.builder.ops import *  # noqa: F403
from anekit.frontend.builder.ops import __all__  # noqa: F401
