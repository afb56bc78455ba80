"""Benchmark: parse and print a large synthetic MIL program (GPT-2-sized: tens of thousands of ops).

Writes ``benchmarks/results/mil_parse.json``. Target: well under 1 s to parse 10k operations.

    python benchmarks/mil_parse.py [--ops 10000 --ops 40000] [--repeat 3]

``python benchmarks/mil_parse.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from _common import add_smoke, results_path, write_json

from anekit.formats.mil import parse, print_program

RESULTS = Path(__file__).resolve().parent / "results" / "mil_parse.json"


def synthetic_program(n_ops: int) -> str:
    """A transformer-like MIL program of about ``n_ops`` operations in Apple's spelling.

    Each block of 10 ops: a BLOBFILE weight, scalar/tensor consts, a conv with seven sorted
    keyword arguments, a bias add, a matmul with named bool consts, an fp16 hex-float scalar
    multiply, a concat with a tuple argument and a reshape.
    """
    lines = [
        "program(1.3)",
        '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3520.4.1"}, '
        '{"coremlc-version", "3520.5.1"}})]',
        "{",
        "    func main<ios18>(tensor<fp16, [1, 768, 1, 64]> x) {",
    ]
    act = "tensor<fp16, [1, 768, 1, 64]>"
    prev = "x"
    offset = 64
    for b in range(max(1, n_ops // 10)):
        p = f"b{b}_"
        lines += [
            f'        tensor<fp16, [768, 768, 1, 1]> {p}w = const()[name = string("{p}w"), '
            f"val = tensor<fp16, [768, 768, 1, 1]>(BLOBFILE(path = string("
            f'"@model_path/weights/weight.bin"), offset = uint64({offset})))];',
            f'        tensor<fp16, [1, 768, 1, 1]> {p}bias = const()[name = string("{p}bias"), '
            f"val = tensor<fp16, [1, 768, 1, 1]>(BLOBFILE(path = string("
            f'"@model_path/weights/weight.bin"), offset = uint64({offset + 1179712})))];',
            f'        tensor<int32, [2]> {p}st = const()[name = string("{p}st"), '
            f"val = tensor<int32, [2]>([1, 1])];",
            f'        string {p}pt = const()[name = string("{p}pt"), val = string("valid")];',
            f"        {act} {p}y0 = conv(dilations = {p}st, groups = b0_g, pad = b0_pd, "
            f"pad_type = {p}pt, strides = {p}st, weight = {p}w, x = {prev})"
            f'[name = string("{p}y0")];',
            f'        {act} {p}y1 = add(x = {p}y0, y = {p}bias)[name = string("{p}y1")];',
            f'        fp16 {p}s = const()[name = string("{p}s"), val = fp16(0x1.6a1p-3)];',
            f'        {act} {p}y2 = mul(x = {p}y1, y = {p}s)[name = string("{p}y2")];',
            f"        tensor<fp16, [1, 1536, 1, 64]> {p}cat = concat(axis = b0_ax, "
            f'interleave = b0_f, values = ({p}y2, {p}y1))[name = string("{p}cat")];',
            f"        {act} {p}y = slice_by_size(begin = b0_beg, size = b0_sz, x = {p}cat)"
            f'[name = string("{p}y")];',
        ]
        if b == 0:  # shared consts, defined once before first use
            lines[4:4] = [
                '        int32 b0_g = const()[name = string("b0_g"), val = int32(1)];',
                '        tensor<int32, [4]> b0_pd = const()[name = string("b0_pd"), '
                "val = tensor<int32, [4]>([0, 0, 0, 0])];",
                '        int32 b0_ax = const()[name = string("b0_ax"), val = int32(1)];',
                '        bool b0_f = const()[name = string("b0_f"), val = bool(false)];',
                '        tensor<int32, [4]> b0_beg = const()[name = string("b0_beg"), '
                "val = tensor<int32, [4]>([0, 0, 0, 0])];",
                '        tensor<int32, [4]> b0_sz = const()[name = string("b0_sz"), '
                "val = tensor<int32, [4]>([1, 768, 1, 64])];",
            ]
        prev = f"{p}y"
        offset += 1179712 + 1600
    lines += [f"    }} -> ({prev});", "}", ""]
    return "\n".join(lines)


def best_of(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, action="append", help="operation counts to time")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_smoke(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.ops, args.repeat = args.ops or [200], 1
    results = []
    for n in args.ops or [10_000, 40_000]:
        text = synthetic_program(n)
        program = parse(text)
        ops = len(program.function().operations)
        printed = print_program(program)
        assert parse(printed) == program, "round trip failed"
        parse_s = best_of(args.repeat, lambda text=text: parse(text))
        print_s = best_of(args.repeat, lambda program=program: print_program(program))
        row = {
            "operations": ops,
            "bytes": len(text.encode()),
            "parse_seconds": round(parse_s, 4),
            "print_seconds": round(print_s, 4),
            "parse_ops_per_second": round(ops / parse_s),
            "parse_mb_per_second": round(len(text) / parse_s / 1e6, 2),
            "round_trip_exact": True,  # asserted above
        }
        results.append(row)
        print(json.dumps(row))
    report = {
        "benchmark": "mil_parse",
        "target": "parse 10k operations in well under 1 s",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),  # other work on the machine
        "repeat": args.repeat,
        "results": results,
    }
    write_json(results_path(args.output, args.smoke), report, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
