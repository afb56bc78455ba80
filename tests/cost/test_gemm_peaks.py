"""The M1 and M2 GEMM peaks of chips.json are fit on ANEForge's device-table 'GEMM compute' rows:
a 256x4096 @ 4096x4096 linear, kept a tiled matmul that streams under their 2 MB budget."""

from __future__ import annotations

import pytest

from anekit.compiler import compile as compile_model
from anekit.cost import estimate_compiled

torch = pytest.importorskip("torch")
from anekit.frontend.torch import from_torch  # noqa: E402

# bench/results/device_compare_wattcomplete_results_{M1,M2}.json, ANE latency_ms
PUBLISHED_MS = {"m1": 2.3944, "m2": 2.0434}


@pytest.mark.parametrize("chip", sorted(PUBLISHED_MS))
def test_the_gemm_peak_reproduces_its_device_table_row(chip: str) -> None:
    net = torch.nn.Linear(4096, 4096, bias=False).eval()
    cm = compile_model(from_torch(net, (torch.randn(256, 4096),), ["x"]), chip)
    est = estimate_compiled(cm)
    assert est.total_ms == pytest.approx(PUBLISHED_MS[chip], rel=0.02)
    (seg,) = [s for s in est.segments if s.device == "ane"]
    (mac,) = [c for c in seg.layers if c.unit == "mac"]
    assert mac.streaming and mac.bound == "compute"  # the streaming rate is what was fit
