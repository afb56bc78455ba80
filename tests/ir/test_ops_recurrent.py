"""LSTM, GRU and RNN kernels against onnxruntime with every feature the node cases skip:
bidirectional with sequence lengths and initial states, peepholes, clip, custom
activations with alpha/beta, input_forget, linear_before_reset, batch-major layout."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.ir.registry import InferError, infer_types
from tests.ir.ort_oracle import run_ir, run_ort, types

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(5)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _inputs(op: str, dirs: int, seq=5, batch=3, size=4, hidden=6, layout=0, lens=True):
    g = GATES[op]
    x_shape = (seq, batch, size) if layout == 0 else (batch, seq, size)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    f = lambda *s: (RNG.standard_normal(s) * 0.7).astype(np.float32)  # noqa: E731
    ins = [f(*x_shape), f(dirs, g * hidden, size), f(dirs, g * hidden, hidden)]
    ins.append(f(dirs, 2 * g * hidden))
    ins.append(np.asarray([5, 2, 0][:batch], dtype=np.int32) if lens else None)
    ins.append(f(*state))
    if op == "LSTM":
        ins += [f(*state), f(dirs, 3 * hidden)]
    return ins


CASES = [
    # op, direction, layout, extra attributes
    ("LSTM", "bidirectional", 0, {}),
    ("LSTM", "reverse", 1, {"clip": 0.9}),
    ("LSTM", "forward", 0, {"input_forget": 1}),
    (
        "LSTM",
        "bidirectional",
        0,
        {
            "activations": ["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "ScaledTanh", "Relu"],
            "activation_alpha": [0.3, 0.8],
            "activation_beta": [0.4, 1.2],
        },
    ),
    ("GRU", "bidirectional", 0, {}),
    ("GRU", "forward", 1, {"linear_before_reset": 1}),
    ("GRU", "reverse", 0, {"clip": 0.5, "linear_before_reset": 1}),
    (
        "GRU",
        "forward",
        0,
        {
            "activations": ["HardSigmoid", "Elu"],
            "activation_alpha": [0.25, 0.7],
            "activation_beta": [0.45],
        },
    ),
    (
        "GRU",
        "bidirectional",
        0,
        {
            "activations": ["Sigmoid", "Softplus", "Sigmoid", "ThresholdedRelu"],
            "activation_alpha": [0.3],
        },
    ),
    ("RNN", "forward", 0, {"activations": ["LeakyRelu"], "activation_alpha": [0.1]}),
    ("RNN", "bidirectional", 1, {}),
    (
        "RNN",
        "reverse",
        0,
        {"activations": ["Affine"], "activation_alpha": [0.2], "activation_beta": [0.1]},
    ),
]


@pytest.mark.parametrize(("op", "direction", "layout", "extra"), CASES)
def test_recurrent_matches_onnxruntime(op, direction, layout, extra) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    ins = _inputs(op, dirs, layout=layout)
    n_out = 3 if op == "LSTM" else 2
    attrs = dict(hidden_size=6, direction=direction, layout=layout, **extra)
    outs = run_ir(op.lower(), ins, **attrs)
    if layout == 1:  # onnxruntime runs only layout 0: transpose in and out
        ins = [ins[0].swapaxes(0, 1), *ins[1:5], *(s.swapaxes(0, 1) for s in ins[5:7])] + ins[7:]
        attrs["layout"] = 0
    refs = run_ort(op, ins, n_out, **attrs)
    if layout == 1:
        refs = [refs[0].transpose(2, 0, 1, 3)] + [s.swapaxes(0, 1) for s in refs[1:]]
    for out, ref in zip(outs, refs, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_sequence_lens_stop_each_sequence() -> None:
    ins = _inputs("RNN", 1)
    y, y_h = run_ir("rnn", ins, hidden_size=6)
    assert not y[:, :, 2].any() and not y_h[0, 2].any()  # batch 2 has length 0
    assert not y[2:, :, 1].any() and y[1, 0, 1].any()  # batch 1 stops after 2 steps
    np.testing.assert_array_equal(y_h[0, 1], y[1, 0, 1])


@pytest.mark.parametrize(
    ("op", "shapes", "attrs", "message"),
    [
        ("lstm", [(5, 3, 4), (1, 12, 4), (1, 12, 3)], {"hidden_size": 4}, "w has shape"),
        ("gru", [(5, 3, 4), (2, 9, 4), (2, 9, 3)], {"hidden_size": 3}, "expected \\[1, 9, 4\\]"),
        ("rnn", [(5, 4), (1, 3, 4), (1, 3, 3)], {"hidden_size": 3}, "rank 3"),
        (
            "lstm",
            [(5, 3, 4), (1, 12, 4), (1, 12, 3)],
            {"hidden_size": 3, "activations": ("Sigmoid", "Tanh")},
            "needs 3 activations",
        ),
        (
            "rnn",
            [(5, 3, 4), (1, 3, 4), (1, 3, 3)],
            {"hidden_size": 3, "activations": ("Swish",)},
            "unknown activation 'swish'",
        ),
    ],
)
def test_inference_errors_name_the_problem(op, shapes, attrs, message) -> None:
    with pytest.raises(InferError, match=message):
        infer_types(op, types(*shapes), attrs)


def test_linear_attention_equals_causal_unnormalised_attention() -> None:
    # with the plain "linear" rule the recurrence is sum_{s <= t} (q_t . k_s) v_s
    q, k, v = (RNG.standard_normal((2, 4, 6, 5)).astype(np.float32) for _ in range(3))
    k2, v2 = k[:, ::2], v[:, ::2]  # two KV heads serve four query heads
    y, state = run_ir("linear_attention", [q, k2, v2], update_rule="linear", scale=0.5)
    kr, vr = np.repeat(k2, 2, axis=1), np.repeat(v2, 2, axis=1)
    scores = np.tril(q @ kr.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(y, 0.5 * scores @ vr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, k2.transpose(0, 1, 3, 2) @ v2, rtol=1e-4, atol=1e-5)


def test_gated_delta_rule_step_by_step() -> None:
    q, k, v = (RNG.standard_normal((1, 1, 3, 2)).astype(np.float32) for _ in range(3))
    decay = RNG.uniform(-1, 0, (1, 1, 3, 2)).astype(np.float32)
    beta = RNG.uniform(0, 1, (1, 1, 3, 1)).astype(np.float32)
    y, state = run_ir("linear_attention", [q, k, v, None, decay, beta], scale=1.0)
    s = np.zeros((2, 2))
    for t in range(3):
        s = s * np.exp(decay[0, 0, t])[:, None]
        delta = beta[0, 0, t] * (v[0, 0, t] - s.T @ k[0, 0, t])
        s = s + np.outer(k[0, 0, t], delta)
        np.testing.assert_allclose(y[0, 0, t], q[0, 0, t] @ s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state[0, 0], s, rtol=1e-5, atol=1e-6)
