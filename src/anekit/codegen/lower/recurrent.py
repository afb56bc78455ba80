"""Lowering of lstm, gru and rnn (ONNX semantics) to MIL, unrolled over the static sequence.

Per direction, the input projection of every step is one matmul (x W^T + Wb); each step then
adds h R^T + Rb, splits the gates and applies the cell's activations, clip, peepholes,
input_forget and linear_before_reset as the IR kernel does. Constant ``sequence_lens`` become
constant per-step masks (a finished sequence keeps its state and outputs zeros). Weights,
biases and peepholes must be constants; computed ones are refused with a clear message.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.codegen.lower.nn import matmul
from anekit.ir.ops.recurrent import CELLS, DEFAULT_ALPHA, DEFAULT_BETA

LowerFn = Callable[[Lowering], object]
_INPUTS = {"x": 0, "w": 1, "r": 2, "bias": 3, "sequence_lens": 4, "initial_h": 5, "initial_c": 6,
           "peepholes": 7}  # fmt: skip


class _Cell:
    """Emits the ops of one recurrence: shapes, activations and elementwise helpers."""

    def __init__(self, lo: Lowering, op: str):
        self.lo, self.op = lo, op
        self.h = lo.attrs["hidden_size"]
        self.clip = lo.attrs["clip"]

    def const(self, name: str) -> np.ndarray | None:
        i = _INPUTS[name]
        a = self.lo.arg(i)
        if a is not None and a.const is None:
            raise self.lo.error(f"{self.op} with a computed {name} has no MIL lowering here")
        return None if a is None else np.asarray(a.const, np.float32)

    def ew(self, kind: str, x: str, y: str, shape: tuple[int, ...]) -> str:
        return self.lo.tmp(kind, {"x": x, "y": y}, shape, hint=kind)

    def clipped(self, x: str, shape: tuple[int, ...]) -> str:
        if self.clip is None:
            return x
        lo = self.lo
        return lo.tmp(
            "clip",
            {"x": x, "alpha": lo.f("minus_clip", -self.clip), "beta": lo.f("clip", self.clip)},
            shape,
        )

    def act(self, name: str, alpha: float, beta: float, x: str, shape: tuple[int, ...]) -> str:
        lo = self.lo
        simple = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "softsign": "softsign",
                  "softplus": "softplus"}  # fmt: skip
        if name in simple:
            return lo.tmp(simple[name], {"x": x}, shape, hint=name)
        if name == "affine":
            return self.ew(
                "add", self.ew("mul", x, lo.f("alpha", alpha), shape), lo.f("beta", beta), shape
            )
        if name == "leakyrelu":
            return lo.tmp("leaky_relu", {"x": x, "alpha": lo.f("alpha", alpha)}, shape)
        if name == "thresholdedrelu":
            return lo.tmp("thresholded_relu", {"x": x, "alpha": lo.f("alpha", alpha)}, shape)
        if name == "scaledtanh":
            inner = self.ew("mul", x, lo.f("beta", beta), shape)
            return self.ew("mul", lo.tmp("tanh", {"x": inner}, shape), lo.f("alpha", alpha), shape)
        if name == "hardsigmoid":
            return lo.tmp(
                "sigmoid_hard",
                {"x": x, "alpha": lo.f("alpha", alpha), "beta": lo.f("beta", beta)},
                shape,
            )
        if name == "elu":
            return lo.tmp("elu", {"x": x, "alpha": lo.f("alpha", alpha)}, shape)
        raise lo.error(f"activation '{name}' has no MIL lowering here")


def _activations(lo: Lowering, op: str) -> list[list[tuple[str, float, float]]]:
    """Per direction, (name, alpha, beta) of each activation, as the IR resolves them."""
    per_dir, defaults = CELLS[op][1], CELLS[op][2]
    dirs = 2 if lo.attrs["direction"] == "bidirectional" else 1
    names = [n.lower() for n in lo.attrs["activations"]] or list(defaults) * dirs
    alphas, betas = list(lo.attrs["activation_alpha"]), list(lo.attrs["activation_beta"])
    counts = {"affine": (1, 1), "leakyrelu": (1, 0), "thresholdedrelu": (1, 0), "scaledtanh": (1, 1),
              "hardsigmoid": (1, 1), "elu": (1, 0)}  # fmt: skip
    out = []
    for name in names:
        n_alpha, n_beta = counts.get(name, (0, 0))
        a = alphas.pop(0) if n_alpha and alphas else DEFAULT_ALPHA.get(name, 0.0)
        b = betas.pop(0) if n_beta and betas else DEFAULT_BETA.get(name, 0.0)
        out.append((name, a, b))
    return [out[d * per_dir : (d + 1) * per_dir] for d in range(dirs)]


def _recurrent(op: str) -> LowerFn:
    def lower(lo: Lowering) -> list[str]:
        cell = _Cell(lo, op)
        x = lo.need(0)
        layout, h = lo.attrs["layout"], cell.h
        gates = CELLS[op][0]
        seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
        xs = lo.x(0)
        if layout == 1:
            xs = lo.tmp(
                "transpose", {"x": xs, "perm": lo.p("perm", [1, 0, 2])}, (seq, batch, x.shape[2])
            )
        w, r, bias, peep = (cell.const(n) for n in ("w", "r", "bias", "peepholes"))
        lens = lo.arg(4)
        if lens is not None and lens.const is None:
            raise lo.error(f"{op} with computed sequence_lens has no MIL lowering here")
        lengths = np.full(batch, seq) if lens is None else np.asarray(lens.const, np.int64)
        acts = _activations(lo, op)
        ys, finals_h, finals_c = [], [], []
        state_shape = (batch, h)
        for d, act in enumerate(acts):
            reverse = lo.attrs["direction"] == "reverse" or d == 1
            b = np.zeros(2 * gates * h, np.float32) if bias is None else bias[d]
            xw = matmul(
                lo,
                xs,
                lo.t(w[d], f"w{d}"),
                transpose_y=True,
                out=False,
                shape=(seq, batch, gates * h),
            )  # type: ignore[index]
            xw = cell.ew("add", xw, lo.t(b[: gates * h], f"wb{d}"), (seq, batch, gates * h))
            r_d, rb = lo.t(r[d], f"r{d}"), lo.t(b[gates * h :], f"rb{d}")  # type: ignore[index]
            hs = _initial_state(lo, _INPUTS["initial_h"], d, state_shape)
            cs = _initial_state(lo, _INPUTS["initial_c"], d, state_shape)
            outputs: dict[int, str] = {}
            for t in range(seq - 1, -1, -1) if reverse else range(seq):
                xt = lo.tmp("slice_by_index", {"x": xw, "begin": lo.p("begin", [t, 0, 0]),
                                                "end": lo.p("end", [t + 1, batch, gates * h])},
                            (1, batch, gates * h), hint="step")  # fmt: skip
                xt = lo.tmp(
                    "reshape",
                    {"x": xt, "shape": lo.p("shape", [batch, gates * h])},
                    (batch, gates * h),
                )
                hr = cell.ew("add", matmul(lo, hs, r_d, transpose_y=True, out=False, shape=(batch, gates * h)), rb,
                             (batch, gates * h))  # fmt: skip
                h_new, c_new = _STEPS[op](cell, xt, hr, hs, cs, r[d], b, peep, d, act)  # type: ignore[index]
                valid = t < lengths
                if valid.all():
                    hs, cs, out = h_new, c_new, h_new
                else:
                    mask = lo.t(np.broadcast_to(valid[:, None], state_shape).copy(), "valid")
                    hs = lo.tmp(
                        "select", {"cond": mask, "a": h_new, "b": hs}, state_shape, hint="h"
                    )
                    cs = lo.tmp(
                        "select", {"cond": mask, "a": c_new, "b": cs}, state_shape, hint="c"
                    )
                    out = lo.tmp(
                        "select",
                        {"cond": mask, "a": h_new, "b": lo.f("zero", 0.0)},
                        state_shape,
                        hint="y",
                    )
                outputs[t] = lo.tmp(
                    "reshape",
                    {"x": out, "shape": lo.p("shape", [1, 1, batch, h])},
                    (1, 1, batch, h),
                )
            ys.append(_join(lo, [outputs[t] for t in range(seq)], 0, (seq, 1, batch, h)))
            empty = lengths == 0
            if empty.any():  # as onnxruntime: an empty sequence has zero state
                keep = lo.t(np.broadcast_to(~empty[:, None], state_shape).copy(), "nonempty")
                hs = lo.tmp("select", {"cond": keep, "a": hs, "b": lo.f("zero", 0.0)}, state_shape)
                cs = lo.tmp("select", {"cond": keep, "a": cs, "b": lo.f("zero", 0.0)}, state_shape)
            finals_h.append(
                lo.tmp("reshape", {"x": hs, "shape": lo.p("shape", [1, batch, h])}, (1, batch, h))
            )
            finals_c.append(
                lo.tmp("reshape", {"x": cs, "shape": lo.p("shape", [1, batch, h])}, (1, batch, h))
            )
        dirs = len(acts)
        y = _join(lo, ys, 1, (seq, dirs, batch, h))
        y_h = _join(lo, finals_h, 0, (dirs, batch, h))
        results = [y, y_h] + ([_join(lo, finals_c, 0, (dirs, batch, h))] if op == "lstm" else [])
        if layout == 1:
            y = lo.tmp(
                "transpose", {"x": y, "perm": lo.p("perm", [2, 0, 1, 3])}, (batch, seq, dirs, h)
            )
            results = [y] + [
                lo.tmp("transpose", {"x": s, "perm": lo.p("perm", [1, 0, 2])}, (batch, dirs, h))
                for s in results[1:]
            ]
        return [_name(lo, i, v) for i, v in enumerate(results)]

    return lower


def _initial_state(lo: Lowering, i: int, d: int, shape: tuple[int, int]) -> str:
    """Direction ``d``'s initial state [batch, hidden] from input ``i`` (zeros if absent)."""
    a = lo.arg(i)
    if a is None:
        return lo.t(np.zeros(shape, np.float32), "state0")
    seq_major = lo.attrs["layout"] == 0  # [dirs, batch, h]; layout 1 is [batch, dirs, h]
    if a.const is not None:
        state = a.const[d] if seq_major else a.const[:, d]
        return lo.t(np.asarray(state, np.float32), "state0")
    begin, end = (
        ([d, 0, 0], [d + 1, *shape]) if seq_major else ([0, d, 0], [shape[0], d + 1, shape[1]])
    )
    sliced_shape = (1, *shape) if seq_major else (shape[0], 1, shape[1])
    part = lo.tmp("slice_by_index", {"x": lo.var(a), "begin": lo.p("begin", begin), "end": lo.p("end", end)},
                  sliced_shape, hint="state0")  # fmt: skip
    return lo.tmp("reshape", {"x": part, "shape": lo.p("shape", list(shape))}, shape, hint="state0")


