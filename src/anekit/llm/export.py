"""Exporting a language model as what an app ships: a folder of stateful multifunction Core ML
packages, one per chunk, and a manifest.

Each chunk's package holds a ``prefill_<S>`` function per sequence bucket and a ``decode``
function, sharing one weight file; the chunk's KV cache is Core ML state (one fp16 state per
layer and kind, ``k_cache_<l>``/``v_cache_<l>`` [1, kv_heads * head_dim, 1, context]):
prefill writes the prompt's keys and values at positions 0..S-1, decode reads the cache and
writes its position. Shapes are fixed per function (the buckets are the enumeration).

The export takes its programs through one narrow interface, :func:`model_chunks`: a list of
:class:`ChunkPrograms`, each with its prefill-bucket and decode programs and the states they
read and write. A model that runs as one program is one chunk.

The engine pitfalls users report are checked (:mod:`.export_checks`) on each program as it
is compiled, before its package is written; each refusal names the rule and the node. The
folder is written atomically (a temporary folder swapped in at the end, so a refusal leaves
nothing) and only over a folder this module wrote (its manifest lists every file with its
sha256). One chunk's programs are in memory at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from anekit import atomic
from anekit.errors import AnekitError, ModelError, PathError
from anekit.files import read_file
from anekit.llm import programs as progs

MANIFEST = "export.json"
FORMAT = "anekit-llm-export"
FORMAT_VERSION = 1
# files of the model folder an app needs beside the programs (those that exist are copied)
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "vocab.json", "merges.txt")  # fmt: skip
MAX_MANIFEST_BYTES = 16 << 20
# what the engine runs of anekit's schemes: per-channel int8, per-grouped-channel LUTs
EXPORT_SCHEMES = ("int8", "palettize4", "palettize6")


@dataclass(frozen=True)
class ChunkPrograms:
    """One chunk: its prefill program per bucket, its decode program (each compiled when
    called, so an export holds one chunk's programs at a time), and its states.

    ``prefill_writes`` maps a prefill output to the state it fills; ``decode_reads`` a
    decode input to the state it reads; ``decode_writes`` a decode output to the state it
    replaces. A chunk's other inputs come from the host or from the previous chunk's outputs
    of the same name.
    """

    name: str
    # bucket -> a call that gives its anekit.compiler.CompiledModel (compiled on demand)
    prefill: Mapping[int, Callable[[], Any]]
    decode: Callable[[], Any]
    states: tuple[Any, ...]  # anekit.codegen.mlpackage_multi.StateSpec
    prefill_writes: Mapping[str, str] = field(default_factory=dict)
    decode_reads: Mapping[str, str] = field(default_factory=dict)
    decode_writes: Mapping[str, str] = field(default_factory=dict)


def default_buckets(model: Any) -> tuple[int, ...]:
    """The model's own prefill buckets (`anekit.llm.plan`)."""
    return tuple(model.plan.prefill_buckets)


def model_chunks(model: Any, buckets: Sequence[int]) -> list[ChunkPrograms]:
    """The model's programs (`LanguageModel.plan`) as export chunks: per chunk of layers, a
    prefill per bucket and the one-position decode against the whole context (the largest
    rung: a state has one shape), its layers' keys and values as states."""
    from anekit.codegen.mlpackage_multi import StateSpec

    cfg, plan = model.config, model.plan
    width, t = cfg.kv_heads * cfg.head_dim, model.max_context
    prefills = {s: plan.prefill(s) for s in buckets}
    chunks = []
    for index, spec in enumerate(plan.decode(t)):
        names = [(f"{k}_{i}", f"{k}_cache_{i}") for i in spec.chunk.layers for k in ("k", "v")]
        chunks.append(ChunkPrograms(
            name=f"chunk_{index}",
            prefill={s: partial(_compiled, model, prefills[s][index]) for s in buckets},
            decode=partial(_compiled, model, spec),
            states=tuple(StateSpec(state, (1, width, 1, t)) for _, state in names),
            prefill_writes=dict(names),
            decode_reads={state: state for _, state in names},
            decode_writes={f"{state}_next": state for _, state in names},
        ))  # fmt: skip
    return chunks


def _compiled(model: Any, spec: Any) -> Any:
    return model.program(spec)[0]


def export(
    model: Any, out: str | os.PathLike[str], *, buckets: Sequence[int] | None = None
) -> dict:
    """Write ``model`` (a `LanguageModel`) as the export folder ``out``; returns the manifest."""
    from anekit.codegen.mlpackage_multi import MIN_STATE_OPSET, FunctionSpec, write_package
    from anekit.llm import export_checks
    from anekit.llm.export_estimate import program_cost, summarize

    opset = model.target.mil.opset
    if int(opset.removeprefix("ios")) < MIN_STATE_OPSET:
        raise ModelError(
            f"target {model.target.name} compiles for the {opset} dialect; Core ML states and "
            "multifunction packages need iOS 18 programs",
            hint="export for m3, m4 or m5 (their programs are iOS 18)",
        )
    if model.compress is not None and model.compress not in EXPORT_SCHEMES:
        raise ModelError(export_checks.scheme_refusal(model.compress),
                         hint=f"export with --compress one of {', '.join(EXPORT_SCHEMES)}, or none")  # fmt: skip
    buckets = tuple(sorted(set(buckets or default_buckets(model))))
    for s in buckets:
        if not 1 <= s <= model.max_context:
            raise ModelError(
                f"prefill bucket {s} is outside [1, {model.max_context}] (the context)"
            )
    path = _output_path(out)
    start = time.perf_counter()
    chunks = model_chunks(model, buckets)
    for chunk in chunks:  # before anything is compiled
        export_checks.check_states(chunk)
    manifest: dict[str, Any] = {}

    def write(folder: Path) -> None:
        entries, decode_costs, prefill_costs = [], [], {}
        for chunk in chunks:
            costs: dict[str, Any] = {}
            ports: dict[str, Any] = {}
            on_cpu: set[str] = set()

            def checked(name: str, make: Callable[[], Any], chunk: ChunkPrograms = chunk,
                        costs: dict = costs, ports: dict = ports, on_cpu: set = on_cpu) -> Callable[[], Any]:  # fmt: skip
                def load() -> Any:
                    compiled = make()
                    export_checks.check_program(compiled, f"{chunk.name}, function {name}")
                    costs[name] = program_cost(compiled)
                    ports[name] = compiled.program
                    on_cpu.update(r.node for r in compiled.ops if r.placement == "cpu")
                    return compiled.program

                return load

            functions = [FunctionSpec(f"prefill_{s}", checked(f"prefill_{s}", chunk.prefill[s]),
                                      writes=chunk.prefill_writes) for s in buckets]  # fmt: skip
            functions.append(FunctionSpec("decode", checked("decode", chunk.decode),
                                          reads=chunk.decode_reads, writes=chunk.decode_writes))  # fmt: skip
            package = f"{chunk.name}.mlpackage"
            write_package(functions, chunk.states, opset, "decode", folder / package)
            atomic.checkpoint(f"wrote {package}")
            entries.append(_chunk_entry(chunk, package, functions, ports))
            # the embedding gathers the engine cannot run, kept on the CPU (said, not hidden)
            entries[-1]["cpu_nodes"] = sorted(on_cpu)
            decode_costs.append(costs["decode"])
            for s in buckets:
                prefill_costs.setdefault(s, []).append(costs[f"prefill_{s}"])
        side = [n for n in SIDE_FILES if (model.path / n).is_file()]
        for name in side:
            shutil.copyfile(model.path / name, folder / name)
        manifest.update(_manifest(model, buckets, entries, side, folder))
        manifest["estimate"] = summarize(model.target.name, decode_costs, prefill_costs)
        manifest["export_seconds"] = round(time.perf_counter() - start, 3)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        atomic.checkpoint("wrote the manifest")

    with _one_program_cached():
        atomic.replace_folder(path, write, check=not_an_export, what="an LLM export")
    return manifest


@contextmanager
def _one_program_cached() -> Iterator[None]:
    """The process's program cache kept to the latest program while exporting, so memory
    holds one chunk's programs at a time, not the model's (restored after)."""
    previous = progs._limit[-1] if progs._limit else None
    progs.set_cache_limit(0)
    try:
        yield
    finally:
        progs.set_cache_limit(previous)


def _output_path(out: str | os.PathLike[str]) -> Path:
    from anekit.errors import path_argument

    path = path_argument(out, "the export folder")
    if path.exists() and not path.is_dir():
        raise PathError(f"'{path}' exists and is not a folder", hint="choose a new folder name")
    return path


def _chunk_entry(chunk: ChunkPrograms, package: str, functions: list, programs: dict) -> dict:
    def ports(spec: Any, which: str, skip: Mapping[str, str]) -> list[dict]:
        return [{"name": p.name, "dtype": p.dtype, "shape": list(p.shape)}
                for p in getattr(programs[spec.name].manifest, which) if p.name not in skip]  # fmt: skip

    return {
        "name": chunk.name,
        "package": package,
        "functions": {
            f.name: {
                "inputs": ports(f, "inputs", f.reads),
                "outputs": ports(f, "outputs", f.writes),
                "reads_states": sorted(set(f.reads.values())),
                "writes_states": sorted(set(f.writes.values())),
            }
            for f in functions
        },  # fmt: skip
        "states": [{"name": s.name, "dtype": "fp16", "shape": list(s.shape)} for s in chunk.states],
        # the largest engine program's weights (what the per-program limit bounds; the CPU
        # embedding gather's table is not on the engine)
        "engine_weight_bytes": max(_engine_bytes(p) for p in programs.values()),
    }


def _engine_bytes(program: Any) -> int:
    total = 0
    for segment, weights in zip(program.manifest.segments, program.weights, strict=True):
        if segment.device == "ane" and weights is not None:
            total += Path(weights).stat().st_size if isinstance(weights, Path | str) else len(weights)
    return total


def _manifest(
    model: Any, buckets: tuple[int, ...], chunks: list[dict], side: list[str], folder: Path
) -> dict:
    import anekit

    cfg = model.config
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "anekit_version": anekit.__version__,
        "target": model.target.name,
        "family": cfg.family,
        "config": asdict(cfg),
        "max_context": model.max_context,
        "buckets": list(buckets),
        "compress": model.compress,
        "window": model.window,  # sliding-window layers' span (their mask_sliding input)
        "plan": model.plan.as_dict(),
        "chunks": chunks,
        "tokenizer_files": [n for n in side if n not in ("config.json", "generation_config.json")],
        "generation_config": "generation_config.json" if "generation_config.json" in side else None,
        "files": {
            rel: {"size": (folder / rel).stat().st_size, "sha256": sha256(folder / rel)}
            for rel in _files(folder)
        },  # fmt: skip
    }


