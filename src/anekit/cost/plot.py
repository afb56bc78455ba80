"""Plots of estimates: the partition timeline and the on-chip pressure curve, one row per chip."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anekit.cost.estimate import Estimate
from anekit.errors import AnekitError, MissingDependencyError

_ANE_COLOURS = ("#4c72b0", "#6f94cf")  # alternate partitions
_COLOURS = {"cpu": "#c44e52", "dispatch": "#b0b0b0", "transition": "#dd8452"}


def require_matplotlib() -> Any:
    """matplotlib.pyplot on the Agg backend, or a MissingDependencyError naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot", "anekit estimate --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timeline(est: Estimate) -> list[tuple[float, float, str, str]]:
    """(start ms, length ms, kind, label) bars in execution order.

    An ANE segment is its dispatch, its fp32/fp16 conversion, then its partitions; a CPU
    segment is one bar.
    """
    bars = []
    t = 0.0
    for seg in est.segments:
        if seg.device != "ane":
            bars.append((t, seg.time_s * 1e3, "cpu", f"cpu {seg.index}"))
            t += seg.time_s * 1e3
            continue
        for kind, length in (("dispatch", seg.dispatch_s), ("transition", seg.transition_s)):
            if length > 0:
                bars.append((t, length * 1e3, kind, f"{kind} {seg.index}"))
                t += length * 1e3
        for part in seg.partitions:
            bars.append(
                (t, part.time_s * 1e3, f"ane{part.index % 2}", f"s{seg.index}p{part.index}")
            )
            t += part.time_s * 1e3
    return bars


def pressure_curve(est: Estimate) -> tuple[list[int], list[float], float, float]:
    """(step, on-chip MiB) over the engine layers in execution order, with limit and budget."""
    steps: list[int] = []
    mib: list[float] = []
    limit = budget = 0.0
    for seg in est.segments:
        if seg.schedule is None:
            continue
        for b in seg.schedule.pressure:
            steps.append(len(steps))
            mib.append(b / 2**20)
        limit = seg.schedule.limit_bytes / 2**20
        budget = seg.schedule.budget_bytes / 2**20
    return steps, mib, limit, budget


def plot_estimates(estimates: Sequence[Estimate], path: Path, title: str = "") -> None:
    """Draw every estimate (a row of two panels each) into a PNG, written atomically."""
    plt = require_matplotlib()
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise AnekitError(f"plot output '{path}' must end in .png")
    if not path.parent.exists():
        raise AnekitError(f"plot directory '{path.parent}' does not exist")
    rows = len(estimates)
    fig, axes = plt.subplots(rows, 2, figsize=(13, 1.6 + 1.5 * rows), squeeze=False)
    for (ax_time, ax_mem), est in zip(axes, estimates, strict=True):
        for start, length, kind, _ in timeline(est):
            colour = _ANE_COLOURS[int(kind[-1])] if kind.startswith("ane") else _COLOURS[kind]
            ax_time.barh(0, length, left=start, color=colour, edgecolor="white", linewidth=0.5)
        ax_time.set_yticks([0], [est.target])
        ax_time.set_xlim(0, max(est.total_ms, 1e-6))
        ax_time.set_title(
            f"{est.target}: {est.total_ms:.3f} ms, {est.bottleneck}-bound, "
            f"{est.partitions} partitions",
            fontsize=9,
            loc="left",
        )
        steps, mib, limit, budget = pressure_curve(est)
        note = ""
        if steps:
            ax_mem.step(steps, mib, where="mid", color=_ANE_COLOURS[0], linewidth=1)
            top = max(mib) * 1.25 or 1.0
            if limit <= top * 2:  # draw the limits when they are on the scale of the curve
                ax_mem.axhline(limit, color="#dd8452", linestyle="--", linewidth=0.8)
                ax_mem.axhline(budget, color="#c44e52", linewidth=0.8)
            else:
                ax_mem.set_ylim(0, top)
                note = f"; limit {limit:.1f} MiB, budget {budget:.0f} MiB, off scale"
        ax_mem.set_ylabel("MiB", fontsize=8)
        ax_mem.set_title(
            f"on-chip pressure (limit dashed, budget solid{note})", fontsize=9, loc="left"
        )
    axes[-1][0].set_xlabel(
        "ms (grey: dispatch, orange: fp32/fp16 transfer, blue: partitions, red: CPU)"
    )
    axes[-1][1].set_xlabel("engine layer, in execution order")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
