"""Recurrent layers with ONNX semantics: lstm, gru and rnn (every direction, activation, clip).

The ANE has no recurrence; these ops run on the CPU side of a compiled program (or are
unrolled by the middle-end). Tensors use ONNX's layouts: x is [seq, batch, input]
(layout 0) or [batch, seq, input] (layout 1); weights are [directions, gates*hidden, ...].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types
from anekit.ir.registry import Attr, InferError, TensorType, declare

Act = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * (np.tanh(np.float32(0.5) * x) + np.float32(1.0))


# activation name -> (how many of activation_alpha / activation_beta it takes, builder)
ACTIVATIONS: dict[str, tuple[int, int, Callable[[float, float], Act]]] = {
    "relu": (0, 0, lambda a, b: lambda x: np.maximum(x, np.float32(0))),
    "tanh": (0, 0, lambda a, b: np.tanh),
    "sigmoid": (0, 0, lambda a, b: _sigmoid),
    "affine": (1, 1, lambda a, b: lambda x: np.float32(a) * x + np.float32(b)),
    "leakyrelu": (1, 0, lambda a, b: lambda x: np.where(x >= 0, x, np.float32(a) * x)),
    "thresholdedrelu": (1, 0, lambda a, b: lambda x: np.where(x > a, x, np.float32(0))),
    "scaledtanh": (1, 1, lambda a, b: lambda x: np.float32(a) * np.tanh(np.float32(b) * x)),
    "hardsigmoid": (
        1,
        1,
        lambda a, b: lambda x: np.clip(np.float32(a) * x + np.float32(b), 0.0, 1.0),
    ),
    "elu": (
        1,
        0,
        lambda a, b: lambda x: np.where(x >= 0, x, np.float32(a) * np.expm1(np.minimum(x, 0))),
    ),
    "softsign": (0, 0, lambda a, b: lambda x: x / (1 + np.abs(x))),
    "softplus": (0, 0, lambda a, b: lambda x: np.logaddexp(np.float32(0), x)),
}
# ONNX's defaults for alpha/beta when a model gives activations without them
DEFAULT_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0,
                  "hardsigmoid": 0.2, "elu": 1.0}  # fmt: skip
DEFAULT_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}

# op -> (gates, activations per direction, default activations)
CELLS = {
    "lstm": (4, 3, ("sigmoid", "tanh", "tanh")),
    "gru": (3, 2, ("sigmoid", "tanh")),
    "rnn": (1, 1, ("tanh",)),
}


def resolve_activations(op: str, attrs: Attrs) -> list[list[Act]]:
    """Per direction, the cell's activation functions with their alpha/beta consumed in order."""
    _gates, per_dir, defaults = CELLS[op]
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    names = [n.lower() for n in attrs["activations"]] or list(defaults) * dirs
    if len(names) != per_dir * dirs:
        raise InferError(
            f"{op} needs {per_dir * dirs} activations for {dirs} direction(s), got {len(names)}"
        )
    alphas, betas = list(attrs["activation_alpha"]), list(attrs["activation_beta"])
    fns = []
    for name in names:
        if name not in ACTIVATIONS:
            raise InferError(f"unknown activation '{name}'; known: {sorted(ACTIVATIONS)}")
        n_alpha, n_beta, make = ACTIVATIONS[name]
        a = alphas.pop(0) if n_alpha and alphas else DEFAULT_ALPHA.get(name, 0.0)
        b = betas.pop(0) if n_beta and betas else DEFAULT_BETA.get(name, 0.0)
        fns.append(make(a, b))
    return [fns[d * per_dir : (d + 1) * per_dir] for d in range(dirs)]


def _recurrent_attrs(n_act: int) -> tuple[Attr, ...]:
    return (
        Attr("hidden_size", "int"),
        Attr("direction", "str", "forward", choices=("forward", "reverse", "bidirectional")),
        Attr("activations", "strs", (), doc=f"{n_act} per direction; empty = the defaults"),
        Attr("activation_alpha", "floats", ()),
        Attr("activation_beta", "floats", ()),
        Attr("clip", "float", None, doc="clamp gate pre-activations to [-clip, clip]"),
        Attr("layout", "int", 0, choices=(0, 1), doc="0: [seq, batch, ...], 1: [batch, seq, ...]"),
    )


