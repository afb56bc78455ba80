"""The engine's arithmetic, as best known: fp16 storage, fp32 products and accumulation,
one round-to-nearest-even to fp16 when a result leaves the engine."""

from __future__ import annotations

import numpy as np

from anekit.formats.hwx.h13 import LUT_FIRST, LUT_LOW, LUT_SAMPLES, LUT_STEP

# The activation table (its layout: anekit.formats.hwx.h13). The emulator's reading: the
# engine interpolates linearly between samples and inputs outside [-8, 8] take the end
# samples; entries 0..3 and 37.. are kept but not interpreted (see docs/engine.md).


def conv(
    x: np.ndarray,
    weights: np.ndarray,
    stride: tuple[int, int],
    padding: tuple[int, int],
    groups: int,
    out_hw: tuple[int, int],
) -> np.ndarray:
    """x [Cin, H, W] fp16, weights [Cout, Cin/groups, Kh, Kw] fp16 -> [Cout, Hout, Wout] fp32."""
    cout, cin_g, kh, kw = weights.shape
    (sy, sx), (py, px), (hout, wout) = stride, padding, out_hw
    padded = np.pad(x.astype(np.float32), ((0, 0), (py, py), (px, px)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(1, 2))
    windows = windows[:, : (hout - 1) * sy + 1 : sy, : (wout - 1) * sx + 1 : sx]
    out = np.empty((cout, hout, wout), np.float32)
    cout_g = cout // groups
    w32 = weights.astype(np.float32)
    for g in range(groups):  # NaN/inf weights propagate as on the engine, silently
        patch = windows[g * cin_g : (g + 1) * cin_g]  # [cin_g, Hout, Wout, Kh, Kw]
        kernel = w32[g * cout_g : (g + 1) * cout_g]  # [cout_g, cin_g, Kh, Kw]
        with np.errstate(invalid="ignore", over="ignore"):
            out[g * cout_g : (g + 1) * cout_g] = np.tensordot(
                kernel, patch, axes=([1, 2, 3], [0, 3, 4])
            )
    return out


def lookup(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The piecewise-linear activation of `values` (fp32) through a 33-sample fp16 table."""
    samples = table[LUT_FIRST : LUT_FIRST + LUT_SAMPLES].astype(np.float32)
    position = np.clip((values - LUT_LOW) / LUT_STEP, 0.0, LUT_SAMPLES - 1)
    left = np.minimum(np.floor(position).astype(np.int64), LUT_SAMPLES - 2)
    fraction = position - left
    return samples[left] + fraction * (samples[left + 1] - samples[left])


_PLANAR = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def planar(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The planar engine's element-wise op on two fp32-widened sources."""
    return _PLANAR[op](x, y)


def to_fp16(values: np.ndarray) -> np.ndarray:
    """Round to fp16 (nearest even), saturating nothing: overflow is inf as on IEEE fp16."""
    with np.errstate(over="ignore"):
        return values.astype(np.float16)
