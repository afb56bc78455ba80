"""The model readers under fuzz: ONNX models (mutated protobuf bytes and hostile graphs)
imported and run on the reference backend, and MIL text parsed, loaded and run on the
simulator. A clean refusal is any AnekitError (exit 2); anything else is a finding."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from anekit.errors import AnekitError
from format_fuzzer.engine import Field, FuzzTarget, Prepared, user_facing_target
from format_fuzzer.sandbox import zero_feeds

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
MIL_DATA = Path(__file__).resolve().parents[2] / "tests" / "formats" / "mil" / "data"
EXTREME_INTS = (0, 1, -1, 2, 3, -2, 7, 2**31 - 1, 2**31, 2**32, -(2**31), 2**40, 2**62, 10**9,
                99999)  # fmt: skip
EXTREME_FLOATS = (0.0, -0.0, 1e30, -1e30, float("inf"), float("-inf"), float("nan"), 1e-45)
OPS = ("Tile", "Expand", "ConstantOfShape", "Reshape", "Gather", "Slice", "Conv", "MatMul",
       "Softmax", "Range", "Resize", "Pad", "Concat", "Split", "Transpose", "ReduceSum", "Div",
       "Cast", "Where", "TopK", "Squeeze", "Unsqueeze", "Flatten", "Einsum", "ScatterND",
       "NonZero", "Loop", "If", "Identity", "Shape", "Size", "OneHot", "CumSum", "Trilu")  # fmt: skip


# ---- ONNX fixtures ------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "fixture", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


def _vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _hand_built() -> list[tuple[str, bytes]]:
    """Small graphs with what hostile inputs aim at: weights, shape sub-graphs folded at
    import, Expand/Tile/ConstantOfShape sizes, Gather indices, a convolution."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    k = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "K")
    shape2 = numpy_helper.from_array(np.array([2, 4], np.int64), "shape2")
    reps = numpy_helper.from_array(np.array([2, 1], np.int64), "reps")
    idx = numpy_helper.from_array(np.array([0, 1], np.int64), "idx")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    return [
        ("matmul", _model([helper.make_node("MatMul", ["x", "W"], ["h"]),
                           helper.make_node("Add", ["h", "b"], ["a"]),
                           helper.make_node("Relu", ["a"], ["y"])],
                          [_vi("x", [1, 8])], [_vi("y", [1, 4])], [w, b])),
        ("shape_subgraph", _model([helper.make_node("Shape", ["x"], ["s"]),
                                   helper.make_node("Gather", ["s", "idx"], ["g"], axis=0),
                                   helper.make_node("ConstantOfShape", ["g"], ["z"]),
                                   helper.make_node("Expand", ["x", "shape2"], ["e"]),
                                   helper.make_node("Tile", ["e", "reps"], ["t"]),
                                   helper.make_node("ReduceSum", ["t", "axes"], ["y"]),
                                   helper.make_node("Add", ["z", "z"], ["y2"])],
                                  [_vi("x", [1, 4])], [_vi("y", None), _vi("y2", None)],
                                  [shape2, reps, idx, axes])),
        ("conv", _model([helper.make_node("Conv", ["x", "K"], ["c"], pads=[1, 1, 1, 1]),
                         helper.make_node("Sigmoid", ["c"], ["y"])],
                        [_vi("x", [1, 3, 6, 6])], [_vi("y", None)], [k])),
        ("softmax", _model([helper.make_node("Softmax", ["x"], ["s"], axis=-1),
                            helper.make_node("Slice", ["s", "starts", "ends"], ["y"])],
                           [_vi("x", [2, 5])], [_vi("y", None)],
                           [numpy_helper.from_array(np.array([1], np.int64), "starts"),
                            numpy_helper.from_array(np.array([4], np.int64), "ends")])),
    ]  # fmt: skip


def _onnx_fixtures() -> list[tuple[str, bytes]]:
    """The hand-built graphs and onnx's own small test models that anekit imports."""
    from anekit import from_onnx

    found = _hand_built()
    for folder in ("simple", "pytorch-operator"):
        for path in sorted((ONNX_DATA / folder).glob("*/model.onnx")):
            data = path.read_bytes()
            try:
                from_onnx(data)
            except AnekitError:
                continue
            found.append((f"{folder}/{path.parent.name}", data))
    return found[:40]


def _onnx_decode(data: bytes) -> Any:
    from anekit import from_onnx

    graph = from_onnx(data)
    feeds = zero_feeds((v.name, v.shape, v.dtype.numpy) for v in graph.inputs)
    return graph.run(feeds) if feeds is not None else graph


# ---- ONNX wire format: the keys and lengths worth corrupting ------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if not byte & 0x80:
            return value, pos