def _check(name: str, t: TensorType | None, shape: Sequence[int]) -> None:
    if t is not None and t.shape != tuple(shape):
        raise InferError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")


def _recurrent_infer(op: str):
    gates = CELLS[op][0]

    def infer(ins: Types, attrs: Attrs) -> list[TensorType]:
        x, w, r = ins[0], ins[1], ins[2]
        rest = list(ins[3:]) + [None] * (8 - len(ins))
        bias, lens, h0 = rest[0], rest[1], rest[2]
        for i, t in enumerate(ins):
            if t is not None and i != 4 and not t.dtype.is_float:
                raise InferError(f"input {i} must be a float tensor, got {t.dtype}")
        if x.rank != 3:
            raise InferError(f"x must have rank 3, got {x}")
        seq, batch = (x.shape[0], x.shape[1]) if attrs["layout"] == 0 else x.shape[:2][::-1]
        h = attrs["hidden_size"]
        if h <= 0:
            raise InferError(f"hidden_size must be positive, got {h}")
        dirs = 2 if attrs["direction"] == "bidirectional" else 1
        _check("w", w, (dirs, gates * h, x.shape[2]))
        _check("r", r, (dirs, gates * h, h))
        _check("bias", bias, (dirs, 2 * gates * h))
        _check("initial_h", h0, (dirs, batch, h) if attrs["layout"] == 0 else (batch, dirs, h))
        if lens is not None:
            if lens.dtype not in (DType.INT32, DType.INT64) or lens.shape != (batch,):
                raise InferError(f"sequence_lens must be int32/int64 [{batch}], got {lens}")
        if op == "lstm":
            _check(
                "initial_c", rest[3], (dirs, batch, h) if attrs["layout"] == 0 else (batch, dirs, h)
            )
            _check("peepholes", rest[4], (dirs, 3 * h))
        resolve_activations(op, attrs)
        if attrs["layout"] == 0:
            y, state = (seq, dirs, batch, h), (dirs, batch, h)
        else:
            y, state = (batch, seq, dirs, h), (batch, dirs, h)
        outs = [TensorType(y, x.dtype), TensorType(state, x.dtype)]
        if op == "lstm":
            outs.append(TensorType(state, x.dtype))
        return outs

    return infer


def _to_seq_major(x: np.ndarray | None, layout: int) -> np.ndarray | None:
    if x is None or layout == 0:
        return x
    return np.swapaxes(x, 0, 1)  # [batch, seq|dirs, ...] -> [seq|dirs, batch, ...]


def _run(op, x, w, r, bias, lens, h0, c0, peep, attrs) -> tuple[np.ndarray, ...]:
    """Shared driver: per direction, precompute x W^T, then step through time."""
    layout = attrs["layout"]
    x = _to_seq_major(x, layout)
    h0, c0 = _to_seq_major(h0, layout), _to_seq_major(c0, layout)
    seq, batch = x.shape[:2]
    h = attrs["hidden_size"]
    gates = CELLS[op][0]
    clip = attrs["clip"]
    acts = resolve_activations(op, attrs)
    dirs = len(acts)
    y = np.zeros((seq, dirs, batch, h), dtype=np.float32)
    y_h = np.zeros((dirs, batch, h), dtype=np.float32)
    y_c = np.zeros((dirs, batch, h), dtype=np.float32)
    lens = np.full(batch, seq, dtype=np.int64) if lens is None else lens.astype(np.int64)
    for d in range(dirs):
        reverse = attrs["direction"] == "reverse" or d == 1
        b = np.zeros(2 * gates * h, np.float32) if bias is None else bias[d]
        xw = np.matmul(x, w[d].T) + b[: gates * h]  # [seq, batch, gates*h]
        rb = b[gates * h :]
        hs = np.zeros((batch, h), np.float32) if h0 is None else h0[d].astype(np.float32)
        cs = np.zeros((batch, h), np.float32) if c0 is None else c0[d].astype(np.float32)
        p = None if peep is None else peep[d]
        for t in range(seq - 1, -1, -1) if reverse else range(seq):
            hr = np.matmul(hs, r[d].T) + rb
            h_new, c_new = _CELL_STEP[op](xw[t], hr, hs, cs, r[d], rb, p, acts[d], clip, attrs)
            valid = (t < lens)[:, None]  # steps past a sequence's end hold its state
            hs = np.where(valid, h_new, hs)
            cs = np.where(valid, c_new, cs)
            y[t, d] = np.where(valid, h_new, 0.0)
        empty = (lens == 0)[:, None]  # as onnxruntime: an empty sequence has zero state
        y_h[d], y_c[d] = np.where(empty, 0.0, hs), np.where(empty, 0.0, cs)
    if layout == 1:
        y, y_h, y_c = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(y_h, 0, 1), np.swapaxes(y_c, 0, 1)
    return (y, y_h, y_c) if op == "lstm" else (y, y_h)


