"""The bundle writer: emitted segments, the wiring between them and the report as a directory.

``build_bundle`` makes the whole content in memory (file bytes and the manifest), returning
once the programs are emitted while worker threads still convert and hash the weights;
``write_bundle`` writes it into a temporary directory beside the target (the weight files as
their conversions finish, the manifest last) and renames it into place, replacing an
existing bundle only once the new one is complete. The same input gives the same bytes: no
timestamps, sorted keys, names and order from the graph alone.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from anekit import atomic
from anekit.codegen.builder import cast_array
from anekit.codegen.mil import EmittedSegment, SegmentLike, SegmentSpec, emit_segment
from anekit.codegen.weights import Conversions, WeightFile
from anekit.errors import AnekitError
from anekit.formats.blob import ChunkedBytes
from anekit.formats.bundle import (
    MANIFEST,
    REPORT,
    FileEntry,
    Manifest,
    Port,
    SegmentEntry,
    SegmentIO,
    Source,
    TargetInfo,
    canonical_json,
    not_a_bundle,
)
from anekit.formats.mil import MilProgram
from anekit.formats.mil.values import WEIGHT_FILE
from anekit.ir.graph import Graph, Node, Value
from anekit.naming import fresh_name
from anekit.version import __version__

if TYPE_CHECKING:
    from anekit.targets import Target

# Called after each segment is emitted with (segments done, total): drives progress bars.
Progress = Callable[[int, int], None]
# Report keys holding wall-clock measurements (``seconds`` of each pass): they vary from run
# to run, so they are left out and bundles stay reproducible. Estimated times stay.
_VOLATILE = ("seconds", "elapsed")


@dataclass(frozen=True)
class FileData:
    """One file of a bundle in memory, as chunks (large weights are not copied).

    A weight file's data may still be in the making: its arrays converted, and its digest
    computed, on worker threads. ``stream`` gives its chunks as they become ready;
    ``chunks`` and ``sha256`` wait for all of them.
    """

    source: tuple[bytes | memoryview, ...] | WeightFile
    size: int
    digest: str | Future[str]

    @classmethod
    def of(cls, data: bytes | WeightFile) -> FileData:
        if isinstance(data, WeightFile):
            return cls(tuple(data.chunks()), data.size, data.sha256())
        return cls((data,), len(data), hashlib.sha256(data).hexdigest())

    @property
    def chunks(self) -> tuple[bytes | memoryview, ...]:
        return self.source if isinstance(self.source, tuple) else tuple(self.source.chunks())

    @property
    def sha256(self) -> str:
        return self.digest if isinstance(self.digest, str) else self.digest.result()

    def stream(self) -> Iterator[bytes | memoryview]:
        """The chunks in order, each as soon as it is ready."""
        return iter(self.source) if isinstance(self.source, tuple) else self.source.stream()

    def buffer(self) -> bytes | ChunkedBytes:
        """The file for a reader, without joining its chunks: a weight file stays the arrays
        it was made from (one copy of a model's weights, however many programs read it)."""
        chunks = self.chunks
        return chunks[0] if len(chunks) == 1 and isinstance(chunks[0], bytes) else ChunkedBytes(chunks)

    def to_bytes(self) -> bytes:
        """The file's bytes. Joined once, and then held instead of the chunks; files of equal
        digest (a language model's programs of one chunk) share one joined copy."""
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]  # type: ignore[return-value]
        with _JOINED_LOCK:
            held = _JOINED.get(self.sha256)
            if held is None or len(held.data) != self.size:
                held = _Joined(b"".join(chunks))
                _JOINED[self.sha256] = held
        if isinstance(self.source, WeightFile):  # its segment holds it too
            self.source.hold(held.data)
        object.__setattr__(self, "source", (held.data,))  # the chunks' arrays are let go
        object.__setattr__(self, "_held", held)  # keeps the shared entry while this file lives
        return held.data


class _Joined:
    """A weight file's joined bytes, weakly shared by digest (bytes take no weak reference)."""

    __slots__ = ("data", "__weakref__")

    def __init__(self, data: bytes):
        self.data = data


_JOINED: weakref.WeakValueDictionary[str, _Joined] = weakref.WeakValueDictionary()
_JOINED_LOCK = threading.Lock()


class _Bytes(Mapping[str, bytes]):
    """Relative path -> the file's bytes, joined when asked for."""

    def __init__(self, data: Mapping[str, FileData]):
        self._data = data

    def __getitem__(self, rel: str) -> bytes:
        return self._data[rel].to_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True)
