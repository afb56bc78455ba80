"""The file readers under fuzz that take a path: .npy and .npz feeds, and bundles (one file
of a bundle corrupted, the rest whole; with `+rehash` the manifest is rewritten to match,
as an attacker would, so the checks behind the digests are reached). Each case is written
into a sandbox; the case must not change any file (see `sandbox.py`)."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import random
import zipfile
from typing import Any

import numpy as np

from format_fuzzer.engine import Field, FuzzTarget, Prepared, mutate_overwrite, user_facing_target
from format_fuzzer.sandbox import sandbox, zero_feeds

DESCRS = ("<f4", "<f8", "<f2", "|O", "<i8", "|b1", "<c16", "|V8", ">f4", "<U3", "|S0", "<M8[s]",
          [("a", "<f4"), ("b", "|O")], [("a", "<i4", (2,))])  # fmt: skip
DIMS = (0, 1, 2, 3, 7, 1 << 20, 1 << 31, 1 << 40, 10**18, -1)


# ---- .npy -------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _npy_fixtures() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(0)
    arrays = {
        "f32_1x8": rng.standard_normal((1, 8)).astype(np.float32),
        "f16_2x3x4": rng.standard_normal((2, 3, 4)).astype(np.float16),
        "i64_5": np.arange(5, dtype=np.int64),
        "bool_3x3": rng.integers(0, 2, (3, 3)).astype(bool),
        "u8_scalar": np.array(7, np.uint8),
        "fortran_f64": np.asfortranarray(rng.standard_normal((3, 4))),
        "empty": np.zeros((0, 4), np.float32),
    }
    return [(name, _npy(a)) for name, a in arrays.items()]


def _header_end(data: bytes) -> int:
    if data[6:7] == b"\x01":
        return 10 + int.from_bytes(data[8:10], "little")
    return 12 + int.from_bytes(data[8:12], "little")


def _npy_fields(data: bytes) -> list[Field]:
    end = min(_header_end(data), len(data))
    return [Field(6, 1, "major"), Field(7, 1, "minor"), Field(8, 2, "header length")] + [
        Field(i, 1, "header") for i in range(10, end)
    ]


def _npy_boundaries(data: bytes) -> list[int]:
    return [6, 8, 10, _header_end(data), len(data) - 1]


def npy_header_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """The header rewritten with another shape, dtype or order; the data kept."""
    end = _header_end(fixture.data)
    header = ast.literal_eval(fixture.data[10:end].decode("latin1"))
    choice = rng.randrange(3)
    if choice == 0:
        header["shape"] = tuple(rng.choice(DIMS) for _ in range(rng.randrange(0, 5)))
    elif choice == 1:
        header["descr"] = rng.choice(DESCRS)
    else:
        header["fortran_order"] = not header["fortran_order"]
    text = repr(header).encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + fixture.data[end:]
    return data, f"header {header}"


def _read_case(name: str, data: bytes) -> Any:
    from anekit.formats.npy import read_array

    box = sandbox()
    path = box.fresh() / name
    path.write_bytes(data)
    before = box.snapshot()
    try:
        return read_array(path, "the feed")
    finally:
        box.check(before)


def npy_target() -> FuzzTarget:
    return user_facing_target("npy", _npy_fixtures, lambda data: _read_case("x.npy", data),
                              _npy_fields, _npy_boundaries, npy_header_edit)  # fmt: skip


# ---- .npz -------------------------------------------------------------------------------


def _npz(member: bytes, compress: bool, name: str = "x.npy") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        z.writestr(name, member)
    return buffer.getvalue()


def _npz_fixtures() -> list[tuple[str, bytes]]:
    found = []
    for name, data in _npy_fixtures()[:4]:
        found += [(f"{name}_stored", _npz(data, False)), (f"{name}_deflated", _npz(data, True))]
    # a member that inflates to 8 MB from 8 kB: its header edits claim more, or other types
    found.append(("zeros_8mb_deflated", _npz(_npy(np.zeros(1 << 20, np.float64)), True)))
    return found


def _npz_fields(data: bytes) -> list[Field]:
    fields = [Field(18, 4, "compressed size"), Field(22, 4, "size"), Field(26, 2, "name length"),
              Field(28, 2, "extra length"), Field(8, 2, "method")]  # fmt: skip
    at = data.rfind(b"PK\x01\x02")
    if at >= 0:
        fields += [Field(at + 10, 2, "cd method"), Field(at + 20, 4, "cd compressed size"),
                   Field(at + 24, 4, "cd size"), Field(at + 42, 4, "local header offset")]  # fmt: skip
    end = data.rfind(b"PK\x05\x06")
    if end >= 0:
        fields += [Field(end + 10, 2, "entries"), Field(end + 12, 4, "cd length"),
                   Field(end + 16, 4, "cd offset")]  # fmt: skip
    return fields


def _npz_boundaries(data: bytes) -> list[int]:
    return sorted({0, 30, data.rfind(b"PK\x01\x02"), data.rfind(b"PK\x05\x06"), len(data) - 1})


def npz_member_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """The member's .npy header rewritten (a claim of another size or dtype), re-zipped."""
    with zipfile.ZipFile(io.BytesIO(fixture.data)) as z:
        info = z.infolist()[0]
        member = z.read(info)
    prepared = Prepared("member", member, (), ())
    data, description = npy_header_edit(rng, prepared)
    return _npz(data, info.compress_type == zipfile.ZIP_DEFLATED), f"member {description}"


