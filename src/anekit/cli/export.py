"""`anekit export FOLDER -t CHIP -o OUT`: a Hugging Face model folder as what an app ships
(one stateful multifunction Core ML package per chunk and a manifest); ``--estimate`` prints
the artifact's prefill and decode speed on the chip instead of (or besides) writing it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from anekit.cli.common import add_command, add_target_option
from anekit.llm.export import EXPORT_SCHEMES


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "export",
        help="export a language model as stateful multifunction Core ML packages",
        description="Compile a Hugging Face model folder (GPT-2, Llama 1-3, Mistral, Qwen2/3, "
        "Gemma 3 text, Phi-3) for the target and write one .mlpackage per chunk (prefill "
        "functions per bucket and a decode function sharing one weight file, the KV cache as "
        "Core ML state) with a manifest. `anekit generate OUT` and anekit.llm.load(OUT) run the "
        "written packages.",
        examples=[
            "anekit export tests/data/llm/tiny-llama -t m4 -o tiny.export --max-context 256",
            "anekit export tests/data/llm/tiny-llama -t m4 --max-context 256 --estimate --json",
        ],
        json_help="print one JSON object",
    )
    p.add_argument("model", help="a model folder (config.json, *.safetensors, tokenizer files)")
    add_target_option(p)
    p.add_argument("--output", "-o", default=None, help="the export folder to write")
    p.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="KV state length in positions (a multiple of 32)",
    )
    p.add_argument(
        "--buckets",
        default=None,
        help="prefill sequence buckets, e.g. 16,64,256 (default: 16, 32, ... up to the context)",
    )
    p.add_argument("--compress", choices=("int8", "int4", "palettize4", "palettize6"), default=None,
                   help=f"weight compression the engine runs ({', '.join(EXPORT_SCHEMES)}; int4 is refused)")  # fmt: skip
    p.add_argument(
        "--estimate",
        action="store_true",
        help="print the artifact's estimated prefill and decode speed on the target",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit import llm
    from anekit.errors import InputError
    from anekit.llm.export import default_buckets, export, model_chunks
    from anekit.llm.export_estimate import estimate_chunks

    if args.output is None and not args.estimate:
        raise InputError(
            "nothing to do: give -o OUT to write the export, --estimate for its speed, or both"
        )
    model = llm.load(
        args.model, target=args.target, max_context=args.max_context, compress=args.compress
    )
    if isinstance(model, llm.ExportedModel):
        raise InputError(
            f"'{args.model}' is already an export", hint="export the Hugging Face model folder"
        )
    buckets = _buckets(args.buckets) or default_buckets(model)
    result: dict[str, Any] = {}
    if args.output is not None:
        manifest = export(model, args.output, buckets=buckets)
        result["export"] = {k: manifest[k] for k in ("target", "family", "max_context", "buckets", "compress",
                                                     "export_seconds")}  # fmt: skip
        result["export"]["packages"] = [c["package"] for c in manifest["chunks"]]
        result["export"]["bytes"] = sum(f["size"] for f in manifest["files"].values())
    if args.estimate:
        result["estimate"] = estimate_chunks(model_chunks(model, buckets))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if "export" in result:
        e = result["export"]
        print(f"wrote {args.output}: {', '.join(e['packages'])} ({e['bytes'] / 2**20:.2f} MiB, "
              f"buckets {e['buckets']}, context {e['max_context']}) in {e['export_seconds']:.1f} s")  # fmt: skip
    if "estimate" in result:
        est = result["estimate"]
        print(f"estimated on {est['target']}: decode {est['decode_ms_per_token']:.2f} ms/token "
              f"({est['decode_tokens_per_s']:.0f} tokens/s, {est['decode_dispatches']} dispatch(es))")  # fmt: skip
        for bucket, p in est["prefill"].items():
            print(
                f"  prefill_{bucket}: {p['ms']:.2f} ms ({p['tokens_per_s']:.0f} tokens/s when full)"
            )
    sys.stdout.flush()
    return 0


def _buckets(text: str | None) -> tuple[int, ...] | None:
    from anekit.errors import InputError

    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise InputError(f"--buckets takes comma-separated integers, got {text!r}") from None