class BundleContents:
    """A bundle in memory: its manifest, every file, and the programs as trees.

    Built while its weights are still being converted and hashed on worker threads:
    ``manifest`` and ``data`` (which holds manifest.json) wait for the digests, while
    :func:`write_bundle` can write the other files (``payload``) as their chunks come in.
    """

    payload: Mapping[str, FileData]  # relative path -> file, every file but manifest.json
    segments: tuple[EmittedSegment, ...]
    unhashed: Manifest  # the manifest but for its files' digests and sizes

    @cached_property
    def manifest(self) -> Manifest:
        files = {rel: FileEntry(f.sha256, f.size) for rel, f in self.payload.items()}
        return replace(self.unhashed, files=files)

    @cached_property
    def data(self) -> Mapping[str, FileData]:
        """Relative path -> file (manifest.json included)."""
        return MappingProxyType({**self.payload, MANIFEST: FileData.of(self.manifest.to_bytes())})

    @property
    def files(self) -> Mapping[str, bytes]:
        """Relative path -> bytes (weights are joined on access: prefer ``data`` for size)."""
        return _Bytes(self.data)

    @property
    def programs(self) -> tuple[MilProgram, ...]:
        return tuple(s.program for s in self.segments)


def program_path(index: int) -> str:
    return f"segments/{index}/model.mil"


def weights_path(index: int) -> str:
    return f"segments/{index}/{WEIGHT_FILE}"


def build_bundle(
    graph: Graph,
    target: Target,
    segments: Sequence[SegmentLike],
    *,
    report: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    weights: str = "fp16",
    compressed: Mapping[str, Any] | None = None,
) -> BundleContents:
    """Emit every segment of ``graph`` and assemble the bundle's files and manifest.

    ``weights``: how CPU segments store float weights, ``fp16`` (default) or ``fp32``.
    """
    graph, segments, rewired = _with_constant_outputs(graph, segments)
    emitted: list[EmittedSegment] = []
    workers = min(4, os.cpu_count() or 1)
    # Weights are converted on worker threads while the segments are lowered, each weight
    # once (a tied embedding serves both segments that read it); each weight file is hashed
    # on a thread of its own as soon as its segment is emitted, chunk by chunk as the
    # conversions finish (separate pools: hashing waits for conversions, never the reverse).
    # Both pools are joined before the call returns: no thread outlives it.
    pool = ThreadPoolExecutor(workers, thread_name_prefix="anekit-convert")
    hashers = ThreadPoolExecutor(workers, thread_name_prefix="anekit-sha256")
    failed = True
    try:
        conversions = Conversions(cast_array, pool)
        weight_files: dict[str, FileData] = {}
        for k, segment in enumerate(segments):
            s = emit_segment(
                graph,
                segment,
                target,
                weights=weights,
                executor=pool,
                conversions=conversions,
                compressed=compressed,
            )
            if s.weight_file is not None:
                digest = hashers.submit(s.weight_file.sha256)
                weight_files[weights_path(s.index)] = FileData(
                    s.weight_file, s.weight_file.size, digest
                )
            emitted.append(s)
            if progress is not None:
                progress(k + 1, len(segments))
        failed = False
    finally:  # conversions first (the hashes wait for them); a failure cancels what is queued
        pool.shutdown(wait=True, cancel_futures=failed)
        hashers.shutdown(wait=True, cancel_futures=failed)
    files: dict[str, FileData] = {}
    entries: list[SegmentEntry] = []
    produced: dict[str, tuple[int, str]] = {}
    graph_inputs = set(graph.input_names)
    for s in emitted:
        files[program_path(s.index)] = FileData.of(s.text.encode())
        if s.weight_file is not None:
            files[weights_path(s.index)] = weight_files[weights_path(s.index)]
        ins = tuple(_io(p, _source(p.value, graph_inputs, produced, s.index)) for p in s.inputs)
        outs = tuple(_io(p, None) for p in s.outputs)
        for p in s.outputs:
            produced[p.value] = (s.index, p.value)
        entries.append(
            SegmentEntry(
                index=s.index,
                device=s.device,
                program=program_path(s.index),
                weights=weights_path(s.index) if s.weight_file is not None else None,
                function="main",
                nodes=len(s.nodes),
                inputs=ins,
                outputs=outs,
                input_alloc_bytes=s.input_alloc_bytes,
                output_alloc_bytes=s.output_alloc_bytes,
            )
        )
    files[REPORT] = FileData.of(canonical_json(deterministic(dict(report or {}))))
    manifest = Manifest(
        model=graph.name or "model",
        generator=f"anekit {__version__}",
        target=TargetInfo(target.name, target.engine, target.mil.program_version, target.mil.opset),
        inputs=tuple(Port(v.name, str(v.dtype), v.shape) for v in graph.inputs),
        outputs=tuple(
            Port(
                v.name,
                str(v.dtype),
                v.shape,
                _source(rewired.get(v.name, v.name), graph_inputs, produced, len(emitted)),
            )
            for v in graph.outputs
        ),
        segments=tuple(entries),
        files={},
    )
    return BundleContents(MappingProxyType(files), tuple(emitted), manifest)


