"""Every IR op declaration; importing this package fills the registry."""

from anekit.ir import engine  # noqa: E402,F401  (the goc and ane_layer ops)
from anekit.ir.ops import (  # noqa: F401
    bitwise,
    conv,
    elementwise,
    linalg,
    misc,
    norm,
    pool,
    quant,
    recurrent,
    reduce,
    resize,
    sample,
    scatter,
    shape,
    signal,
)