def _files(folder: Path) -> list[str]:
    found = []
    for here, _, names in os.walk(folder):
        for name in names:
            found.append((Path(here) / name).relative_to(folder).as_posix())
    return sorted(found)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path) -> dict:
    """The export's manifest, checked to be one (untrusted input)."""
    raw = read_file(folder / MANIFEST, MANIFEST, max_bytes=MAX_MANIFEST_BYTES, error=ModelError)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{MANIFEST} is not JSON: {exc}", where=str(folder)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(f"{MANIFEST} is not an anekit LLM export manifest", where=str(folder))
    if data.get("format_version") != FORMAT_VERSION:
        raise ModelError(f"export format version {data.get('format_version')!r}; this anekit reads "
                         f"{FORMAT_VERSION}", where=str(folder), hint="export the model again")  # fmt: skip
    _check_fields(data, str(folder / MANIFEST))
    return data


def _check_fields(data: dict, where: str) -> None:
    """The fields a reader uses have their types, and packages are plain names in the folder."""

    def ints(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(type(x) is int and x > 0 for x in v)

    chunks = data.get("chunks")
    ok = (
        type(data.get("max_context")) is int
        and ints(data.get("buckets"))
        and (data.get("window") is None or type(data.get("window")) is int)
        and isinstance(data.get("tokenizer_files"), list)
        and isinstance(data.get("estimate"), dict)
        and isinstance(chunks, list)
        and bool(chunks)
        and all(isinstance(c, dict) and isinstance(c.get("package"), str) for c in chunks)
    )
    if not ok:
        raise ModelError(f"{MANIFEST} lacks a field or has one of the wrong type", where=where,
                         hint="export the model again")  # fmt: skip
    for c in chunks:
        name = c["package"]
        if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".mlpackage"):
            raise ModelError(f"{MANIFEST} names the package '{name}', not a package in the folder",
                             where=where)  # fmt: skip


def verify(folder: Path, manifest: dict) -> None:
    """Every file present is listed with its size and sha256, and matches."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ModelError(f"{MANIFEST} lists no files", where=str(folder))
    present = set(_files(folder)) - {MANIFEST}
    if present != set(files):
        extra, missing = sorted(present - set(files)), sorted(set(files) - present)
        raise ModelError(f"the export's files differ from its manifest (unlisted {extra[:3]}, "
                         f"missing {missing[:3]})", where=str(folder), hint="export the model again")  # fmt: skip
    for rel, entry in files.items():
        p = folder / rel
        if p.is_symlink() or not p.is_file():
            raise ModelError(f"'{rel}' is not a regular file", where=str(folder))
        if p.stat().st_size != entry.get("size") or sha256(p) != entry.get("sha256"):
            raise ModelError(f"'{rel}' does not match its sha256 in {MANIFEST}", where=str(folder),
                             hint="the export was changed after it was written; export again")  # fmt: skip


def not_an_export(root: Path) -> str | None:
    """Why ``root`` cannot be proven an export this module wrote (None when it can)."""
    try:
        verify(root, read_manifest(root))
    except AnekitError as exc:
        return str(exc)
    return None


def is_export(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()