def check_lowering(
    graph: Graph,
    target: Target,
    segments: Sequence[SegmentLike],
    *,
    compressed: Mapping[str, Any] | None = None,
) -> list[AnekitError]:
    """Lower every segment to MIL as `build_bundle` does, without converting a weight, and
    return the lowering's refusals (a node whose attributes have no MIL form, such as a
    ``wrap`` pad or a dilated pooling): the first of each segment, whose emission stops there.

    Weight conversions are requested but never run: the cost is the lowering alone.
    """
    graph, segments, _ = _with_constant_outputs(graph, segments)
    conversions = Conversions(cast_array, _NeverConverts())
    refusals = []
    for segment in segments:
        try:
            emit_segment(graph, segment, target, conversions=conversions, compressed=compressed)
        except AnekitError as exc:
            refusals.append(exc)
    return refusals


class _NeverConverts:
    """An executor for `check_lowering`: takes conversion requests and runs none of them."""

    def submit(self, fn: Any, *args: Any) -> Any:
        return _Unconverted()


class _Unconverted:
    def result(self) -> Any:
        raise AssertionError("check_lowering reads no weight")


def write_bundle(contents: BundleContents, path: str | os.PathLike[str]) -> Path:
    """Write ``contents`` as the directory ``path``, atomically: replacing an existing folder
    only when it is an anekit bundle with nothing its manifest does not list
    (see :func:`anekit.atomic.replace_folder`)."""

    def write(folder: Path) -> None:
        # files written (and fsync'd) on parallel threads, largest first, as their chunks
        # come in; the manifest last, once every digest is known: a bundle is whole once it
        # has one
        files = sorted(contents.payload.items(), key=lambda item: (-item[1].size, item[0]))
        with ThreadPoolExecutor(
            max(1, min(4, len(files))), thread_name_prefix="anekit-write"
        ) as pool:
            for (rel, _), done in [(f, pool.submit(_write, folder / f[0], f[1])) for f in files]:
                done.result()
                atomic.checkpoint(f"wrote {rel}")
        _write(folder / MANIFEST, contents.data[MANIFEST])
        atomic.checkpoint(f"wrote {MANIFEST}")

    return atomic.replace_folder(path, write, check=not_a_bundle, what="an anekit bundle")


def deterministic(data: Any) -> Any:
    """``data`` without the wall-clock measurements (keys ``seconds``, ``*_seconds``, ...)."""
    if isinstance(data, Mapping):
        return {
            str(k): deterministic(v)
            for k, v in data.items()
            if not any(str(k).lower() == m or str(k).lower().endswith(f"_{m}") for m in _VOLATILE)
        }
    if isinstance(data, (list, tuple)):
        return [deterministic(v) for v in data]
    return data


def _write(path: Path, data: FileData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_synced(path, data.stream())  # straight from the arrays' memory, unbuffered


def _io(p: Any, source: Source | None) -> SegmentIO:
    return SegmentIO(p.value, p.mil_name, p.dtype, p.mil_dtype, p.shape, p.mil_shape, source)


def _source(
    value: str, graph_inputs: set[str], produced: Mapping[str, tuple[int, str]], before: int
) -> Source:
    if value in graph_inputs:
        return Source(input=value)
    found = produced.get(value)
    if found is None or found[0] >= before:
        raise AnekitError(f"no segment before segment {before} computes the value '{value}'")
    return Source(segment=found[0], value=found[1])


def _with_constant_outputs(
    graph: Graph, segments: Sequence[SegmentLike]
) -> tuple[Graph, list[SegmentLike], dict[str, str]]:
    """A model output that is a constant gets a CPU segment of its own that returns it.

    Returns the graph with the identity nodes added, the segments, and for each such output
    the value that now carries it.
    """
    constant_outputs = list(dict.fromkeys(o for o in graph.output_names if graph.is_constant(o)))
    if not constant_outputs:
        return graph, list(segments), {}
    nodes, values = list(graph.nodes), dict(graph.values)
    taken = set(values) | {n.name for n in nodes}
    rewired: dict[str, str] = {}
    names: list[str] = []
    for name in constant_outputs:
        out, node = _fresh(f"{name}_value", taken), _fresh(f"{name}_identity", taken)
        v = graph.values[name]
        values[out] = Value(out, v.shape, v.dtype)
        nodes.append(Node("identity", node, (name,), (out,)))
        rewired[name] = out
        names.append(node)
    segment = SegmentSpec(len(segments), "cpu", tuple(names), (), tuple(rewired.values()))
    return graph.replace(nodes=nodes, values=values), [*segments, segment], rewired


def _fresh(hint: str, taken: set[str]) -> str:
    name = fresh_name(hint, taken)
    taken.add(name)
    return name