def _wire_fields(data: bytes, base: int = 0, depth: int = 0, out: list[Field] | None = None) -> list[Field]:
    """Keys and length prefixes of every field, recursing into what parses as a message."""
    out = [] if out is None else out
    pos = 0
    while pos < len(data) and len(out) < 4000:
        start = pos
        key, pos = _varint(data, pos)
        out.append(Field(base + start, pos - start, f"key {key >> 3}/{key & 7}@d{depth}"))
        kind = key & 7
        if kind == 0:
            vstart = pos
            _, pos = _varint(data, pos)
            out.append(Field(base + vstart, min(pos - vstart, 8), f"varint {key >> 3}"))
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            lstart = pos
            length, pos = _varint(data, pos)
            out.append(Field(base + lstart, pos - lstart, f"length {key >> 3}"))
            body = data[pos : pos + length]
            if depth < 6 and len(body) > 1:
                try:
                    _wire_fields(body, base + pos, depth + 1, out)
                except ValueError:
                    pass
            pos += length
        else:
            raise ValueError("bad wire type")
    if pos != len(data) and depth:
        raise ValueError("not a message")
    return out


def _onnx_fields(data: bytes) -> list[Field]:
    try:
        return _wire_fields(data)
    except ValueError:
        return []


def _onnx_boundaries(data: bytes) -> list[int]:
    return sorted({f.offset for f in _onnx_fields(data)})


# ---- hostile graphs: structural edits of a parsed model -----------------------------------


def _values(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names = [v.name for v in (*g.input, *g.output)] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output]


def _edit_dim(rng: random.Random, m: onnx.ModelProto) -> str:
    infos = [*m.graph.input, *m.graph.output, *m.graph.value_info]
    dims = [d for v in infos for d in v.type.tensor_type.shape.dim]
    if not dims:
        return "no dims"
    d = rng.choice(dims)
    if rng.random() < 0.2:
        d.dim_param = rng.choice(["N", "", "x y"])
        return f"dim_param {d.dim_param!r}"
    d.dim_value = rng.choice(EXTREME_INTS)
    return f"dim {d.dim_value}"


def _edit_initializer(rng: random.Random, m: onnx.ModelProto) -> str:
    if not m.graph.initializer:
        return "no initializer"
    t = rng.choice(m.graph.initializer)
    choice = rng.randrange(4)
    if choice == 0 and t.dims:
        i = rng.randrange(len(t.dims))
        t.dims[i] = rng.choice(EXTREME_INTS)
        return f"initializer {t.name} dim {i} = {t.dims[i]}"
    if choice == 1:
        t.data_type = rng.choice([0, 2, 8, 10, 13, 16, 17, 99])
        return f"initializer {t.name} type {t.data_type}"
    if choice == 2 and t.raw_data:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data))]
        return f"initializer {t.name} raw_data cut"
    t.dims.append(rng.choice(EXTREME_INTS))
    return f"initializer {t.name} extra dim"


def _edit_attribute(rng: random.Random, m: onnx.ModelProto) -> str:
    attrs = [a for n in m.graph.node for a in n.attribute]
    if not m.graph.node:
        return "no node"
    if not attrs:
        node = rng.choice(m.graph.node)
        node.attribute.append(helper.make_attribute(rng.choice(["axis", "perm", "pads", "to"]),
                                                    rng.choice(EXTREME_INTS)))  # fmt: skip
        return f"attribute added to {node.op_type}"
    a = rng.choice(attrs)
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice(EXTREME_INTS)
    elif a.type == onnx.AttributeProto.INTS:
        a.ints[:] = [rng.choice(EXTREME_INTS) for _ in range(rng.randrange(0, 6))]
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice(EXTREME_FLOATS)
    else:
        a.type = rng.choice([1, 2, 3, 6, 7])
    return f"attribute {a.name}"


def _edit_node(rng: random.Random, m: onnx.ModelProto) -> str:
    if not m.graph.node:
        return "no node"
    n = rng.choice(m.graph.node)
    names = _values(m)
    choice = rng.randrange(6)
    if choice == 0:
        n.op_type = rng.choice(OPS)
        return f"op {n.op_type}"
    if choice == 1 and n.input:
        n.input[rng.randrange(len(n.input))] = rng.choice([*names, "", "nowhere"])
        return "input rewired"
    if choice == 2 and n.output and names:
        n.output[0] = rng.choice(names)  # two producers, or a cycle
        return "output renamed"
    if choice == 3:
        n.input.append(rng.choice(names or ["x"]))
        return "input added"
    if choice == 4:
        del m.graph.node[rng.randrange(len(m.graph.node))]
        return "node deleted"
    n.domain = rng.choice(["ai.onnx.ml", "com.microsoft", "nowhere"])
    return f"domain {n.domain}"


def _edit_bomb(rng: random.Random, m: onnx.ModelProto) -> str:
    """A node that asks for a huge result, as a new graph output."""
    big = [rng.choice([30000, 100000, 2**31, 10**9]) for _ in range(rng.randint(1, 3))]
    shape = numpy_helper.from_array(np.array(big, np.int64), f"bomb_shape_{rng.randrange(99)}")
    m.graph.initializer.append(shape)
    x = rng.choice([v.name for v in m.graph.input] or [shape.name])
    op = rng.choice(["ConstantOfShape", "Expand", "Tile", "Range", "Reshape"])
    inputs = {"ConstantOfShape": [shape.name], "Expand": [x, shape.name],
              "Tile": [x, shape.name], "Reshape": [x, shape.name],
              "Range": [shape.name, shape.name, shape.name]}[op]  # fmt: skip
    out = f"bomb_{len(m.graph.node)}"
    m.graph.node.append(helper.make_node(op, inputs, [out], name=out))
    m.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    return f"{op} to {big}"