def _join(lo: Lowering, parts: list[str], axis: int, shape: tuple[int, ...]) -> str:
    if len(parts) == 1:
        return parts[0]
    return lo.tmp("concat", {"values": parts, "axis": lo.p("axis", np.int32(axis)),
                             "interleave": lo.p("interleave", False)}, shape, hint="joined")  # fmt: skip


def _name(lo: Lowering, i: int, var: str) -> str:
    """Output ``i`` under its reserved name."""
    if lo.call.names[i] is None:
        return var
    return lo.out("identity", {"x": var}, i)


def _lstm(cell: _Cell, xt, hr, hs, cs, r, b, peep, d, act):  # noqa: ANN001, ANN202
    lo, h = cell.lo, cell.h
    shape = (int(lo.need(0).shape[1 if lo.attrs["layout"] == 0 else 0]), h)
    pre = cell.ew("add", xt, hr, (shape[0], 4 * h))
    gi, go, gf, gc = lo.b.multi_op(
        "split", {"x": pre, "split_sizes": lo.p("split_sizes", [h] * 4), "axis": lo.p("axis", np.int32(-1))},
        [(lo.b.namer.fresh(f"{lo.call.hint}_{g}"), shape, lo.fdtype) for g in "iofc"],
    )  # fmt: skip
    (f, fa, fb), (g, ga, gb), (ha, haa, hab) = act
    po = None
    if peep is not None:  # ONNX peephole order: i, o, f
        pi, po, pf = (lo.t(peep[d][k * h : (k + 1) * h], f"p{k}") for k in range(3))
        gi = cell.ew("add", gi, cell.ew("mul", pi, cs, shape), shape)
        gf = cell.ew("add", gf, cell.ew("mul", pf, cs, shape), shape)
    i = cell.act(f, fa, fb, cell.clipped(gi, shape), shape)
    if lo.attrs["input_forget"]:
        forget = lo.tmp("sub", {"x": lo.f("one", 1.0), "y": i}, shape)
    else:
        forget = cell.act(f, fa, fb, cell.clipped(gf, shape), shape)
    c = cell.ew(
        "add",
        cell.ew("mul", forget, cs, shape),
        cell.ew("mul", i, cell.act(g, ga, gb, cell.clipped(gc, shape), shape), shape),
        shape,
    )
    if po is not None:
        go = cell.ew("add", go, cell.ew("mul", po, c, shape), shape)
    o = cell.act(f, fa, fb, cell.clipped(go, shape), shape)
    return cell.ew("mul", o, cell.act(ha, haa, hab, c, shape), shape), c


