"""A short recurrence (LSTM, GRU, RNN of a few steps) unrolled into engine ops.

A streaming model runs one step per call and carries its state between calls (silero-vad's
LSTM, keyword spotters): as one CPU op it split the model into engine / CPU / engine
segments, three dispatches with their copies for a handful of small products. Unrolled,
each step is the cell's own arithmetic (a product with the recurrence weights, the bias,
the gate activations) and the whole model stays on the engine. Only the plain cells are
unrolled: constant weights, the default activations, no clip, peepholes, input_forget or
sequence_lens, layout 0. A longer recurrence would be a chain of about a dozen small
dependent layers per step, so from MAX_UNROLLED_STEPS on it stays one CPU op.
"""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.ir.ops.recurrent import CELLS
from anekit.passes.decompose.emit import Emit
from anekit.passes.rewrite import Rewriter, rule

MAX_UNROLLED_STEPS = 4  # steps x directions

# inputs beyond x, w, r, bias and the initial states that make a cell other than plain
_SPECIAL_INPUTS = {"lstm": (4, 7), "gru": (4,), "rnn": (4,)}  # sequence_lens, peepholes


@rule("lstm", "gru", "rnn")
def unroll_short_recurrence(rw: Rewriter, node: Node) -> bool:
    op, at = node.op, node.attrs
    ins = list(node.inputs) + [None] * (8 - len(node.inputs))
    x = ins[0]
    w, r = rw.const(ins[1]), rw.const(ins[2])
    bias = rw.const(ins[3]) if ins[3] else None
    gates, _, defaults = CELLS[op]
    dirs = 2 if at["direction"] == "bidirectional" else 1
    seq, batch, _ = rw.shape(x)
    plain = (
        w is not None and r is not None and (bias is not None or not ins[3])
        and not any(ins[i] for i in _SPECIAL_INPUTS[op])
        and at["clip"] is None and at["layout"] == 0 and not at.get("input_forget", False)
        and [a.lower() for a in at["activations"]] in ([], list(defaults) * dirs)
    )  # fmt: skip
    if not plain or seq * dirs > MAX_UNROLLED_STEPS or not rw.value(x).dtype.is_float:
        return False
    h = at["hidden_size"]
    e = Emit(rw, node)
    finals_h, finals_c, ys = [], [], []
    for d in range(dirs):
        b = np.zeros(2 * gates * h, np.float32) if bias is None else bias[d]
        cell = _Cell(e, op, h, batch, d, r[d], b)
        xw = e("matmul", [x, e.const(np.ascontiguousarray(w[d].T), f"w{d}")], tag=f"x_w{d}")
        hs = cell.initial(ins[5], "h")
        cs = cell.initial(ins[6], "c") if op == "lstm" else None
        steps: dict[int, str] = {}
        reverse = at["direction"] == "reverse" or d == 1
        for t in range(seq - 1, -1, -1) if reverse else range(seq):
            xt = e("slice", [xw], {"starts": (t,), "ends": (t + 1,), "axes": (0,)}, f"x{d}_{t}")
            xt = e("reshape", [xt], {"shape": (batch, gates * h)}, f"x{d}_{t}_rows")
            hs, cs = cell.step(xt, hs, cs, t, at.get("linear_before_reset", False))
            steps[t] = e("reshape", [hs], {"shape": (1, 1, batch, h)}, f"y{d}_{t}")
        ys.append(_joined(e, [steps[t] for t in range(seq)], 0, f"y{d}"))
        finals_h.append(e("reshape", [hs], {"shape": (1, batch, h)}, f"h{d}"))
        if cs is not None:
            finals_c.append(e("reshape", [cs], {"shape": (1, batch, h)}, f"c{d}"))
    results = [_joined(e, ys, 1, "y"), _joined(e, finals_h, 0, "y_h")]
    if op == "lstm":
        results.append(_joined(e, finals_c, 0, "y_c"))
    for out, value in zip(node.outputs, results, strict=False):
        if out:
            rw.replace_uses(out, value)
    rw.ctx.event(node.origin, "decomposed",
                 f"{op} of {seq} step(s) x {dirs} direction(s) unrolled into engine ops")  # fmt: skip
    return True


def _joined(e: Emit, parts: list[str], axis: int, tag: str) -> str:
    return parts[0] if len(parts) == 1 else e("concat", parts, {"axis": axis}, tag)


