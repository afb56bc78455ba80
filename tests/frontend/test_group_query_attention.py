"""com.microsoft.GroupQueryAttention, the attention op of onnxruntime-genai's language-model
exports, against onnxruntime running the same node: prompt and decode steps, a KV cache
longer than the tokens written (per-entry lengths from seqlens_k), packed QKV, rotary,
sliding windows and per-head q/k norms."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit

MS = "com.microsoft"
RNG = np.random.default_rng(23)
HEADS, KV_HEADS, SIZE = 4, 2, 16


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _gqa_model(
    batch: int, seq: int, past: int, total: int, *, packed=False, rotary=False, norms=False,
    **attrs,
) -> tuple[onnx.ModelProto, dict]:  # fmt: skip
    """One GroupQueryAttention node; the cache, seqlens_k and new tokens are graph inputs."""
    feeds: dict[str, np.ndarray] = {}
    inputs = ["q"]
    if packed:
        feeds["q"] = _f(batch, seq, (HEADS + 2 * KV_HEADS) * SIZE)
        inputs += ["", ""]
    else:
        feeds["q"], feeds["k"], feeds["v"] = (
            _f(batch, seq, HEADS * SIZE), _f(batch, seq, KV_HEADS * SIZE),
            _f(batch, seq, KV_HEADS * SIZE),
        )  # fmt: skip
        inputs += ["k", "v"]
    if past:
        feeds["past_k"], feeds["past_v"] = (
            _f(batch, KV_HEADS, past, SIZE),
            _f(batch, KV_HEADS, past, SIZE),
        )
        inputs += ["past_k", "past_v"]
    else:
        inputs += ["", ""]
    inputs += ["seqlens_k", "total"]
    inits = {"total": np.array(total, np.int32)}
    if rotary:
        angles = RNG.uniform(0, 6.28, (32, SIZE // 2)).astype(np.float32)
        inits["cos"], inits["sin"] = np.cos(angles), np.sin(angles)
        inputs += ["cos", "sin"]
    if norms:
        inits["qn"], inits["kn"] = 1 + 0.1 * _f(SIZE), 1 + 0.1 * _f(SIZE)
        inputs += ["", "", "", "", "", "qn", "kn"]  # after position_ids .. v_scale
    node = helper.make_node(
        "GroupQueryAttention", inputs, ["y", "present_k", "present_v"], domain=MS,
        num_heads=HEADS, kv_num_heads=KV_HEADS, do_rotary=int(rotary), **attrs,
    )  # fmt: skip
    graph_inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape)
        for name, value in feeds.items()
    ] + [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, (batch,))]
    graph = helper.make_graph(
        [node], "gqa", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    return model, feeds


def _check(model: onnx.ModelProto, feeds: dict, seqlens: list[int]) -> None:
    feeds = {**feeds, "seqlens_k": np.array(seqlens, np.int32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip(["y", "present_k", "present_v"], session.run(None, feeds), strict=True))
    compiled = anekit.compile(model, "m4")
    for backend, tol in (("reference", 1e-5), ("sim", 2e-2)):
        got = compiled.run(feeds, backend)
        np.testing.assert_allclose(got["y"], want["y"], rtol=tol, atol=tol, err_msg=backend)
        for name in ("present_k", "present_v"):
            assert got[name].shape == want[name].shape, name
            for b, last in enumerate(seqlens):  # rows past an entry's tokens are unspecified
                np.testing.assert_allclose(
                    got[name][b, :, : last + 1], want[name][b, :, : last + 1],
                    rtol=tol, atol=tol, err_msg=f"{backend} {name} entry {b}",
                )  # fmt: skip


@pytest.mark.parametrize("rotary", [False, True])
def test_prompt_without_a_cache(rotary: bool) -> None:
    model, feeds = _gqa_model(2, 6, 0, 6, rotary=rotary)
    _check(model, feeds, [5, 5])


@pytest.mark.parametrize("rotary", [False, True])
def test_decode_step_appends_to_the_past(rotary: bool) -> None:
    model, feeds = _gqa_model(2, 1, 5, 6, rotary=rotary)
    _check(model, feeds, [5, 5])


def test_cache_buffer_longer_than_the_tokens_with_lengths_per_entry() -> None:
    """A max-length cache (onnxruntime-genai's shared buffer): entry 0 holds 3 tokens, entry 1
    holds 6; each new token is written and attends at its own entry's position."""
    model, feeds = _gqa_model(2, 1, 10, 8, rotary=True)
    _check(model, feeds, [3, 6])


def test_packed_qkv_with_a_sliding_window() -> None:
    model, feeds = _gqa_model(1, 7, 4, 11, packed=True, local_window_size=3)
    _check(model, feeds, [10])


def test_per_head_qk_norms_against_their_definition() -> None:
    """onnxruntime's CPU provider has no q/k norm inputs; the oracle is their definition: an
    RMS norm over each head's features of q and k, then the op without them."""
    model, feeds = _gqa_model(1, 5, 3, 8, rotary=True, norms=True)
    seqlens = [7]
    compiled = anekit.compile(model, "m4")
    node = model.graph.node[0]
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    del node.input[9:]
    nodes = []
    for name, heads, weight in (("q", HEADS, "qn"), ("k", KV_HEADS, "kn")):
        nodes += [
            helper.make_node("Reshape", [name, f"{name}_heads_shape"], [f"{name}_heads"]),
            helper.make_node("SimplifiedLayerNormalization", [f"{name}_heads", weight],
                             [f"{name}_normed"], axis=-1, epsilon=1e-6),
            helper.make_node("Reshape", [f"{name}_normed", f"{name}_shape"], [f"{name}_flat"]),
        ]  # fmt: skip
        weights[f"{name}_heads_shape"] = np.array([1, 5, heads, SIZE], np.int64)
        weights[f"{name}_shape"] = np.array([1, 5, heads * SIZE], np.int64)
        node.input[0 if name == "q" else 1] = f"{name}_flat"
    del model.graph.initializer[:]
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    model.graph.node.insert(0, nodes[0])
    for i, extra in enumerate(nodes[1:], start=1):
        model.graph.node.insert(i, extra)
    feeds = {**feeds, "seqlens_k": np.array(seqlens, np.int32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(["y"], feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds, "reference")["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled.run(feeds, "sim")["y"], want, rtol=2e-2, atol=2e-2)


def test_a_computed_total_length_is_refused_with_the_fix() -> None:
    model, _ = _gqa_model(1, 2, 0, 2)
    model.graph.initializer.pop()  # total becomes a graph input
    model.graph.input.append(helper.make_tensor_value_info("total", TensorProto.INT32, ()))
    with pytest.raises(anekit.AnekitError, match="total_sequence_length") as err:
        anekit.compile(model, "m4")
    assert "--const total_sequence_length" in str(err.value.hint)
