"""A small BERT with random weights, exported from transformers and fused by onnxruntime's
own transformer optimizer (``EmbedLayerNormalization``, ``Attention`` taking the embedding's
[batch] mask index, ``SkipLayerNormalization``, ``BiasGelu``), then quantized by its
``quantize_dynamic`` (``QEmbedLayerNormalization``, ``QAttention``, ``MatMulInteger``), against
onnxruntime running the same models. The second sequence is right-padded, so the mask index
masks keys."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MS = "com.microsoft"
BATCH, SEQ, HIDDEN, HEADS, VOCAB = 2, 8, 32, 4, 100
RNG = np.random.default_rng(31)


class _Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS,
            intermediate_size=2 * HIDDEN, max_position_embeddings=64, attn_implementation="eager",
        )  # fmt: skip
        self.bert = transformers.BertModel(config).eval()

    def forward(self, ids, mask, segments):
        out = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=segments)
        return out.last_hidden_state, out.pooler_output


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BERT through onnxruntime's optimizer (dynamic batch and sequence, as the fusions
    of the embedding expect)."""
    from onnxruntime.transformers.optimizer import optimize_model

    folder = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.zeros(BATCH, SEQ, dtype=torch.int64) for _ in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Bert(), example, folder / "bert.onnx", input_names=names,
            output_names=["hidden", "pooled"], opset_version=17, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
        )  # fmt: skip
    model = optimize_model(
        str(folder / "bert.onnx"), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN,
        opt_level=0,
    )  # fmt: skip
    model.save_model_to_file(str(folder / "bert.opt.onnx"))
    return folder / "bert.opt.onnx"


def _feeds() -> dict[str, np.ndarray]:
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, 5:] = 0
    return {
        "input_ids": RNG.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64),
        "attention_mask": mask,
        "token_type_ids": RNG.integers(0, 2, (BATCH, SEQ)).astype(np.int64),
    }


def _check(model: onnx.ModelProto) -> None:
    feeds = _feeds()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    compiled = anekit.compile(
        model, "m4", input_shapes={k: v.shape for k, v in feeds.items()}, approximate_gelu=False
    )
    names = [o.name for o in model.graph.output]
    reference = compiled.run(feeds, "reference")
    sim = compiled.run(feeds, "sim")
    for name, want in zip(names, expected, strict=True):
        np.testing.assert_allclose(reference[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(sim[name], want, rtol=2e-2, atol=3e-2, err_msg=name)


def test_bert_fused_by_onnxruntimes_optimizer(optimized: Path) -> None:
    model = onnx.load(optimized)
    kinds = Counter(n.op_type for n in model.graph.node if n.domain == MS)
    assert kinds["EmbedLayerNormalization"] == 1 and kinds["Attention"] == 2, kinds
    (embed,) = [n for n in model.graph.node if n.op_type == "EmbedLayerNormalization"]
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    assert attention.input[3] == embed.output[1]  # the [batch] mask index
    _check(model)


@pytest.mark.parametrize("per_channel", [False, True])
def test_bert_quantized_by_onnxruntimes_dynamic_quantizer(
    optimized: Path, tmp_path: Path, per_channel: bool
) -> None:
    """QAttention's projection accumulates in exact int32 as onnxruntime's: the reference
    backend gives onnxruntime's answer on the quantized model to fp32 rounding."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        optimized, tmp_path / "bert.q.onnx", weight_type=QuantType.QInt8, per_channel=per_channel,
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )  # fmt: skip
    model = onnx.load(tmp_path / "bert.q.onnx")
    kinds = Counter(n.op_type for n in model.graph.node if n.domain == MS)
    assert kinds["QEmbedLayerNormalization"] == 1 and kinds["QAttention"] == 2, kinds
    _check(model)


def _embed_model(**options) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One EmbedLayerNormalization node; ``position_ids`` and a mask with a 2 in it (not
    counted: onnxruntime counts the entries equal to 1)."""
    tables = {
        "word": RNG.standard_normal((VOCAB, HIDDEN)), "pos": RNG.standard_normal((16, HIDDEN)),
        "seg": RNG.standard_normal((2, HIDDEN)), "gamma": RNG.standard_normal(HIDDEN),
        "beta": RNG.standard_normal(HIDDEN),
    }  # fmt: skip
    feeds = {
        "ids": RNG.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32),
        "segments": RNG.integers(0, 2, (BATCH, SEQ)).astype(np.int32),
        "mask": np.array([[1, 2, 0, 1, 1, 1, 0, 0], [1] * 5 + [0] * 3], np.int32),
        "position_ids": RNG.integers(0, 16, (1, SEQ)).astype(np.int32),
    }
    names = ["ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask", "position_ids"]
    node = helper.make_node(
        "EmbedLayerNormalization", names, ["y", "mask_index", "sum"], domain=MS, **options
    )
    graph = helper.make_graph(
        [node], "embed",
        [helper.make_tensor_value_info(k, TensorProto.INT32, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, t, None)
         for o, t in zip(node.output, (TensorProto.FLOAT, TensorProto.INT32, TensorProto.FLOAT), strict=True)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tables.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets), feeds


def test_embed_layer_normalization_with_position_ids_and_every_output() -> None:
    model, feeds = _embed_model(epsilon=1e-5)
    expected = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    compiled = anekit.compile(model, "m4")
    for backend, (rtol, atol) in (("reference", (1e-5, 1e-5)), ("sim", (2e-2, 3e-2))):
        got = compiled.run(feeds, backend)
        for name, want in zip(["y", "mask_index", "sum"], expected, strict=True):
            np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)
    assert list(expected[1]) == [4, 5]


def test_embed_layer_normalization_refuses_a_segment_table_without_ids() -> None:
    model, _ = _embed_model()
    model.graph.node[0].input[1] = ""
    with pytest.raises(anekit.AnekitError, match="EmbedLayerNormalization.*segment_ids and segment_embedding"):
        anekit.compile(model, "m4")