def _gru(cell: _Cell, xt, hr, hs, cs, r, b, peep, d, act):  # noqa: ANN001, ANN202
    lo, h = cell.lo, cell.h
    batch = int(lo.need(0).shape[1 if lo.attrs["layout"] == 0 else 0])
    shape = (batch, h)

    def parts(var: str, tag: str) -> list[str]:
        names = [(lo.b.namer.fresh(f"{lo.call.hint}_{tag}{g}"), shape, lo.fdtype) for g in "zrh"]
        inputs = {
            "x": var,
            "split_sizes": lo.p("split_sizes", [h] * 3),
            "axis": lo.p("axis", np.int32(-1)),
        }
        return lo.b.multi_op("split", inputs, names)

    (xz, xr, xh), (hz, hrr, hh) = parts(xt, "x"), parts(hr, "h")
    (f, fa, fb), (g, ga, gb) = act
    z = cell.act(f, fa, fb, cell.clipped(cell.ew("add", xz, hz, shape), shape), shape)
    reset = cell.act(f, fa, fb, cell.clipped(cell.ew("add", xr, hrr, shape), shape), shape)
    if lo.attrs["linear_before_reset"]:
        inner = cell.ew("add", xh, cell.ew("mul", reset, hh, shape), shape)
    else:  # the reset gate scales the state before the recurrence weights
        scaled = cell.ew("mul", reset, hs, shape)
        rec = matmul(lo, scaled, lo.t(r[2 * h :], "r_h"), transpose_y=True, out=False, shape=shape)
        inner = cell.ew("add", xh, cell.ew("add", rec, lo.t(b[5 * h :], "rb_h"), shape), shape)
    cand = cell.act(g, ga, gb, cell.clipped(inner, shape), shape)
    one_minus = lo.tmp("sub", {"x": lo.f("one", 1.0), "y": z}, shape)
    return cell.ew(
        "add", cell.ew("mul", one_minus, cand, shape), cell.ew("mul", z, hs, shape), shape
    ), cs


def _rnn(cell: _Cell, xt, hr, hs, cs, r, b, peep, d, act):  # noqa: ANN001, ANN202
    batch = int(cell.lo.need(0).shape[1 if cell.lo.attrs["layout"] == 0 else 0])
    shape = (batch, cell.h)
    (f, fa, fb), = act  # fmt: skip
    return cell.act(f, fa, fb, cell.clipped(cell.ew("add", xt, hr, shape), shape), shape), cs


_STEPS = {"lstm": _lstm, "gru": _gru, "rnn": _rnn}

LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {"lstm": _recurrent("lstm"), "gru": _recurrent("gru"), "rnn": _recurrent("rnn")}
)