def _clip(v: np.ndarray, clip: float | None) -> np.ndarray:
    return v if clip is None else np.clip(v, -clip, clip)


def _lstm_step(xw, hr, hs, cs, r, rb, p, acts, clip, attrs):
    f, g, hact = acts
    gi, go, gf, gc = np.split(xw + hr, 4, axis=-1)  # ONNX gate order i, o, f, c
    pi, po, pf = (0.0, 0.0, 0.0) if p is None else np.split(p, 3)
    i = f(_clip(gi + pi * cs, clip))
    forget = 1.0 - i if attrs["input_forget"] else f(_clip(gf + pf * cs, clip))
    c = forget * cs + i * g(_clip(gc, clip))
    o = f(_clip(go + po * c, clip))
    return o * hact(c), c


def _gru_step(xw, hr, hs, cs, r, rb, p, acts, clip, attrs):
    f, g = acts
    h = hs.shape[-1]
    xz, xr, xh = np.split(xw, 3, axis=-1)  # ONNX gate order z, r, h
    hz, hrr, hh = np.split(hr, 3, axis=-1)
    z = f(_clip(xz + hz, clip))
    reset = f(_clip(xr + hrr, clip))
    if attrs["linear_before_reset"]:
        cand = g(_clip(xh + reset * hh, clip))
    else:  # the reset gate scales the state before the recurrence weights
        cand = g(_clip(xh + np.matmul(reset * hs, r[2 * h :].T) + rb[2 * h :], clip))
    return (1.0 - z) * cand + z * hs, cs


def _rnn_step(xw, hr, hs, cs, r, rb, p, acts, clip, attrs):
    return acts[0](_clip(xw + hr, clip)), cs


_CELL_STEP = {"lstm": _lstm_step, "gru": _gru_step, "rnn": _rnn_step}


RECURRENT_ON_CPU = "recurrent layers run on the CPU"


@declare(
    "lstm",
    inputs=("x", "w", "r", "bias?", "sequence_lens?", "initial_h?", "initial_c?", "peepholes?"),
    outputs=("y", "y_h", "y_c"),
    attrs=(*_recurrent_attrs(3), Attr("input_forget", "bool", False)),
    infer=_recurrent_infer("lstm"),
    no_engine_form=RECURRENT_ON_CPU,
)
def lstm(x, w, r, bias=None, sequence_lens=None, initial_h=None, initial_c=None,
         peepholes=None, **attrs):  # fmt: skip
    """ONNX LSTM (gates i, o, f, c; optional peepholes; input_forget couples f = 1 - i)"""
    return _run("lstm", x, w, r, bias, sequence_lens, initial_h, initial_c, peepholes, attrs)


@declare(
    "gru",
    inputs=("x", "w", "r", "bias?", "sequence_lens?", "initial_h?"),
    outputs=("y", "y_h"),
    attrs=(*_recurrent_attrs(2), Attr("linear_before_reset", "bool", False)),
    infer=_recurrent_infer("gru"),
    no_engine_form=RECURRENT_ON_CPU,
)
def gru(x, w, r, bias=None, sequence_lens=None, initial_h=None, **attrs):
    """ONNX GRU (gates z, r, h; linear_before_reset applies the reset after R h)"""
    return _run("gru", x, w, r, bias, sequence_lens, initial_h, None, None, attrs)