class _Cell:
    """One direction's step: ONNX's gate order and equations (ir/ops/recurrent.py)."""

    def __init__(self, e: Emit, op: str, h: int, batch: int, d: int, r: np.ndarray, b: np.ndarray):
        self.e, self.op, self.h, self.batch, self.d = e, op, h, batch, d
        gates = CELLS[op][0]
        self.wb = e.const(b[: gates * h], f"wb{d}")
        rb = b[gates * h :]
        if op == "gru":  # the candidate's recurrence product stands apart from the gates'
            self.r_zr = e.const(np.ascontiguousarray(r[: 2 * h].T), f"r{d}_zr")
            self.r_h = e.const(np.ascontiguousarray(r[2 * h :].T), f"r{d}_h")
            self.rb_zr = e.const(rb[: 2 * h], f"rb{d}_zr")
            self.rb_h = e.const(rb[2 * h :], f"rb{d}_h")
        else:
            self.r_t = e.const(np.ascontiguousarray(r.T), f"r{d}")  # [h, gates * h]
            self.rb = e.const(rb, f"rb{d}")

    def initial(self, value: str | None, which: str) -> str:
        e, d, shape = self.e, self.d, (self.batch, self.h)
        if not value:
            return e.const(np.zeros(shape, np.float32), f"{which}0_{d}")
        part = e("slice", [value], {"starts": (d,), "ends": (d + 1,), "axes": (0,)}, f"{which}0_{d}")
        return e("reshape", [part], {"shape": shape}, f"{which}0_{d}_rows")

    def _columns(self, z: str, lo: int, hi: int, tag: str) -> str:
        return self.e("slice", [z], {"starts": (lo * self.h,), "ends": (hi * self.h,), "axes": (1,)}, tag)

    def _gate(self, z: str, k: int, tag: str) -> str:
        return self._columns(z, k, k + 1, tag)

    def step(self, xt: str, hs: str, cs: str | None, t: int, linear_before_reset: bool):
        e, tag = self.e, f"{self.d}_{t}"
        xb = e("add", [xt, self.wb], tag=f"xb{tag}")
        if self.op == "lstm":
            z = e("add", [xb, e("add", [e("matmul", [hs, self.r_t], tag=f"h_r{tag}"), self.rb],
                                 tag=f"hb{tag}")], tag=f"z{tag}")  # fmt: skip
            i = e("sigmoid", [self._gate(z, 0, f"i{tag}")], tag=f"i{tag}_act")
            o = e("sigmoid", [self._gate(z, 1, f"o{tag}")], tag=f"o{tag}_act")
            f = e("sigmoid", [self._gate(z, 2, f"f{tag}")], tag=f"f{tag}_act")
            g = e("tanh", [self._gate(z, 3, f"g{tag}")], tag=f"g{tag}_act")
            c = e("add", [e("mul", [f, cs], tag=f"fc{tag}"), e("mul", [i, g], tag=f"ig{tag}")],
                  tag=f"c{tag}")  # fmt: skip
            return e("mul", [o, e("tanh", [c], tag=f"c{tag}_act")], tag=f"h{tag}"), c
        if self.op == "rnn":
            hr = e("add", [e("matmul", [hs, self.r_t], tag=f"h_r{tag}"), self.rb], tag=f"hb{tag}")
            return e("tanh", [e("add", [xb, hr], tag=f"z{tag}")], tag=f"h{tag}"), None
        hzr = e("add", [e("matmul", [hs, self.r_zr], tag=f"h_zr{tag}"), self.rb_zr], tag=f"hzr{tag}")
        xz = self._columns(xb, 0, 2, f"xzr{tag}")
        zr = e("sigmoid", [e("add", [xz, hzr], tag=f"zr{tag}")], tag=f"zr{tag}_act")
        z, reset = self._gate(zr, 0, f"z{tag}"), self._gate(zr, 1, f"r{tag}")
        xh = self._gate(xb, 2, f"xh{tag}")
        if linear_before_reset:
            hh = e("add", [e("matmul", [hs, self.r_h], tag=f"h_h{tag}"), self.rb_h], tag=f"hh{tag}")
            inner = e("mul", [reset, hh], tag=f"rh{tag}")
        else:  # the reset gate scales the state before the recurrence product
            rs = e("mul", [reset, hs], tag=f"rs{tag}")
            inner = e("add", [e("matmul", [rs, self.r_h], tag=f"rs_h{tag}"), self.rb_h],
                      tag=f"rsb{tag}")  # fmt: skip
        cand = e("tanh", [e("add", [xh, inner], tag=f"n{tag}")], tag=f"n{tag}_act")
        # (1 - z) * cand + z * hs, as the IR kernel computes it
        keep = e("sub", [e.const(np.float32(1.0), f"one{tag}"), z], tag=f"keep{tag}")
        new = e("add", [e("mul", [keep, cand], tag=f"kn{tag}"), e("mul", [z, hs], tag=f"zh{tag}")],
                tag=f"h{tag}")  # fmt: skip
        return new, None
