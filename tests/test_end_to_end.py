"""End to end: each model of the zoo compiled for M1 and M4, saved, loaded and run on the fp16
simulator, against onnxruntime; the weight files read back by coremltools; bundles reproducible;
Core ML export of real models.

Every model family runs on both m1 and m4. The large ``light`` models (seconds each to compile
and to simulate) are split between the two chips; the small ones run on both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anekit
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from tests import zoo
from tests.numerics import agreement

MIN_COSINE = 0.999
MIN_COSINE_EMBEDDINGS = 0.9999  # MiniLM sentence embeddings

_BOTH = ("m1", "m4")
PLAN: dict[str, tuple[str, ...]] = {
    "light_bvlc_alexnet": ("m1",),
    "light_densenet121": ("m4",),
    "light_inception_v1": ("m1",),
    "light_inception_v2": ("m4",),
    "light_resnet50": ("m1",),
    "light_shufflenet": _BOTH,
    "light_squeezenet": _BOTH,
    "light_vgg19": ("m4",),
    "light_zfnet512": ("m1",),
    "minilm": _BOTH,
    "gpt2_dynamo": _BOTH,
    "gpt2_torchscript": _BOTH,
    "resnet_cnn": _BOTH,
    "transformer_layer": _BOTH,
}
CASES = [(name, chip) for name, chips in PLAN.items() for chip in chips]


def test_the_plan_covers_every_zoo_model_and_each_family_on_both_chips() -> None:
    assert set(PLAN) == set(zoo.model_names())
    families: dict[str, set[str]] = {}
    for name, chips in PLAN.items():
        families.setdefault("light" if name.startswith("light_") else name, set()).update(chips)
    assert all(chips == set(_BOTH) for chips in families.values()), families


def _check_weights(compiled: Any, bundle: Path) -> int:
    """Every program parses and prints back to its exact text; every BLOBFILE of every segment,
    read by coremltools' own reader, is the engine graph's constant cast to fp16 (or, for
    constants derived from them, the bytes our reader reads)."""
    import coremltools.libmilstoragepython as cml

    checked = 0
    for segment, emitted in zip(
        compiled.bundle.manifest.segments, compiled.bundle.segments, strict=True
    ):
        if segment.weights is None:
            continue
        path = bundle / segment.weights
        theirs, ours = cml._BlobStorageReader(str(path)), BlobReader(path)
        text = (bundle / segment.program).read_text()
        program = mil.parse(text)
        legacy = compiled.target.mil.program_version == "1.0"
        assert mil.print_program(program, legacy_scalars=legacy) == text  # round-trips exactly
        for op in program.function("main").operations:
            blob = op.attribute("val")
            if not isinstance(blob, mil.BlobFile):
                continue
            assert blob.type.dtype == "fp16"  # fp16 weights by default, engine and CPU
            got = theirs.read_fp16_data(blob.offset)  # uint16 bit patterns
            ir_name = emitted.constants.get(op.outputs[0].name)
            if ir_name is None:  # derived from constants (a reshaped bias, a folded gain)
                assert np.array_equal(got, ours.read(blob.offset).view(np.uint16)), op.outputs[
                    0
                ].name
            else:
                want = compiled.graph.constants[ir_name].reshape(-1)
                if np.abs(want[np.isfinite(want)]).max(initial=0) > 65504:  # saturated, not inf
                    want = np.where(np.isfinite(want), np.clip(want, -65504, 65504), want)
                assert np.array_equal(got, want.astype(np.float16).view(np.uint16)), ir_name
            checked += 1
        ours.close()
    return checked


@pytest.mark.parametrize(("name", "chip"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_zoo_model_on_the_simulator_agrees_with_onnxruntime(
    name: str, chip: str, tmp_path: Path
) -> None:
    case = zoo.load(name)
    compiled = anekit.compile(case.path, chip)
    # check and save agree: no error for a model that saves (tests/test_check_save_agree.py)
    assert not [d for d in compiled.diagnostics if d.severity == "error"]
    bundle = compiled.save(tmp_path / f"{name}.anekit")
    program = anekit.load(bundle)
    assert program.target.name == chip
    assert program.target.program_version == ("1.0" if chip == "m1" else "1.3")
    outputs = program.run(dict(case.feeds), "sim")
    expected = case.onnxruntime_outputs()
    assert list(outputs) == list(expected)
    for output, want in expected.items():
        result = agreement(outputs[output], want)
        floor = MIN_COSINE_EMBEDDINGS if (name, output) == ("minilm", "embeddings") else MIN_COSINE
        assert result.cosine >= floor, f"{name} on {chip}, output {output}: {result}"
    if "gpt2" in case.tags:
        ours, theirs = outputs["logits"].argmax(-1), expected["logits"].argmax(-1)
        assert np.array_equal(ours, theirs), f"top-1 agreement {np.mean(ours == theirs):.4f}"
    assert _check_weights(compiled, bundle) > 0


def test_compiling_a_model_twice_gives_byte_identical_bundles(tmp_path: Path) -> None:
    case = zoo.load("gpt2_dynamo")
    first = anekit.compile(case.path, "m4").save(tmp_path / "a.anekit")
    second = anekit.compile(case.path, "m4").save(tmp_path / "b.anekit")
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert len(files) >= 4
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel


@pytest.mark.parametrize(
    ("name", "chip"),
    [("transformer_layer", "m1"), ("resnet_cnn", "m4"), ("gpt2_torchscript", "m1")],
)
def test_zoo_models_export_to_core_ml(name: str, chip: str, tmp_path: Path) -> None:
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    case = zoo.load(name)
    program = anekit.load(anekit.compile(case.path, chip).save(tmp_path / f"{name}.anekit"))
    package = program.save_mlpackage(tmp_path / f"{name}.mlpackage")
    model = ct.models.MLModel(str(package), skip_model_load=True)
    spec = model.get_spec()
    reloaded = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    assert [o.name for o in spec.description.output] == [p.name for p in program.outputs]
    assert len(list(reloaded.functions["main"].operations)) > 10
