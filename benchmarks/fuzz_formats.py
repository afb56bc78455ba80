"""Mutation fuzzer for anekit's format readers: every mutated fixture must decode or raise FormatError.

Each target is one `FuzzTarget` entry (a name, its fixtures, how to decode bytes, and the
offsets worth corrupting). A case takes one fixture, applies one seeded mutation (bit
flips, random overwrites, inserted or deleted runs, a header/table field set to an
extreme value, truncation at a structural boundary) and decodes the result. Anything
other than success or `anekit.errors.FormatError` (another exception, or a case slower
than the time limit) is a finding, recorded with its case seed so it can be replayed:

    python benchmarks/fuzz_formats.py                  # 12,000 cases per target, seed 6
    python benchmarks/fuzz_formats.py --targets hwx    # only the .hwx reader
    python benchmarks/fuzz_formats.py --targets hwx.engine --out benchmarks/results/fuzz_engine.json
                                                       # mutated .hwx run on the engine emulator
    python benchmarks/fuzz_formats.py --targets netplist netplist.weights
    python benchmarks/fuzz_formats.py --replay hwx:h13_relu:6:417
    python benchmarks/fuzz_formats.py --targets hf.config hf.safetensors hf.tokenizer peft \
        checkpoint cache --out benchmarks/results/fuzz_runtime.json
    python benchmarks/fuzz_formats.py --smoke          # 30 cases per target

Results go to benchmarks/results/fuzz_formats.json (written atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # the helpers beside this script, also when a test loads it by path
    sys.path.insert(0, _HERE)

from _common import add_smoke, results_path, write_json  # noqa: E402
from format_fuzzer import engine  # noqa: E402
from format_fuzzer.binary_targets import hwx_target, weight_bin_target  # noqa: E402
from format_fuzzer.emulator_targets import engine_target  # noqa: E402
from format_fuzzer.engine import (  # noqa: E402
    FuzzTarget,
    Run,
    Tally,
    case_rng,
    peak_rss,
    prepare,
    run_case,
)
from format_fuzzer.feed_targets import bundle_target, npy_target, npz_target  # noqa: E402
from format_fuzzer.model_targets import mil_target, onnx_target  # noqa: E402
from format_fuzzer.netplist_targets import netplist_target, netplist_weights_target  # noqa: E402
from format_fuzzer.runtime_targets import (  # noqa: E402
    cache_target,
    checkpoint_target,
    hf_config_target,
    hf_safetensors_target,
    hf_tokenizer_target,
    peft_target,
)

from anekit import budget  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "fuzz_formats.json"
DEFAULT_SEED = 6
DEFAULT_CASES = 12_000
MEMORY_BUDGET = 256 << 20  # ANEKIT_MAX_MEMORY for the run
MEMORY_SLACK = 64 << 20  # the interpreter's own growth beside what the budget counts

# Add other readers here, one entry each.
TARGET_FACTORIES: dict[str, Callable[[], FuzzTarget]] = {
    "hwx": hwx_target,
    "hwx.engine": engine_target,
    "weight.bin": weight_bin_target,
    "netplist": netplist_target,
    "netplist.weights": netplist_weights_target,
    "onnx": onnx_target,
    "mil": mil_target,
    "npy": npy_target,
    "npz": npz_target,
    "bundle": bundle_target,
    "hf.config": hf_config_target,
    "hf.safetensors": hf_safetensors_target,
    "hf.tokenizer": hf_tokenizer_target,
    "peft": peft_target,
    "checkpoint": checkpoint_target,
    "cache": cache_target,
}


def fuzz(target_names: list[str], cases: int, seed: int) -> tuple[Run, float]:
    """`cases` cases for each target, spread evenly over that target's fixtures, under the
    memory budget MEMORY_BUDGET: a case whose peak resident memory passes the process's
    size before the run plus that budget (and MEMORY_SLACK) is a finding."""
    run = Run(seed)
    targets = [TARGET_FACTORIES[name]() for name in target_names]
    plan = []
    for target in targets:
        fixtures = prepare(target)
        plan += [(target, fixture, -(-cases // len(fixtures))) for fixture in fixtures]
    engine.memory_ceiling = peak_rss() + MEMORY_BUDGET + MEMORY_SLACK
    with budget.max_memory(MEMORY_BUDGET):
        return _fuzz(run, plan, seed)


def _fuzz(run: Run, plan: list, seed: int) -> tuple[Run, float]:
    start = time.perf_counter()
    for target, fixture, per_fixture in plan:
        tallies = run.tallies.setdefault(target.name, {})
        mutations = run.by_mutation.setdefault(target.name, {})
        started = time.perf_counter()
        for case in range(per_fixture):
            kind, outcome, record = run_case(target, fixture, seed, case)
            for tally in (
                tallies.setdefault(fixture.name, Tally()),
                mutations.setdefault(kind, Tally()),
            ):
                tally.cases += 1
                if outcome == "ok":
                    tally.ok += 1
                elif outcome == "format_error":
                    tally.format_error += 1
                else:
                    tally.findings += 1
            if record is not None:
                run.findings.append(record)
        run.seconds[target.name] = run.seconds.get(target.name, 0.0) + time.perf_counter() - started
    return run, time.perf_counter() - start


def report(run: Run, seconds: float) -> dict[str, Any]:
    total = sum(t.cases for fixtures in run.tallies.values() for t in fixtures.values())
    return {
        "benchmark": "fuzz_formats",
        "seed": run.seed,
        "cases": total,
        "seconds": round(seconds, 3),
        "cases_per_second": round(total / seconds, 1) if seconds else None,
        "findings": len(run.findings),
        "targets": {
            name: {
                "cases": sum(t.cases for t in fixtures.values()),
                "seconds": round(run.seconds[name], 3),
                "cases_per_second": round(
                    sum(t.cases for t in fixtures.values()) / run.seconds[name], 1
                ),
                "fixtures": {fixture: tally.as_dict() for fixture, tally in fixtures.items()},
                "mutations": {
                    kind: tally.as_dict() for kind, tally in sorted(run.by_mutation[name].items())
                },
            }
            for name, fixtures in run.tallies.items()
        },
        "finding_records": run.findings,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "memory_budget_bytes": MEMORY_BUDGET,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def replay(spec: str) -> int:
    target_name, fixture_name, seed, case = spec.split(":")
    target = TARGET_FACTORIES[target_name]()
    fixture = next(p for p in prepare(target) if p.name == fixture_name)
    rng = case_rng(target_name, fixture_name, int(seed), int(case))
    table = target.mutation_table()
    kind = rng.choice(sorted(table))
    data, description = table[kind](rng, fixture)
    print(f"{spec}: {description}")
    target.run(fixture, data)  # let the exception, if any, show its traceback
    print("decoded without error")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets", nargs="+", default=sorted(TARGET_FACTORIES), choices=sorted(TARGET_FACTORIES)
    )
    parser.add_argument(
        "--cases",
        type=int,
        default=DEFAULT_CASES,
        help="cases per target, spread evenly over its fixtures",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument(
        "--replay", metavar="TARGET:FIXTURE:SEED:CASE", help="rerun one case with its traceback"
    )
    add_smoke(parser)
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.smoke:  # every target, a few cases each
        args.cases = min(args.cases, 30)
    run, seconds = fuzz(args.targets, args.cases, args.seed)
    doc = report(run, seconds)
    write_json(args.out or results_path(RESULTS, args.smoke), doc)
    print(
        f"{doc['cases']} cases in {doc['seconds']} s ({doc['cases_per_second']} cases/s), {doc['findings']} findings"
    )
    for name, target in doc["targets"].items():
        print(f"  {name}: {target['cases']} cases, {target['cases_per_second']} cases/s")
    for record in run.findings[:20]:
        print(f"  {record['replay']}: {record['mutation'][:80]} -> {record['problem']}")
    return 1 if run.findings else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["FuzzTarget", "TARGET_FACTORIES", "fuzz", "hwx_target", "main", "prepare", "run_case"]
