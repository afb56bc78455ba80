"""Benchmark: CPU ops and dispatches per architecture on m1 and m4, before and after the
legalising passes (the default pipeline without and with `pipeline.LEGALISING_PASSES`).

Writes ``benchmarks/results/cpu_fallback_zoo.json`` and prints a Markdown table for the
README. The architectures are tests/arch_zoo (torchvision-style models written in torch,
transformers models from tiny configs, small models around the legalised ops), exported
with torch's dynamo exporter (TorchScript when dynamo fails).

    python benchmarks/cpu_fallback_zoo.py [--model NAME ...]

``python benchmarks/cpu_fallback_zoo.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the zoo lives in tests/

from tests.arch_zoo import ARCHITECTURES  # noqa: E402

from anekit.compiler import compile as compile_model  # noqa: E402
from anekit.errors import AnekitError  # noqa: E402
from anekit.frontend.torch import from_torch  # noqa: E402
from anekit.passes.pipeline import DEFAULT_PIPELINE, LEGALISING_PASSES  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "cpu_fallback_zoo.json"
CHIPS = ("m1", "m4")
BEFORE = tuple(p for p in DEFAULT_PIPELINE if p not in LEGALISING_PASSES)


def _import(name: str):
    errors = []
    try:
        module, inputs, names = ARCHITECTURES[name]()
    except Exception as exc:  # noqa: BLE001 - a builder that fails is recorded, not fatal
        return None, None, [f"build: {type(exc).__name__}: {str(exc)[:200]}"]
    for exporter in ("dynamo", "torchscript"):
        try:
            return from_torch(module, inputs, list(names), exporter=exporter), exporter, errors
        except Exception as exc:  # noqa: BLE001 - record why and try the other exporter
            errors.append(f"{exporter}: {type(exc).__name__}: {str(exc)[:200]}")
    return None, None, errors


def _placement(graph, chip: str, passes) -> dict:
    cm = compile_model(graph, chip, passes=passes)
    s = cm.summary
    cpu_ops = sorted({r.op for r in cm.ops if r.placement == "cpu"})
    return {
        "engine_layers": s["engine_layers"],
        "cpu_ops": s["cpu_ops"],
        "dispatches": s["dispatches"],
        "cpu_op_types": cpu_ops,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", action="append", help="architecture names (default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_smoke(parser)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    names = args.model or (["timestep_mlp"] if args.smoke else list(ARCHITECTURES))
    rows = []
    for name in names:
        start = time.perf_counter()
        graph, exporter, errors = _import(name)
        row: dict = {"model": name, "exporter": exporter}
        if graph is None:
            row["error"] = errors
            rows.append(row)
            print(f"{name:22s} export failed: {errors[-1][:120]}", flush=True)
            continue
        row["nodes"] = len(graph.nodes)
        for chip in CHIPS:
            try:
                row[chip] = {
                    "before": _placement(graph, chip, BEFORE),
                    "after": _placement(graph, chip, DEFAULT_PIPELINE),
                }
            except AnekitError as exc:
                row[chip] = {"error": str(exc)}
        row["seconds"] = round(time.perf_counter() - start, 2)
        rows.append(row)
        cells = [
            f"{chip} cpu {r['before']['cpu_ops']}->{r['after']['cpu_ops']} "
            f"dispatch {r['before']['dispatches']}->{r['after']['dispatches']}"
            for chip in CHIPS
            if "before" in (r := row[chip])
        ]
        print(f"{name:22s} {'; '.join(cells)}", flush=True)
    print()
    print(
        "| model | m1 CPU ops before | after | m1 dispatches before | after | m4 CPU ops before | after | m4 dispatches before | after | still on the CPU (m4) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "m4" not in row or "before" not in row["m4"] or "before" not in row["m1"]:
            continue
        m1, m4 = row["m1"], row["m4"]
        print(
            f"| {row['model']} | {m1['before']['cpu_ops']} | {m1['after']['cpu_ops']} | "
            f"{m1['before']['dispatches']} | {m1['after']['dispatches']} | "
            f"{m4['before']['cpu_ops']} | {m4['after']['cpu_ops']} | "
            f"{m4['before']['dispatches']} | {m4['after']['dispatches']} | "
            f"{', '.join(m4['after']['cpu_op_types']) or '-'} |"
        )
    report = {
        "benchmark": "cpu_fallback_zoo",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "before_pipeline": list(BEFORE),
        "after_pipeline": list(DEFAULT_PIPELINE),
        "models": rows,
    }
    write_json(results_path(args.output, args.smoke), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
