"""`anekit doctor [--json]`: can this machine run programs on the engine, and do they agree
with the simulator?

With the ``ane`` backend available it compiles a small program (a 1x1 convolution layer
with a bias and ReLU), runs it on ``ane`` and ``sim``, and reports their agreement, the
median time of a step on each, and whether a weight update takes effect on the engine
(Orion's delta reload is disputed on M5). Elsewhere it says what is missing and exits
with status 2.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from typing import Any

import numpy as np

from anekit.cli.common import add_command, print_json
from anekit.targets import DEFAULT_TARGET

EXIT_MISSING = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "doctor",
        help="check that programs run on the Neural Engine and agree with the simulator",
        description="Compile a small program, run it on 'ane' and 'sim', compare, time, and "
        "check that a weight update takes effect. Exit 2 when the engine is unavailable or a "
        "check fails.",
        examples=["anekit doctor", "anekit doctor --json"],
        json_help="print JSON on stdout",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit.runtime import backends, e5rt

    report: dict[str, Any] = {
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": sys.version.split()[0],
        "e5rt_library": e5rt.library_path(),
    }
    missing = backends.get("ane").unavailable()
    if missing is not None:
        report["ane"] = {"available": False, "missing": missing}
        _show(args, report, [f"ane: unavailable: {missing}"])
        return EXIT_MISSING
    report["ane"] = {"available": True, **_checks()}
    checks = report["ane"]
    ok = checks["agree"] and checks["update_took_effect"]
    lines = [
        f"ane: {'agrees' if checks['agree'] else 'DISAGREES'} with sim "
        f"(max |difference| {checks['max_abs_difference']:.3g}, cosine {checks['cosine']:.6f})",
        f"step: ane {checks['ane_ms']:.3f} ms, sim {checks['sim_ms']:.3f} ms (median of {checks['runs']})",
        "weight update: "
        + ("takes effect" if checks["update_took_effect"] else "does NOT take effect on ane"),
    ]
    _show(args, report, lines)
    return 0 if ok else EXIT_MISSING


def _show(args: argparse.Namespace, report: dict, lines: list[str]) -> None:
    if args.json:
        print_json(report)
        return
    print(f"platform  {report['platform']}, Python {report['python']}")
    print(f"e5rt      {report['e5rt_library']}")
    for line in lines:
        print(line)


def _checks(runs: int = 20) -> dict[str, Any]:
    import anekit
    from anekit.errors import AnekitError

    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 64, 1, 16))
    w = anekit.constant(rng.standard_normal((64, 64, 1, 1)).astype(np.float32) * 0.2, name="w")
    b = anekit.constant(rng.standard_normal((1, 64, 1, 1)).astype(np.float32) * 0.1, name="b")
    y = anekit.ops.relu(anekit.ops.add(anekit.ops.conv2d(x, w), b), name="y")
    program = anekit.compile(anekit.graph([y], name="doctor"), DEFAULT_TARGET).program
    feeds = {"x": rng.standard_normal((1, 64, 1, 16)).astype(np.float32)}
    try:
        got = {be: _timed(program, feeds, be, runs) for be in ("ane", "sim")}
        (ane, ane_ms), (sim, sim_ms) = got["ane"], got["sim"]
        diff = float(np.abs(ane - sim).max())
        cosine = float(np.dot(ane.ravel(), sim.ravel()) /
                       (np.linalg.norm(ane) * np.linalg.norm(sim) + 1e-30))  # fmt: skip
        took = True
        try:
            program.update_weights({"w": rng.standard_normal((64, 64, 1, 1)).astype(np.float32)})
        except AnekitError:  # WeightUpdateError: the engine kept the old weights
            took = False
        new_ane = program.run(feeds, "ane")["y"]
        new_sim = program.run(feeds, "sim")["y"]
        took = took and bool(np.abs(new_ane - new_sim).max() <= max(1e-2, 4 * diff))
    finally:
        program.release("ane")
    return {
        "agree": bool(diff <= 1e-2 * max(1.0, float(np.abs(sim).max())) and cosine > 0.999),
        "max_abs_difference": diff,
        "cosine": cosine,
        "ane_ms": ane_ms,
        "sim_ms": sim_ms,
        "runs": runs,
        "update_took_effect": took,
    }


def _timed(program: Any, feeds: dict, backend: str, runs: int) -> tuple[np.ndarray, float]:
    out = program.run(feeds, backend)["y"]  # loads (compiles) the program first
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        program.run(feeds, backend)
        times.append(time.perf_counter() - start)
    return out, float(np.median(times) * 1e3)
