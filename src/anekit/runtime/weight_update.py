"""Weight updates without recompiling: new values for source weights written into a program's
weight files, the MIL text untouched (Orion section 5, delta compilation).

Each changed weight file is rebuilt from the old one's bytes with the changed blobs
replaced (their records checked first), hashed, and, for a bundle on disk, committed
atomically: every new file is written beside its target and fsync'd, then a journal naming
the renames is put in place with one rename (the commit point), the renames are done and
the journal removed. A process killed before the commit leaves the old bundle; killed
after it, the next load (:func:`recover`) finishes the renames. File data is fsync'd
before the commit point; the renames themselves are left to the file system's ordering
(no directory fsync: atomic under a killed process, durable as far as the file system
orders renames after the data they name). Leftovers of an update that
never committed are removed by name (only files this module names).

Loaded backends re-load the changed segments; with ``verify`` each reloaded segment is run
on a probe input before and after, and an update the backend did not take up (Orion's
delta reload is disputed on M5) is reported instead of trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.atomic import alive, locked_folder, write_synced
from anekit.codegen.builder import cast_array
from anekit.codegen.weight_map import WeightMap
from anekit.errors import AnekitError, FormatError, InputError, ModelError, os_error
from anekit.files import read_file
from anekit.formats.blob import BlobReader
from anekit.formats.bundle import MANIFEST, FileEntry, Manifest, check_relative, resolve_inside
from anekit.formats.mil import dtype_info
from anekit.formats.mil.values import WEIGHT_FILE

if TYPE_CHECKING:
    from anekit.runtime.program import Program

JOURNAL = ".anekit-update.json"
_NEW = ".anekit-new"  # suffix of a file written by an update that has not committed yet
_MAX_JOURNAL = 1 << 24  # a journal is the manifest and a few names
_TOKEN = re.compile(r"\d+-[0-9a-f]{12}\Z")  # an update's writer pid and random token


class StaleProgramError(AnekitError):
    """The bundle on disk is no longer the one the program loaded (it was recompiled)."""


class WeightUpdateError(AnekitError):
    """A backend still computes with the old weights after an update (the files are new)."""


@dataclass
class UpdateReport:
    """What an update changed and what it cost."""

    names: tuple[str, ...]
    segments: tuple[int, ...]
    bytes_written: int
    seconds: float
    took_effect: dict[str, bool] = field(default_factory=dict)  # backend -> verified


def update_weights(
    program: Program, updates: Mapping[str, Any], *, verify: bool = True
) -> UpdateReport:
    start = time.perf_counter()
    program.check_reloadable()
    wmap = program.weight_map()
    arrays = _checked(wmap, updates)
    by_segment: dict[int, list[tuple[Any, np.ndarray]]] = {}
    converted: dict[tuple[str, str], np.ndarray] = {}
    for name, flat in arrays.items():
        for p in wmap.weights[name].placements:
            # converted once per stored dtype, contiguous (the conversion is elementwise, so
            # a placement's view of the result is the compiler's conversion of its view)
            key = (name, p.dtype)
            if key not in converted:
                converted[key] = cast_array(flat, p.dtype)
            by_segment.setdefault(p.segment, []).append((p, converted[key]))
    probes = _probe_before(program, by_segment) if verify else {}
    root = program.root
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        if root is None:
            base = (program.manifest, program.weights)
            manifest, rebuilt = _rebuild(program, *base, by_segment, pool)
        else:
            with locked_folder(root, exclusive=True) as held:
                _recover_locked(root, held)
                base = _current(program, root)
                manifest, rebuilt = _rebuild(program, *base, by_segment, pool)
                _commit(root, program, rebuilt, manifest, pool)
    # the program runs on the bytes it wrote (never on a file re-read after the write)
    weights = list(base[1])
    for index, chunks, _, _ in rebuilt:
        weights[index] = b"".join(chunks)
    # a segment another process updated since this program loaded it is reloaded too
    changed = {i for i, *_ in rebuilt} | {
        i for i, (a, b) in enumerate(zip(base[1], program.weights, strict=True)) if a is not b
    }
    program.replace_weights(manifest, weights, sorted(changed))
    report = UpdateReport(
        tuple(arrays),
        tuple(sorted(by_segment)),
        sum(size for *_, size in rebuilt),
        0.0,
    )
    if verify:
        report.took_effect = _probe_after(program, probes)
    report.seconds = time.perf_counter() - start
    stale = sorted(b for b, ok in report.took_effect.items() if not ok)
    if stale:
        raise WeightUpdateError(
            f"the weight files were updated, but the program loaded on {stale} still computes "
            "with the old weights (Orion's delta reload is not reliable on every chip)",
            hint="open a new session (or recompile) to load the new weights",
            where=program.where,
        )
    return report


def _rebuild(program: Program, manifest: Manifest, weights: Sequence[Any],
             by_segment: Mapping[int, Any], pool: ThreadPoolExecutor) -> tuple[Manifest, list]:  # fmt: skip
    """The new manifest and, per changed segment, (index, chunks, sha256, size) of its
    weight file rebuilt from ``weights`` (the bundle's current bytes)."""

    def rebuild(index: int) -> tuple[int, list[bytes | memoryview], str, int]:
        old = weights[index]
        if old is None:
            raise FormatError(f"segment {index} has no weight file", where=program.where)
        data = old.read_bytes() if isinstance(old, Path) else bytes(old)
        chunks = _patched(data, by_segment[index], f"{program.where}: segment {index}")
        digest = hashlib.sha256()
        for c in chunks:
            digest.update(c)
        return index, chunks, digest.hexdigest(), sum(len(memoryview(c).cast("B")) for c in chunks)

    rebuilt = list(pool.map(rebuild, sorted(by_segment)))
    files = dict(manifest.files)
    for index, _, digest, size in rebuilt:
        rel = program.segments[index].weights
        assert rel is not None
        if rel in files:
            files[rel] = FileEntry(digest, size)
    return replace(manifest, files=files), rebuilt


def _current(program: Program, root: Path) -> tuple[Manifest, Sequence[Any]]:
    """The manifest and weight bytes the bundle on disk holds now (under its lock): the
    program's own when nothing changed since it loaded them; another process's update of
    the same program (same folder, MIL and weight map) read and verified; refused when the
    folder was replaced (recompiled) or its program changed, which an update would undo."""
    from anekit.codegen.weight_map import WEIGHT_MAP
    from anekit.formats.bundle import read_bundle

    where = str(root)
    try:
        now = os.stat(root)
    except OSError as exc:
        raise os_error(exc, f"update the weights of '{root}'") from None
    loaded_id = getattr(program, "folder_id", None)
    disk = read_bundle(root, verify=False, contents=False).manifest
    if disk.to_bytes() == program.manifest.to_bytes() and loaded_id in (None, (now.st_dev, now.st_ino)):
        return program.manifest, program.weights
    mine, theirs = program.manifest.files, disk.files
    same_program = (
        [s.to_json() for s in disk.segments] == [s.to_json() for s in program.segments]
        and all(theirs.get(s.program) == mine.get(s.program) for s in program.segments)
        and theirs.get(WEIGHT_MAP) == mine.get(WEIGHT_MAP)
    )
    if loaded_id not in (None, (now.st_dev, now.st_ino)) or not same_program:
        raise StaleProgramError(
            "the bundle was replaced (recompiled) since this program loaded it; an update "
            "from the old program would overwrite the new one",
            hint="load the bundle again and update that program",
            where=where,
        )
    from anekit.runtime.program import from_bundle

    fresh = from_bundle(read_bundle(root, verify=True))  # another process's update: build on it
    return fresh.manifest, fresh.weights


def update_many(
    items: Sequence[tuple[Program, Mapping[str, Any]]], *, verify: bool = True
) -> list[UpdateReport]:
    """Update several programs at once (Orion's 60 per training step): each commits on its
    own, on a few threads, so one program's fsync overlaps another's conversion."""
    with ThreadPoolExecutor(min(4, max(1, len(items)))) as pool:
        jobs = [pool.submit(update_weights, p, u, verify=verify) for p, u in items]
        return [job.result() for job in jobs]


def _checked(wmap: WeightMap, updates: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Each update as a flat array of its source weight's dtype, shape checked."""
    if not isinstance(updates, Mapping):
        raise InputError(
            f"update_weights takes a mapping of weight name to array, not {type(updates).__name__}",
            hint="e.g. program.update_weights({'fc1.weight': new_array})",
        )
    out = {}
    for name, value in updates.items():
        weight = wmap.weights.get(name)
        if weight is None:
            why = wmap.fixed.get(name)
            if why is not None:
                raise ModelError(
                    f"the weight '{name}' cannot be updated in place: {why}",
                    hint="recompile the model with the new value",
                )
            raise InputError(
                f"the program has no weight '{name}'",
                hint=f"weight_names() lists {len(wmap.weights)}: "
                + ", ".join(list(wmap.weights)[:8])
                + (", ..." if len(wmap.weights) > 8 else ""),
            )
        array = np.asarray(value)
        if array.dtype.kind not in "fiu":
            raise InputError(f"the new value of '{name}' has dtype {array.dtype}; give numbers")
        if tuple(array.shape) != weight.shape:
            raise InputError(
                f"the new value of '{name}' has shape {list(array.shape)}, the weight is "
                f"{list(weight.shape)}",
                hint="an update keeps every weight's shape (a new shape needs a recompile)",
            )
        out[name] = np.ascontiguousarray(array, dtype=dtype_info(weight.dtype).numpy_dtype).reshape(
            -1
        )
    return out


def _patched(
    data: bytes | memoryview, changes: Sequence[tuple[Any, np.ndarray]], where: str
) -> list[bytes | memoryview]:
    """The weight file with the changed blobs' data replaced, as chunks in file order
    (``changes``: each placement with its source weight converted to the stored dtype)."""
    with BlobReader(data) as reader:
        replaced = []
        for p, flat in changes:
            rec = reader.record(p.record)
            count = int(np.prod(p.shape, dtype=np.int64))
            if rec.dtype.name != p.dtype or rec.count != count:
                raise FormatError(
                    f"the blob at offset {p.record} holds {rec.count} {rec.dtype.name} values; "
                    f"the weight map expects {count} {p.dtype}",
                    where=where,
                )
            new = np.ascontiguousarray(p.take(flat))
            replaced.append((rec.data_offset, rec.size, memoryview(new).cast("B")))
    replaced.sort(key=lambda r: r[0])
    view = memoryview(data)
    chunks: list[bytes | memoryview] = []
    at = 0
    for offset, size, new in replaced:
        if offset < at:
            raise FormatError(f"two placements share the blob at offset {offset}", where=where)
        chunks += [view[at:offset], new]
        at = offset + size
    chunks.append(view[at:])
    return chunks


# --- committing to disk ---------------------------------------------------------------------


def _commit(
    root: Path, program: Program, rebuilt: list, manifest: Any, pool: ThreadPoolExecutor
) -> None:
    """Write the new files beside their targets, put the journal in place (the commit
    point), then do the renames; a failure before the commit point (a full or read-only
    disk) removes what this update wrote and leaves the bundle as it was."""
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    renames: list[tuple[str, str]] = []

    def write(rel: str, chunks: Sequence[bytes | memoryview]) -> None:
        write_synced(root / _temp_name(rel, token), chunks, exclusive=True)

    for index, _, _, _ in rebuilt:
        rel = program.segments[index].weights
        assert rel is not None
        renames.append((_temp_name(rel, token), rel))
    staged = root / _temp_name(JOURNAL, token)
    text = manifest.to_bytes().decode("utf-8")
    try:
        jobs = [pool.submit(write, final, chunks)
                for (_, final), (_, chunks, _, _) in zip(renames, rebuilt, strict=True)]  # fmt: skip
        for job in jobs:
            job.result()
        # the journal carries the new manifest: one fsync'd file besides the weights
        journal = json.dumps({"token": token, "renames": renames, "manifest": text}).encode()
        write_synced(staged, [journal], exclusive=True)
        os.replace(staged, root / JOURNAL)  # the commit point
    except OSError as exc:
        for temp in [staged, *(root / t for t, _ in renames)]:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
        raise os_error(exc, f"update the weights of '{root}' (the bundle is unchanged)") from None
    try:
        _finish(root, renames, text, token)
    except OSError as exc:
        raise os_error(exc, f"finish the weight update of '{root}' (it is committed: the next "
                            "load of the bundle completes it)") from None  # fmt: skip


def recover(root: Path) -> None:
    """Finish an update that committed (its journal is in place) and remove the files of
    one that did not, under the bundle's lock, taken only when something is left: a bundle
    without either is left as it is (and may be read-only)."""
    journal = root / JOURNAL
    if not os.path.lexists(journal) and next(_leftovers(root), None) is None:
        return
    try:
        with locked_folder(root, exclusive=True) as held:
            _recover_locked(root, held)
    except OSError as exc:
        raise os_error(exc, f"recover the interrupted weight update of '{root}'") from None


def _recover_locked(root: Path, held: bool) -> None:
    """:func:`recover` for a caller holding the bundle's exclusive lock (``held``; False
    where the file system has no locks): what a writer left is touched only when that
    writer is proven gone: it would hold the lock, or its process no longer runs."""
    journal = root / JOURNAL
    if journal.is_file() and not journal.is_symlink():
        renames, manifest, token = _read_journal(root, journal)
        if held or not alive(int(token.partition("-")[0])):
            _finish(root, renames, manifest, token)
    for stale, pid in list(_leftovers(root)):
        if (held and pid == os.getpid()) or not alive(pid):
            stale.unlink(missing_ok=True)


def _finish(root: Path, renames: Sequence[tuple[str, str]], manifest: str, token: str) -> None:
    for temp, final in renames:
        source = root / temp
        if source.is_file() and not source.is_symlink():
            os.replace(source, root / final)
    staged = root / _temp_name(MANIFEST, token)
    staged.unlink(missing_ok=True)
    with open(staged, "x", encoding="utf-8") as f:
        f.write(manifest)
    os.replace(staged, root / MANIFEST)
    (root / JOURNAL).unlink(missing_ok=True)


def _read_journal(root: Path, journal: Path) -> tuple[list[tuple[str, str]], str, str]:
    where = str(journal)
    try:
        raw = read_file(journal, "update journal", max_bytes=_MAX_JOURNAL, error=FormatError)
        data = json.loads(raw.decode("utf-8"))
        token, pairs, manifest = str(data["token"]), data["renames"], data["manifest"]
        renames = [(str(a), str(b)) for a, b in pairs]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise FormatError(f"an unreadable update journal: {exc}", where=where) from None
    if not isinstance(manifest, str) or not _TOKEN.match(token):
        raise FormatError("an update journal without a manifest or token", where=where)
    for temp, final in renames:
        check_relative(final, where)
        if temp != _temp_name(final, token) or not final.endswith("/weight.bin"):
            raise FormatError(
                f"the journal names {temp!r}, not a file an update writes", where=where
            )
        resolve_inside(root, final, where)
    return renames, manifest, token


def _temp_name(rel: str, token: str) -> str:
    head, _, tail = rel.rpartition("/")
    name = f".{tail}.{token}{_NEW}"
    return f"{head}/{name}" if head else name


def _leftovers(root: Path) -> Iterator[tuple[Path, int]]:
    """Files an uncommitted update wrote, with the writer's process id:
    ``.NAME.<pid>-<12 hex>.anekit-new`` beside the manifest and weight files."""
    dirs = [root, *(p.parent for p in root.glob(f"segments/*/{WEIGHT_FILE}"))]
    for d in dirs:
        for p in d.glob(f".*{_NEW}"):
            token = p.name[: -len(_NEW)].rpartition(".")[2]
            if _TOKEN.match(token) and p.is_file() and not p.is_symlink():
                yield p, int(token.partition("-")[0])


# --- verifying that loaded backends took the update ------------------------------------------


def _probe_before(program: Program, by_segment: Mapping[int, Any]) -> dict:
    """Per loaded backend and changed segment: a probe input and the output before."""
    rng = np.random.default_rng(0)
    probes = {}
    for backend, runners in program.loaded_runners().items():
        for index in by_segment:
            args = _probe_args(program.segments[index], rng)
            probes[(backend, index)] = (args, runners[index].run(args))
    return probes


def _probe_after(program: Program, probes: Mapping) -> dict[str, bool]:
    """A backend took the update when each changed segment's probe output changed wherever
    the new weights change it on a freshly loaded simulator."""
    from anekit.runtime import backends

    sim = backends.get("sim")
    fresh: dict[int, dict] = {}
    verdict: dict[str, bool] = {}
    loaded = program.loaded_runners()
    for (backend, index), (args, before) in probes.items():
        if index not in fresh:
            fresh[index] = sim.prepare(program.segment_source(index)).run(args)
        after = loaded[backend][index].run(args)
        moved = any(not _same(before[k], fresh[index][k]) for k in before)
        took = not moved or any(not _same(before[k], after[k]) for k in before)
        verdict[backend] = verdict.get(backend, True) and took
    return verdict


def _probe_args(segment: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    args = {}
    for io in segment.inputs:
        if io.mil_dtype in ("fp16", "fp32"):
            args[io.mil_name] = rng.standard_normal(io.mil_shape).astype(np.float32)
        elif io.mil_dtype == "bool":
            args[io.mil_name] = rng.integers(0, 2, io.mil_shape).astype(bool)
        else:
            args[io.mil_name] = np.zeros(io.mil_shape, np.int32)  # valid as any index
    return args


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
