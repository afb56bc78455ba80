"""The schedule's invariants on the ANE segments of real compiled models, on small and large budgets."""

from __future__ import annotations

import pytest

from anekit import targets
from anekit.compiler import compile as compile_model
from anekit.schedule import layers_of, schedule_layers
from tests import zoo
from tests.cost.test_compiled import small_transformer_block
from tests.schedule import invariants


def compiled_models():
    yield "transformer_block", small_transformer_block()
    for name in ("light_squeezenet", "resnet_cnn"):
        yield name, zoo.load(name).path


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["m1", "m4"])
def test_invariants_hold_on_compiled_models(chip):
    t = targets.get(chip)
    checked = 0
    for _, model in compiled_models():
        cm = compile_model(model, t)
        for seg in cm.segments:
            if seg.device != "ane":
                continue
            layers = layers_of(cm.graph, seg)
            s = schedule_layers(layers, t)
            invariants.check_all(layers, s, s.limit_bytes, t.features.l2_chaining)
            checked += len(layers)
    assert checked > 50
