"""Representative architectures of the placement zoo (benchmarks/cpu_fallback_zoo.py runs all
of them): a ViT and a wav2vec2 from transformers' tiny configs run entirely on the engine on
m1 and m4 (patchify 16x16/16 and the 128-wide positional conv used to fall back)."""

from __future__ import annotations

import warnings

import pytest
import transformers  # noqa: F401 - needed by what the tests run

from anekit.compiler import compile as compile_model
from anekit.passes.pipeline import DEFAULT_PIPELINE, LEGALISING_PASSES


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit", "wav2vec2"])
def test_vit_style_models_run_entirely_on_the_engine(name: str) -> None:
    from anekit.frontend.torch import from_torch
    from tests.arch_zoo import ARCHITECTURES

    module, inputs, names = ARCHITECTURES[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = from_torch(module, inputs, list(names))
    before = tuple(p for p in DEFAULT_PIPELINE if p not in LEGALISING_PASSES)
    for chip in ("m1", "m4"):
        assert compile_model(graph, chip, passes=before).summary["cpu_ops"] >= 1
        cm = compile_model(graph, chip)
        assert cm.summary["cpu_ops"] == 0, [r.reason for r in cm.ops if r.placement == "cpu"]
        assert cm.summary["dispatches"] == 1