def npz_target() -> FuzzTarget:
    return user_facing_target("npz", _npz_fixtures, lambda data: _read_case("x.npz", data),
                              _npz_fields, _npz_boundaries, npz_member_edit)  # fmt: skip


# ---- bundles ------------------------------------------------------------------------------

_BUNDLES: dict[str, dict[str, bytes]] = {}


def _bundle_fixtures() -> list[tuple[str, bytes]]:
    """Every file of two compiled bundles, each as is and with `+rehash`."""
    import anekit
    from format_fuzzer.model_targets import _hand_built

    found = []
    for name, data in _hand_built()[:3]:
        compiled = anekit.compile(anekit.from_onnx(data), target="m4")
        files = {rel: bytes(compiled.bundle.files[rel]) for rel in compiled.bundle.files}
        _BUNDLES[name] = files
        for rel in sorted(files):
            found.append((f"{name}:{rel}", files[rel]))
            if rel != "manifest.json":
                found.append((f"{name}:{rel}+rehash", files[rel]))
    return found


def json_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """One value of a JSON file replaced (the manifest's paths, sizes, shapes, names)."""
    try:
        doc = json.loads(fixture.data)
    except ValueError:  # a MIL or weight file of the bundle: a byte-level edit instead
        return mutate_overwrite(rng, fixture)
    spots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            spots.append((node, key))
            walk(value)

    walk(doc)
    if not spots:
        return fixture.data, "no values"
    node, key = rng.choice(spots)
    node[key] = rng.choice([0, -1, 2**31, 2**63, 1e308, None, True, "", "../../escape", "/etc/passwd",
                            "segments/0/../../x", "a" * 300, [], {}, [2**31, 2**31],
                            "segments/0/model.mil", "report.json"])  # fmt: skip
    return json.dumps(doc).encode(), f"{key} = {node[key]!r}"[:200]


def _bundle_case(fixture: Prepared, data: bytes) -> Any:
    from anekit import load

    name, _, rel = fixture.name.partition(":")
    rehash = rel.endswith("+rehash")
    rel = rel.removesuffix("+rehash")
    files = dict(_BUNDLES[name])
    files[rel] = data
    if rehash:
        manifest = json.loads(files["manifest.json"])
        manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    box = sandbox()
    root = box.fresh() / "m.anekit"
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)
    before = box.snapshot()
    try:
        program = load(root)
        feeds = zero_feeds((p.name, p.shape, np.dtype(_NUMPY.get(p.dtype, "float32"))) for p in program.inputs)
        return program.run(feeds) if feeds is not None else program
    finally:
        box.check(before)


_NUMPY = {"fp32": "float32", "fp16": "float32", "int32": "int32", "int64": "int64",
          "int8": "int8", "uint8": "uint8", "bool": "bool"}  # fmt: skip


def bundle_target() -> FuzzTarget:
    return user_facing_target(
        "bundle", _bundle_fixtures, lambda data: None, lambda data: [],
        lambda data: [0, len(data) // 2, len(data) - 1], json_edit,
        slow_seconds=10.0, decode_case=_bundle_case,
    )  # fmt: skip
