"""Every zoo model imported with from_onnx and run on the reference backend, against onnxruntime.

The acceptance metric (tests/numerics.py) is checked against two oracles: onnxruntime
on the same ONNX file, and the model's own source (torch's forward, or the outputs
onnx ships with its light models). The light models' shipped outputs are softmaxes of
constant weights (every class 0.001), so for them every intermediate float tensor is
compared with onnxruntime as well.

SqueezeNet's logits are about 9.5e9, where one fp32 step is 1024: a different (equally
valid) summation order moves a logit by a step and its softmax from 0.001 to 0 or 0.25.
Such a softmax is ill-conditioned, and comparing it between two implementations says
nothing. For it the test checks what does mean something: the logits against
onnxruntime (they are intermediates, compared like every other), and anekit's softmax of
*its own* logits against onnxruntime's softmax of the same logits in float64.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import anekit
from tests import zoo
from tests.numerics import assert_close_to_reference

pytestmark = pytest.mark.slow

MODELS = zoo.model_names()
LIGHT = zoo.model_names("light")
TORCH = zoo.model_names("torch")


def with_intermediates(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``proto`` whose outputs also include every data-dependent float tensor."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    typed = {vi.name: vi for vi in inferred.graph.value_info}
    constant = {t.name for t in proto.graph.initializer}
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    present = {o.name for o in model.graph.output}
    added = []
    for node in proto.graph.node:
        if all(i in constant for i in node.input if i):
            constant.update(node.output)  # weights made at load time, not activations
            continue
        for name in node.output:
            vi = typed.get(name)
            if name and name not in present and vi is not None:
                if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                    model.graph.output.append(vi)
                    added.append(name)
    return model, added


def _ill_conditioned_softmaxes(model: onnx.ModelProto, outputs: dict) -> dict[str, onnx.NodeProto]:
    """Softmax outputs whose logits are so large that one fp32 step (ulp) is >= 1."""
    found = {}
    for node in model.graph.node:
        if node.op_type == "Softmax" and node.input[0] in outputs:
            logits = np.abs(outputs[node.input[0]]).max()
            if np.spacing(np.float32(logits)) >= 1.0:
                found[node.output[0]] = node
    return found


def _softmax_of(node: onnx.NodeProto, logits: np.ndarray, opset: int) -> np.ndarray:
    """onnxruntime's float64 softmax (same node, same opset) of the given logits."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, logits.shape)
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)
    one = onnx.helper.make_node("Softmax", ["x"], ["y"])
    one.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph([one], "softmax", [x], [y])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": logits.astype(np.float64)})[0].astype(np.float32)


def _check_all(name: str, actual: dict, reference: dict, oracle: str) -> None:
    assert list(actual) == list(reference), f"{name}: outputs differ from {oracle}'s"
    for key, ref in reference.items():
        assert actual[key].dtype == ref.dtype, f"{name}:{key}: dtype vs {oracle}"
        assert_close_to_reference(actual[key], ref, f"{name}:{key} vs {oracle}")


@pytest.mark.parametrize("name", sorted(set(MODELS) - set(LIGHT)))
def test_model_matches_onnxruntime_and_its_source(name: str) -> None:
    case = zoo.load(name)
    graph = anekit.from_onnx(case.path)
    assert [v.name for v in graph.inputs] == list(case.feeds)
    outputs = graph.run(case.feeds)
    _check_all(name, outputs, case.onnxruntime_outputs(), "onnxruntime")
    _check_all(name, outputs, dict(case.expected), case.expected_source)


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_shipped_outputs_and_every_intermediate(name: str) -> None:
    case = zoo.load(name)
    model, added = with_intermediates(case.proto())
    assert len(added) >= 10, f"{name}: only {len(added)} intermediates to compare"
    outputs = anekit.from_onnx(model).run(case.feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(names, dict(case.feeds)), strict=True))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ill_conditioned = _ill_conditioned_softmaxes(model, outputs)
    for out, node in ill_conditioned.items():
        reference[out] = _softmax_of(node, outputs[node.input[0]], opset)
    _check_all(name, outputs, reference, "onnxruntime")
    shipped = {k: outputs[k] for k in case.expected if k not in ill_conditioned}
    _check_all(name, shipped, {k: case.expected[k] for k in shipped}, case.expected_source)


def test_minilm_embeddings_are_unit_vectors_that_tell_sentences_apart() -> None:
    """The real weights: the embedding is normalised and not the mean of padding."""
    case = zoo.load("minilm")
    outputs = anekit.from_onnx(case.path).run(case.feeds)
    embedding = outputs["embeddings"][0]
    assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-5)
    mask = case.feeds["attention_mask"][0].astype(bool)
    assert 0 < mask.sum() < mask.size  # the sentence is padded, so the mask matters
    states = outputs["last_hidden_state"][0]
    unmasked = states.mean(0) / np.linalg.norm(states.mean(0))
    assert float(unmasked @ embedding) < 0.999  # padding tokens would change the embedding


def test_gpt2_exporters_agree_on_the_same_weights() -> None:
    """Both exporters' graphs of one GPT-2 give the same logits through anekit."""
    dynamo, torchscript = zoo.load("gpt2_dynamo"), zoo.load("gpt2_torchscript")
    np.testing.assert_array_equal(dynamo.feeds["input_ids"], torchscript.feeds["input_ids"])
    a = anekit.from_onnx(dynamo.path).run(dynamo.feeds)["logits"]
    b = anekit.from_onnx(torchscript.path).run(torchscript.feeds)["logits"]
    assert_close_to_reference(a, b, "gpt2 dynamo vs torchscript")
    assert a.shape == (1, 32, 50257)


def test_zoo_covers_the_issue() -> None:
    """Every model family the foundation issue names is in the zoo and its tests."""
    assert len(LIGHT) == 9
    assert {"minilm", "gpt2_dynamo", "gpt2_torchscript", "resnet_cnn", "transformer_layer"} <= set(
        TORCH
    )
    assert {zoo.load(n).info["exporter"] for n in ("gpt2_dynamo", "gpt2_torchscript")} == {
        "dynamo",
        "torchscript",
    }
    ops = {n.op_type for n in zoo.load("resnet_cnn").proto().graph.node}
    assert {"Conv", "BatchNormalization", "Add", "MaxPool", "AveragePool"} <= ops
