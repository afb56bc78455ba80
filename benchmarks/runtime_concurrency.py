"""Concurrency stress: N processes loading, running, updating and recompiling one bundle and
compiling into one program cache, for a fixed time; afterwards every bundle and cache entry
must load whole, and every output any process saw must be one the weights allow.

Writes ``benchmarks/results/runtime_concurrency.json``.

The model is ``y = (x W1) W2`` with W1 in {A, B} and W2 in {C, D}: every state a writer
can leave is one of four, so each output a reader gets is checked against the four
outputs computed up front (a torn bundle would give a fifth, or fail its digests). Roles,
one process each, round robin over ``--processes``:

- ``loader``: ``load`` the bundle (digests verified), run it, check the output;
- ``updater-w1`` / ``updater-w2``: keep one loaded program and write W1 (or W2) with
  alternating values through ``update_weights``; when the bundle was recompiled under
  it, the update is refused (``StaleProgramError``): it loads again and goes on;
- ``recompiler``: compile the model with a random (W1, W2) and save it over the bundle
  (the atomic folder replace);
- ``cache``: ``load_or_compile`` one of the four models through the shared cache and check
  the program it is given.

Counted per role: operations, refusals (a stale program's update), corrupt reads (a load
whose digests failed, or an output outside the four: a finding) and unexpected errors
(anything else: a finding). The run fails unless findings are 0 and the bundle and cache
check whole afterwards.

    python benchmarks/runtime_concurrency.py [--processes 6] [--seconds 60]
    python benchmarks/runtime_concurrency.py --smoke     # 5 processes, 3 seconds
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from _common import add_smoke, machine, results_path, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "runtime_concurrency.json"
N = 128  # the model's width: small programs, so that most time goes to the files
ROLES = ("loader", "updater-w1", "updater-w2", "recompiler", "cache", "loader")


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(26)
    return {k: (rng.standard_normal((N, N)) * 0.05).astype(np.float32) for k in "ABCD"}


FEEDS = {"x": np.random.default_rng(7).standard_normal((1, N)).astype(np.float32)}


def _graph(w1: np.ndarray, w2: np.ndarray) -> Any:
    import anekit

    x = anekit.input("x", (1, N))
    h = anekit.ops.matmul(x, anekit.constant(w1, name="w1"), name="h")
    return anekit.graph([anekit.ops.matmul(h, anekit.constant(w2, name="w2"), name="y")])


def _expected(values: dict[str, np.ndarray]) -> list[np.ndarray]:
    import anekit

    return [anekit.compile(_graph(values[a], values[b]), "m4").program.run(FEEDS)["y"]
            for a in "AB" for b in "CD"]  # fmt: skip


def _known(y: np.ndarray, expected: list[np.ndarray]) -> bool:
    return any(np.array_equal(y, e) for e in expected)


def _worker(role: str, index: int, bundle: str, cache_dir: str, seconds: float, ready: Any,
            go: Any, out: Any) -> None:  # fmt: skip
    import anekit
    from anekit.compiler import load_or_compile
    from anekit.errors import AnekitError, FormatError
    from anekit.runtime import load
    from anekit.runtime.cache import ProgramCache
    from anekit.runtime.weight_update import StaleProgramError

    values = _values()
    expected = _expected(values)
    rng = random.Random(index)
    tally = {"role": role, "operations": 0, "refused": 0, "corrupt": 0, "errors": 0, "notes": []}

    def note(kind: str, text: str) -> None:
        tally[kind] += 1
        if len(tally["notes"]) < 5:
            tally["notes"].append(text[-400:])

    program = None
    name = "w1" if role == "updater-w1" else "w2"
    pair = "AB" if name == "w1" else "CD"
    cache = ProgramCache(cache_dir)
    ready.put(index)
    go.wait()  # every process starts together, its imports and references done
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if role == "loader":
                y = load(bundle).run(FEEDS)["y"]
                if not _known(y, expected):
                    note("corrupt", "an output none of the four weight sets gives")
            elif role.startswith("updater"):
                if program is None:
                    program = load(bundle)
                try:
                    program.update_weights({name: values[rng.choice(pair)]}, verify=False)
                except StaleProgramError:
                    tally["refused"] += 1
                    program = None
                    continue
            elif role == "recompiler":
                a, b = rng.choice("AB"), rng.choice("CD")
                anekit.compile(_graph(values[a], values[b]), "m4").save(bundle)
            elif role == "cache":
                a, b = rng.choice("AB"), rng.choice("CD")
                y = load_or_compile(_graph(values[a], values[b]), "m4", cache=cache).run(FEEDS)["y"]
                if not np.array_equal(y, expected["AB".index(a) * 2 + "CD".index(b)]):
                    note("corrupt", f"the cache served another program for ({a}, {b})")
            tally["operations"] += 1
        except FormatError as exc:
            note("corrupt", f"{type(exc).__name__}: {exc}")
        except AnekitError as exc:
            note("errors", f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - every other exception is a finding, recorded
            note("errors", traceback.format_exc())
    out.put(tally)


def _final_check(bundle: Path, cache_dir: Path, expected: list[np.ndarray]) -> dict[str, Any]:
    from anekit.runtime import load
    from anekit.runtime.cache import ProgramCache

    problems = []
    try:
        if not _known(load(bundle).run(FEEDS)["y"], expected):
            problems.append("the bundle's output is none of the four")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"the bundle does not load: {exc}")
    leftovers = [p.name for p in bundle.parent.rglob(".*") if "anekit" in p.name]
    cache = ProgramCache(cache_dir)
    entries = 0
    folder = cache_dir / "entries"
    for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
        if len(entry.name) != 64 or entry.name.startswith("."):
            continue
        entries += 1
        if cache.get(entry.name) is None:
            problems.append(f"cache entry {entry.name[:12]} does not verify")
    inserts = [p.name for p in folder.glob(".insert.*")]
    return {"corrupt_bundles": len(problems), "problems": problems, "cache_entries": entries,
            "leftover_temporary_files": leftovers + inserts}  # fmt: skip


def run(processes: int, seconds: float) -> dict[str, Any]:
    import anekit

    values = _values()
    expected = _expected(values)
    root = Path(tempfile.mkdtemp(prefix="anekit-stress-"))
    bundle = root / "m.anekit"
    cache_dir = root / "cache"
    anekit.compile(_graph(values["A"], values["C"]), "m4").save(bundle)
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    roles = [ROLES[i % len(ROLES)] for i in range(processes)]
    procs = [ctx.Process(target=_worker,
                         args=(role, i, str(bundle), str(cache_dir), seconds, ready, go, out))
             for i, role in enumerate(roles)]  # fmt: skip
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    go.set()
    tallies = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    final = _final_check(bundle, cache_dir, expected)
    shutil.rmtree(root, ignore_errors=True)  # the run's own folder: the bundle and the cache
    by_role: dict[str, dict[str, int]] = {}
    for t in tallies:
        row = by_role.setdefault(t["role"], {"processes": 0, "operations": 0, "refused": 0,
                                             "corrupt": 0, "errors": 0})  # fmt: skip
        row["processes"] += 1
        for k in ("operations", "refused", "corrupt", "errors"):
            row[k] += t[k]
    findings = sum(t["corrupt"] + t["errors"] for t in tallies) + final["corrupt_bundles"]
    return {
        "benchmark": "runtime_concurrency",
        "processes": processes,
        "seconds": seconds,
        "operations": sum(t["operations"] for t in tallies),
        "by_role": by_role,
        "corrupt_reads": sum(t["corrupt"] for t in tallies),
        "unexpected_errors": sum(t["errors"] for t in tallies),
        "stale_updates_refused": sum(t["refused"] for t in tallies),
        "corrupt_bundles": final["corrupt_bundles"],
        "final_check": final,
        "findings": findings,
        "notes": [n for t in tallies for n in t["notes"]][:20],
        "exit_codes": [p.exitcode for p in procs],
        "machine": machine(LOAD_BEFORE),
    }


LOAD_BEFORE = os.getloadavg()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    add_smoke(parser)  # 5 processes (every role) for 3 seconds
    args = parser.parse_args(argv)
    if args.smoke:
        args.processes, args.seconds = 5, 3.0
    out = args.out or results_path(RESULTS, args.smoke)
    doc = run(args.processes, args.seconds)
    write_json(out, doc)
    print(f"{doc['processes']} processes, {doc['seconds']} s: {doc['operations']} operations, "
          f"{doc['corrupt_bundles']} corrupt bundles, {doc['corrupt_reads']} corrupt reads, "
          f"{doc['unexpected_errors']} unexpected errors -> {out}")  # fmt: skip
    for role, row in doc["by_role"].items():
        print(f"  {role}: {row}")
    for note in doc["notes"]:
        print(f"  note: {note}")
    return 1 if doc["findings"] or any(doc["exit_codes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