def _edit_opset(rng: random.Random, m: onnx.ModelProto) -> str:
    m.opset_import[0].version = rng.choice([0, 1, 6, 7, 13, 22, 99, 2**40])
    if rng.random() < 0.3:
        m.ir_version = rng.choice([0, 1, 3, 99])
    return f"opset {m.opset_import[0].version}"


_EDITS = (_edit_dim, _edit_initializer, _edit_attribute, _edit_node, _edit_node, _edit_bomb, _edit_opset)


def hostile_graph(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    model = onnx.ModelProto()
    model.ParseFromString(fixture.data)
    done = [rng.choice(_EDITS)(rng, model) for _ in range(rng.randint(1, 3))]
    return model.SerializeToString(), "hostile: " + "; ".join(done)


def onnx_target() -> FuzzTarget:
    return user_facing_target("onnx", _onnx_fixtures, _onnx_decode, _onnx_fields,
                              _onnx_boundaries, hostile_graph, slow_seconds=10.0)  # fmt: skip


# ---- MIL text ------------------------------------------------------------------------------


def _mil_fixtures() -> list[tuple[str, bytes]]:
    """The parser's test programs (small ones) and programs anekit emits, weights inline."""
    import anekit
    from anekit.formats.blob import BlobReader
    from anekit.formats.mil import print_program
    from anekit.runtime.widen import inline_blobs

    found = [(p.stem, p.read_bytes()) for p in sorted(MIL_DATA.glob("*.mil"))
             if p.stat().st_size < 64 << 10]  # fmt: skip
    for name, data in _hand_built():
        compiled = anekit.compile(anekit.from_onnx(data), target="m4")
        contents = compiled.bundle
        for s in contents.manifest.segments:
            program = contents.programs[s.index]
            if s.weights is not None:
                program = inline_blobs(program, BlobReader(contents.files[s.weights]))
            found.append((f"{name}_segment{s.index}", print_program(program).encode()))
    return found


def _mil_decode(data: bytes) -> Any:
    from anekit.formats.mil import parse_bytes
    from anekit.simulator import SimProgram

    program = parse_bytes(data)
    sim = SimProgram(program)
    ports = []
    for name, t in sim.inputs.items():
        shape = tuple(getattr(t, "shape", ()))
        if not all(isinstance(d, int) for d in shape):
            return sim
        ports.append((name, shape, {"fp16": np.float16, "fp32": np.float32, "int32": np.int32,
                                    "bool": np.bool_}.get(t.dtype, np.float32)))  # fmt: skip
    feeds = zero_feeds(ports)
    return sim.run(feeds) if feeds is not None else sim


def _mil_numbers(data: bytes) -> list[Field]:
    """Every number in the text (dims, literals, offsets) as a 1..8-byte field to corrupt."""
    import re

    return [Field(m.start(), min(len(m.group()), 8), "number")
            for m in re.finditer(rb"\d+", data)][:4000]  # fmt: skip


def _mil_lines(data: bytes) -> list[int]:
    return [i + 1 for i, c in enumerate(data) if c == 0x0A]


def mil_token_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """A token-level edit that keeps the text text: a number made extreme, a dtype or an
    identifier swapped, a line repeated or dropped."""
    import re

    text = fixture.data.decode("utf-8", "replace")
    choice = rng.randrange(5)
    if choice == 0:
        spots = list(re.finditer(r"\d+", text))
        if spots:
            m = rng.choice(spots)
            new = str(rng.choice([0, 1, 2**31, 2**32 + 1, 10**12, 2**64, 99999999999999999999]))
            return (text[: m.start()] + new + text[m.end() :]).encode(), f"number {m.group()} -> {new}"
    if choice == 1:
        dtypes = ["fp16", "fp32", "int32", "int8", "uint8", "bool", "string", "int64", "fp64"]
        old, new = rng.choice(dtypes), rng.choice(dtypes)
        return text.replace(old, new, rng.randint(1, 3)).encode(), f"dtype {old} -> {new}"
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    if choice == 2:
        lines.insert(i, lines[rng.randrange(len(lines))])
        return "\n".join(lines).encode(), f"line repeated at {i}"
    if choice == 3:
        del lines[i]
        return "\n".join(lines).encode(), f"line {i} dropped"
    words = sorted(set(re.findall(r"[A-Za-z_]\w*", text)))
    old, new = rng.choice(words), rng.choice(words)
    return re.sub(rf"\b{re.escape(old)}\b", new, text, count=1).encode(), f"word {old} -> {new}"


def mil_target() -> FuzzTarget:
    return user_facing_target("mil", _mil_fixtures, _mil_decode, _mil_numbers, _mil_lines,
                              mil_token_edit, slow_seconds=10.0)  # fmt: skip
