"""The ONNX importer: checks the whole model, folds shape sub-graphs, builds an ir.Graph."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from anekit import budget
from anekit.errors import (
    AnekitError,
    DynamicShapeError,
    MemoryBudgetError,
    ModelError,
    ShapeError,
    UnsupportedModelError,
)
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters import CONVERTERS
from anekit.frontend.onnx.converters.dtypes import ONNX_DTYPES as _IO_DTYPES
from anekit.frontend.onnx.loader import (
    FOUR_BIT,
    ExternalData,
    load_model,
    onnx_type_name,
    tensor_to_array,
)
from anekit.frontend.onnx.signature import (
    declared_inputs,
    dynamic_dimensions_text,
    placeholder_shapes,
    shape_option_text,
    suggest_shapes,
)
from anekit.ir.dtypes import dtype_of_array
from anekit.ir.edit import GraphEditor
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.interpret import run_node
from anekit.ir.registry import InferError, KernelError, infer_types
from anekit.naming import fresh_name

_DEFAULT_DOMAINS = ("", "ai.onnx")

# Why whole families of ONNX ops stay unsupported (shown next to them in the error).
_WHY_UNSUPPORTED: dict[str, str] = {
    **dict.fromkeys(("Loop", "Scan"), "control flow: anekit compiles one static graph"),
    **dict.fromkeys(
        (
            "SequenceAt",
            "SequenceConstruct",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SequenceMap",
            "SplitToSequence",
            "ConcatFromSequence",
            "Optional",
            "OptionalGetElement",
            "OptionalHasElement",
        ),
        "sequences and optionals: anekit has tensors only",
    ),  # fmt: skip
    **dict.fromkeys(
        ("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer"),
        "string tensors",
    ),
    **dict.fromkeys(
        (
            "Bernoulli",
            "RandomNormal",
            "RandomNormalLike",
            "RandomUniform",
            "RandomUniformLike",
            "Multinomial",
        ),
        "random numbers",
    ),  # fmt: skip
    "NonMaxSuppression": "its output shape depends on the data",
    "ImageDecoder": "encoded image bytes",
}
MIN_OPSET = 1
_TRIAL_LIMIT_BYTES = 64 << 20  # models up to this size get a --shape hint found by trial imports
# how an unknown input name is described, per option (the CLI's --shape feeds input_shapes)
_OPTION_WORDS = {
    "input_shapes": "shapes were given for",
    "constant_inputs": "constant values were given for",
}


def from_onnx(
    model: str | os.PathLike | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    constant_inputs: Mapping[str, Any] | None = None,
    constants: Mapping[str, Any] | None = None,
) -> Graph:
    """Import an ONNX model (path, bytes or ModelProto) as an ir.Graph with static shapes.

    ``input_shapes`` fixes dynamic input dimensions, e.g. ``{"input_ids": (1, 64)}``.
    ``constants`` (or its older name ``constant_inputs``) freezes inputs to given values
    (they stop being graph inputs): a sample rate an ``If`` branches on, a shape or axes
    argument. A value is converted to the input's declared type when that is exact.
    """
    proto, base_dir = load_model(model)
    frozen = {**(constant_inputs or {}), **(constants or {})}
    return Importer(proto, base_dir, input_shapes, frozen).run()


# The largest dimension input_shapes may give (MIL shapes are int32).
MAX_DIMENSION = 2**31 - 1


def checked_input_shapes(input_shapes: Any) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` as {name: dims}, every dimension a whole number in range."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise ModelError(
            f"input_shapes must map input names to shapes, not a {type(input_shapes).__name__}",
            hint="e.g. input_shapes={'input_ids': (1, 64)}",
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in input_shapes.items():
        if isinstance(dims, str | bytes) or not isinstance(dims, Sequence | np.ndarray):
            raise ModelError(f"input_shapes['{name}'] is {dims!r}, not a sequence of sizes")
        bad = [
            d for d in list(dims)
            if isinstance(d, bool) or not isinstance(d, int | np.integer)
            or not 0 <= int(d) <= MAX_DIMENSION
        ]  # fmt: skip
        if bad:
            raise ModelError(
                f"input_shapes['{name}'] = {tuple(dims)!r} has {bad[0]!r}, which is not a size",
                hint=f"every dimension is a whole number from 0 to {MAX_DIMENSION}",
            )
        shapes[str(name)] = tuple(int(d) for d in dims)
    return shapes


def check_single_assignment(graph: onnx.GraphProto) -> None:
    """Every value is defined once (the ONNX spec's SSA rule): by one node output, a graph
    input or an initializer. onnxruntime refuses a model that breaks it."""
    defined: dict[str, str] = {}
    for vi in graph.input:
        defined.setdefault(vi.name, "a graph input")
    for t in graph.initializer:
        if defined.get(t.name, "a graph input") != "a graph input":
            raise ModelError(f"value '{t.name}' is defined by two initializers")
        defined[t.name] = "an initializer"
    for i, node in enumerate(graph.node):
        here = f"node '{node.name or f'{node.op_type}_{i}'}' ({node.op_type})"
        for out in node.output:
            if not out:
                continue
            if out in defined:
                raise ModelError(
                    f"value '{out}' is defined twice: by {defined[out]} and by {here}",
                    hint="ONNX requires every value to have exactly one definition; "
                    "rename one of them",
                )
            defined[out] = here


def check_supported(graph: onnx.GraphProto, domains: Mapping[str, int]) -> None:
    """Raise one UnsupportedModelError naming every unsupported op with counts and nodes."""
    missing: OrderedDict[str, list[str]] = OrderedDict()
    for i, node in enumerate(graph.node):
        domain = node.domain or ""
        key = node.op_type if domain in _DEFAULT_DOMAINS else f"{domain}.{node.op_type}"
        if key in CONVERTERS:
            continue
        missing.setdefault(key, []).append(node.name or f"#{i}")
    if missing:
        parts = []
        for op, names in missing.items():
            shown = ", ".join(f"'{n}'" for n in names[:3]) + (", ..." if len(names) > 3 else "")
            why = f" [{_WHY_UNSUPPORTED[op]}]" if op in _WHY_UNSUPPORTED else ""
            parts.append(f"{op} x{len(names)} ({shown}){why}")
        total = sum(len(v) for v in missing.values())
        raise UnsupportedModelError(
            f"the model uses {len(missing)} unsupported op type(s) in {total} node(s): "
            + "; ".join(parts),
            hint="see the README's table of supported ONNX ops",
        )


class Importer:
    """State of one import: value table, constants, and the IR nodes emitted so far."""

    def __init__(
        self,
        proto: onnx.ModelProto,
        base_dir: Path | None,
        input_shapes: Mapping[str, Sequence[int]] | None,
        constant_inputs: Mapping[str, np.ndarray] | None = None,
    ):
        self.proto = proto
        self.constant_inputs = {k: np.asarray(v) for k, v in (constant_inputs or {}).items()}
        self.base_dir = base_dir
        self.external = ExternalData(base_dir)  # data files mapped once, shared by tensors
        self.input_shapes = checked_input_shapes(input_shapes)
        self.values: dict[str, Value] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.four_bit: set[str] = set()  # constants of int4/uint4 codes, widened to bytes
        self.nodes: list[Node] = []
        self.alias: dict[str, str] = {}  # ONNX name -> IR value name
        self._taken: set[str] = set()
        self._node_names: set[str] = set()  # ONNX node names seen
        self._ir_nodes: set[str] = set()  # IR node names emitted
        self.notes: list[tuple[str, str, str, str]] = []  # (code, node, message, hint) warnings
        self.domains = {o.domain or "": o.version for o in proto.opset_import}
        self.opset = self._default_opset()

    def _default_opset(self) -> int:
        version = self.domains.get("", self.domains.get("ai.onnx"))
        if version is None:
            raise ModelError("the model declares no default-domain opset")
        if version < MIN_OPSET:
            raise ModelError(
                f"opset {version} is too old; anekit reads opsets {MIN_OPSET} and newer",
                hint="upgrade it with onnx.version_converter.convert_version(model, 17)",
            )
        return version

    # --- names and values ---------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        name = fresh_name(hint, self._taken)
        self._taken.add(name)
        return name

    def lookup(self, onnx_name: str) -> str:
        try:
            return self.alias[onnx_name]
        except KeyError:
            raise ModelError(f"value '{onnx_name}' is used before it is defined") from None

    def bind(self, onnx_name: str, ir_name: str) -> None:
        self.alias[onnx_name] = ir_name

    def add_constant(self, array: np.ndarray, hint: str) -> str:
        if array.dtype == np.float64:
            raise ModelError(f"constant '{hint}' is float64, which anekit does not support")
        name = self.fresh(hint)
        self._set_constant(name, np.asarray(array, order="C"))
        return name

    def _set_constant(self, name: str, array: np.ndarray) -> None:
        """Record ``array`` (read-only from now on) as the constant value ``name``."""
        array.flags.writeable = False
        try:
            dtype = dtype_of_array(array)
        except ValueError as exc:  # a string or complex constant, say
            raise ModelError(f"constant '{name}': {exc}") from None
        self.values[name] = Value(name, array.shape, dtype)
        self.constants[name] = array

    # --- the import ---------------------------------------------------------------------

    def run(self) -> Graph:
        g = self.proto.graph
        check_supported(g, self.domains)
        check_single_assignment(g)
        init_names = {t.name for t in g.initializer}
        for t in g.initializer:
            self._add_initializer(t)
        graph_inputs = [vi for vi in g.input if vi.name not in init_names]
        names = [vi.name for vi in graph_inputs]
        for option, given in (
            ("input_shapes", self.input_shapes),
            ("constant_inputs", self.constant_inputs),
        ):
            unknown = sorted(set(given) - set(names))
            if unknown:
                raise ModelError(
                    f"{_OPTION_WORDS[option]} {unknown}, which are not inputs of the model; its inputs are {names}"
                )
        self._check_static()
        inputs = []
        for vi in graph_inputs:
            if vi.name in self.constant_inputs:
                self._freeze_input(vi)
            else:
                inputs.append(self._add_input(vi))
        for i, node in enumerate(_topological(g, set())):
            self._convert(node, i)
        outputs = []
        for vi in g.output:
            if vi.name not in self.alias:
                raise ModelError(f"graph output '{vi.name}' is never computed")
            outputs.append(self.alias[vi.name])
        graph = Graph(
            inputs=inputs,
            outputs=[self.values[o] for o in outputs],
            nodes=self.nodes,
            values=self.values,
            constants=self.constants,
            name=g.name or "model",
            metadata={
                "source": "onnx",
                "opset": self.opset,
                "producer": self.proto.producer_name,
                **({"import_notes": list(self.notes)} if self.notes else {}),
            },
        )
        return self._finish(graph, [vi.name for vi in g.output])

    def _finish(self, graph: Graph, onnx_outputs: list[str]) -> Graph:
        """Dead-code elimination; graph outputs renamed to the ONNX output names."""
        ed = GraphEditor(graph)
        ed.name_outputs(onnx_outputs)
        return ed.build()

    def inline(self, branch: onnx.GraphProto, where: str) -> list[str]:
        """Convert a sub-graph's nodes in place (they may read the enclosing graph's values);
        the IR names of its outputs."""
        check_supported(branch, self.domains)
        for t in branch.initializer:
            self._add_initializer(t)
        for i, node in enumerate(_topological(branch, set(self.alias))):
            self._convert(node, i)
        missing = [o.name for o in branch.output if o.name not in self.alias]
        if missing:
            raise ModelError(f"the sub-graph never computes its output(s) {missing}", where=where)
        return [self.alias[o.name] for o in branch.output]

    def _add_initializer(self, t: onnx.TensorProto) -> None:
        arr = tensor_to_array(t, self.base_dir, self.external)
        if arr.dtype not in (
            np.float32,
            np.float16,
            np.int8,
            np.uint8,
            np.int32,
            np.int64,
            np.bool_,
        ):
            if arr.dtype == np.float64:
                arr = arr.astype(np.float32)  # fp64 weights are stored as fp32: the IR has no fp64
            elif arr.dtype.kind in "iu":
                arr = arr.astype(np.int64)
        name = self.fresh(t.name)
        self._set_constant(name, arr)
        if t.data_type in FOUR_BIT:
            self.four_bit.add(name)
        self.bind(t.name, name)

    def _freeze_input(self, vi: onnx.ValueInfoProto) -> None:
        value = self.constant_inputs[vi.name]
        tt = vi.type.tensor_type
        want = _IO_DTYPES.get(tt.elem_type)
        if want is None:
            raise ModelError(
                f"input '{vi.name}' has element type {onnx_type_name(tt.elem_type)}, which "
                "anekit cannot hold as a constant"
            )
        if value.dtype != want.numpy:
            cast = value.astype(want.numpy)
            if value.dtype.kind not in "biuf" or not np.array_equal(cast, value):
                raise ModelError(
                    f"the constant for input '{vi.name}' is {value.tolist()!r} ({value.dtype}), "
                    f"which the input's type {want} cannot hold exactly"
                )
            value = cast
        if tt.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            fits = len(declared) == value.ndim and all(
                d is None or d == s for d, s in zip(declared, value.shape, strict=True)
            )
            if not fits:
                dims = "x".join("?" if d is None else str(d) for d in declared) or "a scalar"
                raise ModelError(
                    f"the constant for input '{vi.name}' has shape {list(value.shape)}, "
                    f"but the model declares {dims}"
                )
        self.bind(vi.name, self.add_constant(value, vi.name))

    def _check_static(self) -> None:
        """One error naming every dynamic dimension of every input not fixed by the caller,
        with a --shape hint the model imports with (or the symbolic names to fill in)."""
        fixed = set(self.input_shapes) | set(self.constant_inputs)
        # inputs that are not tensors of a supported type: _add_input says what is wrong
        tensors = {
            vi.name for vi in self.proto.graph.input
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in _IO_DTYPES
        }  # fmt: skip
        declared = [
            d for d in declared_inputs(self.proto) if d.name not in fixed and d.name in tensors
        ]
        unfixed = [d for d in declared if d.dims is None or d.dynamic()]
        if not unfixed:
            return
        message = f"{dynamic_dimensions_text(unfixed)}; anekit needs static shapes"
        if any(d.dims is None for d in unfixed):
            names = ", ".join(f"{d.name}=DIMS" for d in unfixed)
            raise DynamicShapeError(
                message, hint=f"give every shape: --shape {names} (input_shapes= in the API)"
            )
        shapes, how = self._suggested_shapes(unfixed)
        if shapes is not None:
            hint = f"fix them with {shape_option_text(shapes)}"
            hint += f" ({how}; choose your own sizes)" if how else " (or the sizes you want)"
        else:
            hint = (
                "fix them with "
                + " ".join(f"--shape {k}={v}" for k, v in placeholder_shapes(unfixed).items())
                + f", each name replaced by a size ({how})"
            )
        raise DynamicShapeError(message, hint=hint + "; input_shapes= in the API")

    def _suggested_shapes(self, unfixed: list) -> tuple[dict | None, str]:
        """Sizes the model imports with, found by trial imports (skipped for models whose
        weights are large: each trial would convert them again)."""
        if self.proto.ByteSize() > _TRIAL_LIMIT_BYTES or any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in self.proto.graph.initializer
        ):
            return None, "the model is too large to try sizes on"
        known = dict(self.input_shapes)

        def imports(shapes: dict) -> str | None:
            try:
                Importer(self.proto, self.base_dir, {**known, **shapes}, self.constant_inputs).run()
            except AnekitError as exc:
                return str(exc).splitlines()[0]
            except MemoryError:
                return "out of memory"
            return None

        return suggest_shapes(unfixed, imports)

    def _add_input(self, vi: onnx.ValueInfoProto) -> Value:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ModelError(
                f"input '{vi.name}' is not a tensor (sequences and maps are not supported)"
            )
        if tt.elem_type not in _IO_DTYPES:
            raise ModelError(
                f"input '{vi.name}' has element type {onnx_type_name(tt.elem_type)}; anekit inputs are "
                "fp32, fp16, int8, uint8, int32, int64 or bool"
            )
        if vi.name in self.input_shapes:
            shape = self.input_shapes[vi.name]
            declared = list(tt.shape.dim)
            if tt.HasField("shape") and len(declared) != len(shape):
                raise ModelError(
                    f"input_shapes gives '{vi.name}' rank {len(shape)}, but the model declares rank {len(declared)}"
                )
            for k, (d, s) in enumerate(zip(declared, shape, strict=False)):
                if d.HasField("dim_value") and 0 <= d.dim_value != s:  # < 0: no size, replaceable
                    raise ModelError(
                        f"input_shapes gives '{vi.name}' dimension {k} = {s}, but the model fixes it to {d.dim_value}"
                    )
        else:
            shape_l = [int(d.dim_value) for d in tt.shape.dim]  # static: _check_static
            shape = tuple(shape_l)
        name = self.fresh(vi.name)
        value = Value(name, shape, _IO_DTYPES[tt.elem_type])
        self.values[name] = value
        self.bind(vi.name, name)
        return value

    def _convert(self, node: onnx.NodeProto, index: int) -> None:
        name = fresh_name(node.name or f"{node.op_type}_{index}", self._node_names)
        self._node_names.add(name)
        ctx = NodeContext(self, node, name, self.opset)
        _check_inputs_present(node, self.opset, f"ONNX node '{name}' ({node.op_type})")
        try:
            domain = node.domain or ""
            key = node.op_type if domain in _DEFAULT_DOMAINS else f"{domain}.{node.op_type}"
            result = CONVERTERS[key](ctx)
        except AnekitError as exc:
            exc.where = exc.where or f"ONNX node '{name}' ({node.op_type})"
            raise
        except InferError as exc:
            raise ShapeError(str(exc), where=f"ONNX node '{name}' ({node.op_type})") from None
        except MemoryError:  # what the budget allowed, the machine did not have free
            raise MemoryBudgetError(
                "ran out of memory", requested=0, limit=budget.limit(),
                where=f"ONNX node '{name}' ({node.op_type})",
                hint=f"lower {budget.ENV} below the machine's free memory",
            ) from None
        outs = (result,) if isinstance(result, str) else tuple(result)
        for onnx_name, ir_name in zip(node.output, outs, strict=False):
            if onnx_name:
                self.bind(onnx_name, ir_name)
        unbound = [o for o in node.output[len(outs) :] if o]
        if unbound:
            raise ModelError(
                f"output(s) {unbound} are not produced by anekit's converter",
                where=f"ONNX node '{name}' ({node.op_type})",
            )

    def inputs_feeding(self, value: str | None) -> list[str]:
        """The graph inputs (by their ONNX names) that ``value`` is computed from."""
        producer = {o: n for n in self.nodes for o in n.outputs}
        onnx_name = {ir: onnx for onnx, ir in self.alias.items()}
        found, seen, todo = [], set(), [value] if value else []
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in producer:
                todo.extend(i for i in producer[v].inputs if i)
            elif v not in self.constants:
                found.append(onnx_name.get(v, v))
        return sorted(found)

    def emit(
        self,
        op: str,
        inputs: list[str | None],
        attrs: Mapping[str, Any] | None,
        *,
        node: NodeContext,
        output_names: tuple[str, ...] | None,
    ) -> tuple[str, ...]:
        ins = [i or "" for i in inputs]
        types = [self.values[i].type if i else None for i in ins]
        try:
            norm, out_types = infer_types(op, types, attrs)
        except InferError as exc:
            raise ShapeError(
                f"{exc}", where=f"ONNX node '{node.name}' ({node.op_type}) as {op}"
            ) from None
        if output_names is not None and len(output_names) >= len(out_types):
            names = [
                self.fresh(n) if n else self.fresh(f"{node.name}/unused")
                for n in output_names[: len(out_types)]
            ]
        else:
            names = [self.fresh(f"{node.name}/{op}") for _ in out_types]
        if all(i == "" or i in self.constants for i in ins):
            # every input is known: compute now (this folds shape sub-graphs)
            args = [self.constants[i] if i else None for i in ins]
            vals = [Value(n, t.shape, t.dtype) for n, t in zip(names, out_types, strict=True)]
            probe = Node(op, node.name, tuple(ins), tuple(names), norm)
            try:
                results = run_node(probe, args, vals)
            except KernelError as exc:  # the model's own constants break the op's rules
                raise ModelError(f"{exc} (computing {op} on the model's constants)") from None
            for n, arr in zip(names, results, strict=True):
                # kept as computed: a folded Transpose or Slice of a weight stays a view of
                # it (no copy of a large weight; code generation converts it once)
                self._set_constant(n, np.asarray(arr))
            return tuple(names)
        for n, t in zip(names, out_types, strict=True):
            self.values[n] = Value(n, t.shape, t.dtype)
        self.nodes.append(
            Node(
                op, self._ir_node_name(node.name, op), tuple(ins), tuple(names), norm, (node.name,)
            )
        )
        return tuple(names)

    def _ir_node_name(self, onnx_name: str, op: str) -> str:
        """The first IR node of an ONNX node takes its name; the rest '<name>/<op>[_k]'."""
        name = onnx_name if onnx_name not in self._ir_nodes else f"{onnx_name}/{op}"
        name = fresh_name(name, self._ir_nodes)
        self._ir_nodes.add(name)
        return name


def _topological(g: onnx.GraphProto, outer: set[str]) -> list[onnx.NodeProto]:
    """The nodes in dependency order (ONNX requires it, but not every exporter complies);
    ``outer``: the enclosing graph's values a sub-graph may read."""
    produced = outer | {i.name for i in g.input} | {t.name for t in g.initializer}
    ordered: list[onnx.NodeProto] = []
    pending = list(g.node)
    while pending:
        progress = []
        rest = []
        for n in pending:
            if all((not i) or i in produced for i in n.input):
                progress.append(n)
                produced.update(o for o in n.output if o)
            else:
                rest.append(n)
        if not progress:
            missing = sorted({i for n in rest for i in n.input if i and i not in produced})[:5]
            raise ModelError(f"the graph reads undefined values {missing} (or has a cycle)")
        ordered.extend(progress)
        pending = rest
    return ordered


def _check_inputs_present(node: onnx.NodeProto, opset: int, where: str) -> None:
    """Every input the ONNX schema does not mark optional is named (a rule of the spec the
    converters rely on); operators without a schema here are left to their converter."""
    try:
        schema = onnx.defs.get_schema(node.op_type, max(opset, 1), node.domain)
    except Exception:  # noqa: BLE001 - onnx raises SchemaError for unknown (op, opset, domain)
        return
    names = list(node.input)
    for k, formal in enumerate(schema.inputs):
        option = formal.option
        if option == onnx.defs.OpSchema.FormalParameterOption.Optional:
            continue
        if option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            if schema.min_input > k and not any(names[k:]):
                raise ModelError(f"needs at least one '{formal.name}' input", where=where)
            break
        if k >= len(names) or not names[k]:
            raise ModelError(
                f"input {k} ('{formal.name}') is required by the ONNX spec but not given",
                where=where,
            )