@declare(
    "rnn",
    inputs=("x", "w", "r", "bias?", "sequence_lens?", "initial_h?"),
    outputs=("y", "y_h"),
    attrs=_recurrent_attrs(1),
    infer=_recurrent_infer("rnn"),
    no_engine_form=RECURRENT_ON_CPU,
)
def rnn(x, w, r, bias=None, sequence_lens=None, initial_h=None, **attrs):
    """ONNX RNN: h_t = f(x_t W^T + h_{t-1} R^T + b)"""
    return _run("rnn", x, w, r, bias, sequence_lens, initial_h, None, None, attrs)


# --- linear attention (a matrix-valued recurrent state) --------------------------------------

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_attention_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    q, k, v = ins[:3]
    state, decay, beta = (list(ins[3:]) + [None] * 3)[:3]
    for t in ins:
        if t is not None and not t.dtype.is_float:
            raise InferError(f"linear_attention takes float tensors, got {t.dtype}")
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise InferError("q, k and v must be 4-d [batch, heads, time, size]")
    b, hq, t, dk = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    if k.shape != (b, hkv, t, dk) or v.shape[:3] != (b, hkv, t) or hq % hkv:
        raise InferError(f"q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} disagree")
    _check("past_state", state, (b, hkv, dk, dv))
    rule = attrs["update_rule"]
    if (decay is not None) != rule.startswith("gated"):
        raise InferError(f"update rule '{rule}' {'needs' if decay is None else 'takes no'} decay")
    if (beta is not None) != rule.endswith("delta"):
        raise InferError(f"update rule '{rule}' {'needs' if beta is None else 'takes no'} beta")
    if decay is not None and decay.shape not in ((b, hkv, t, 1), (b, hkv, t, dk)):
        raise InferError(f"decay must be [{b}, {hkv}, {t}, 1 or {dk}], got {list(decay.shape)}")
    if beta is not None and beta.shape not in ((b, hkv, t, 1), (b, 1, t, 1)):
        raise InferError(f"beta must be [{b}, {hkv} or 1, {t}, 1], got {list(beta.shape)}")
    out_state = TensorType((b, hkv, dk, dv), state.dtype if state is not None else q.dtype)
    return [TensorType((b, hq, t, dv), q.dtype), out_state]


@declare(
    "linear_attention",
    inputs=("q", "k", "v", "past_state?", "decay?", "beta?"),
    outputs=("y", "state"),
    attrs=(
        Attr("scale", "float", None, doc="default 1/sqrt(key size)"),
        Attr("update_rule", "str", "gated_delta", choices=UPDATE_RULES),
    ),
    infer=_linear_attention_infer,
    no_lowering="not lowered yet: its recurrence would be a MIL while loop",
)
def linear_attention(q, k, v, past_state=None, decay=None, beta=None, *, scale, update_rule):
    """S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T (gating/delta per rule);
    y_t = scale q_t S_t, each KV head serving its group of query heads"""
    b, hq, t, dk = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    s = np.float32(1.0 / np.sqrt(dk) if not scale else scale)
    state = np.zeros((b, hkv, dk, dv), np.float32) if past_state is None else past_state.copy()
    y = np.zeros((b, hq, t, dv), np.float32)
    for i in range(t):  # the recurrence runs over time steps
        if decay is not None:
            state = state * np.exp(decay[:, :, i, :])[..., None]
        v_t = v[:, :, i, :]
        if beta is not None:
            v_t = beta[:, :, i, :] * (v_t - np.einsum("bhdm,bhd->bhm", state, k[:, :, i, :]))
        state = state + k[:, :, i, :, None] * v_t[:, :, None, :]
        read = np.repeat(state, hq // hkv, axis=1)
        y[:, :, i, :] = s * np.einsum("bhd,bhdm->bhm", q[:, :, i, :], read)
    return y, state
