"""Per-layer validators in the style of Apple's _ANECValidate*Layer: accept, or reject with
Apple's message, gated by the target's feature flags and limits. A rejected layer (and
every op with no engine form) runs on the CPU with that reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from anekit.ir.dtypes import DType
from anekit.ir.engine import UNITS, LayerView
from anekit.ir.graph import Graph, Node
from anekit.ir.registry import get_op
from anekit.passes.context import PassContext
from anekit.passes.results import Diagnostic, Verdict
from anekit.targets import Target

FP16_BYTES = 2
CPU_REQUESTED = "cpu-requested"  # the verdict of a node the cpu_nodes option names


@dataclass(frozen=True)
class Reject:
    """Why a validator refused a layer: a stable code and Apple's message."""

    code: str
    message: str


# IR op (main op or epilogue activation) -> (feature gate, code, Apple-style message). Only
# ops with an engine layer form are gated here (tests/passes/test_validate.py checks it): an
# op without one never reaches a layer validator, it runs on the CPU with no-engine-form.
FEATURE_GATES: Mapping[str, tuple[str, str, str]] = MappingProxyType(
    {
        "softmax": (
            "softmax",
            "softmax-unsupported",
            "Softmax is not supported by this ANE architecture",
        ),
        "instance_norm": (
            "instance_norm",
            "instance-norm-unsupported",
            "Instance norm is not supported by this ANE architecture",
        ),
        "resize": ("resize", "resize-unsupported", "resize is not supported on this architecture"),
        "sin": ("sin_cos", "sin-cos-unsupported", "sin is not supported on this architecture"),
        "cos": ("sin_cos", "sin-cos-unsupported", "cos is not supported on this architecture"),
        "attention": ("sdpa", "sdpa-unsupported", "SDPA is not supported on this architecture"),
        "concat": ("concat", "concat-unsupported", "Concat is not supported on this architecture"),
    }
)
_KERNEL_AXES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


# Integer types whose values, cast to float, can exceed fp16's largest value (65504).
_WIDE_INTEGERS = frozenset({DType.INT32, DType.INT64})
_MAX_MOVES = 64  # how far back through data-movement layers a value's origin is traced


def beyond_fp16(graph: Graph, name: str) -> bool:
    """True when ``name`` holds int32/int64 numbers cast to float (an integer matmul's
    accumulator before its dequantization scale), moved but not yet rescaled: in fp16 they
    would overflow to inf, so the layer that reads them computes in fp32 on the CPU."""
    for _ in range(_MAX_MOVES):
        p = graph.producer(name)
        if p is None:
            return False
        if p.op == "cast":
            return graph.values[p.inputs[0]].dtype in _WIDE_INTEGERS
        moves = p.op in ("reshape", "transpose") or (
            p.op == "ane_layer"
            and UNITS[LayerView(p).layer_type] == "dma"
            and not LayerView(p).epilogue
            and len(LayerView(p).main_inputs) == 1
        )
        if not moves:
            return False
        name = p.inputs[0]
    return False


def _common(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    """Rank, dtype, range and extent limits every layer shares."""
    lim = t.limits
    for name in view.node.inputs:
        if name and name not in graph.constants and beyond_fp16(graph, name):
            return Reject(
                "fp16-range",
                f"'{name}' holds int32 values cast to float, which may exceed fp16's range (65504)",
            )
    for name in (*view.node.inputs, view.node.output):
        if not name or name in graph.constants:
            continue
        v = graph.values[name]
        if not v.dtype.is_float:
            return Reject(
                "dtype-unsupported",
                f"{v.dtype} tensors are not supported by the engine (fp16 only)",
            )
        if v.rank > lim.max_rank:
            return Reject(
                "rank-too-high",
                f"Tensor rank {v.rank} is not supported, the engine takes rank <= {lim.max_rank}",
            )
        if v.rank >= 2 and v.shape[1] > lim.max_channel_extent:
            return Reject(
                "channels-too-large",
                f"channel extent {v.shape[1]} exceeds the engine's maximum of {lim.max_channel_extent}",
            )
        for d in (v.shape[:1] + v.shape[2:]) if v.rank >= 2 else v.shape:
            if d > lim.max_dim:
                return Reject(
                    "dim-too-large",
                    f"dimension {d} of {list(v.shape)} exceeds the engine's maximum of {lim.max_dim}",
                )
    steps = ((view.main, view.main_attrs), *((s.op, s.attrs) for s in view.epilogue))
    for op, attrs in steps:
        gate = FEATURE_GATES.get(op)
        if gate is not None and not t.supports(gate[0]):
            return Reject(gate[1], gate[2])
        # the engine computes GELU only in its tanh form where the MIL gelu op is missing
        # (decompose approximates exact GELU unless the approximate_gelu option is off)
        if op == "gelu" and attrs.get("approximate") == "none" and not t.features.gelu:
            return Reject("gelu-unsupported", "exact GELU is not supported on this architecture")
    return None


def _weight_bytes(view: LayerView, graph: Graph) -> int:
    return sum(
        graph.constants[i].size * FP16_BYTES for i in view.main_inputs if i in graph.constants
    )


def _kernel_check(kernel: tuple[int, ...], t: Target, what: str) -> Reject | None:
    names = _KERNEL_AXES.get(len(kernel), tuple(f"axis{i}" for i in range(len(kernel))))
    for name, k in zip(names, kernel, strict=True):
        if not t.limits.min_kernel <= k <= t.limits.max_kernel:
            return Reject(
                "conv-kernel-range",
                f"Invalid {what} kernel {name} = {k}, It should be in [{t.limits.min_kernel},{t.limits.max_kernel}]",
            )
    return None


def _conv(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    x, w = view.main_inputs[0], view.main_inputs[1]
    xv, wv = graph.values[x], graph.values[w]
    if w not in graph.constants:
        return Reject(
            "dynamic-weight",
            "convolution weights must be constants (they are baked into the program)",
        )
    if xv.rank not in (4, 5):
        return Reject("conv-rank", f"filter and input rank should be 4 or 5, got {xv.rank}")
    if xv.rank == 5 and not t.features.conv3d:
        return Reject(
            "conv3d-unsupported", "3D convolution fails backend lowering on this architecture"
        )
    group = view.main_attrs["group"]
    in_c = xv.shape[1]
    out_c = wv.shape[0] if view.main == "conv" else wv.shape[1] * group
    if in_c % group or out_c % group:
        return Reject(
            "conv-group-divisibility", "input/output channels should be divisible by num group"
        )
    if group > t.limits.max_groups:
        return Reject(
            "conv-groups",
            f"num group {group} exceeds the engine's maximum of {t.limits.max_groups}",
        )
    if out_c > t.limits.max_channels:
        return Reject(
            "conv-channels",
            f"{out_c} output channels exceed the engine's maximum of {t.limits.max_channels} per layer",
        )
    rejected = _kernel_check(tuple(wv.shape[2:]), t, "conv")
    if rejected is not None:
        return rejected
    if _weight_bytes(view, graph) > t.kmem_cap_bytes:
        return Reject("kmem-overflow", "can not fit the Kmem")
    return None


def _matmul(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    ins = [i for i in view.main_inputs if i]
    if len(ins) != 2:
        return Reject("matmul-bottoms", "Matrix mult. layer can only have two bottoms")
    for i in ins:
        v = graph.values[i]
        if v.rank == 5 and v.shape[2] > 1:
            return Reject("matmul-depth", "depth > 1 is not supported for MatMult")
    if _weight_bytes(view, graph) > t.kmem_cap_bytes:
        return Reject("kmem-overflow", "can not fit the Kmem")
    return None


def _pool(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    return _kernel_check(tuple(view.main_attrs["kernel"]), t, "pool")


def _resize(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    """The texture engine resamples H and W of a rank-4 tensor, nearest or bilinear."""
    at = view.main_attrs
    src = graph.values[view.main_inputs[0]].shape
    if at["mode"] not in ("nearest", "linear") or at["antialias"]:
        mode = "antialiased " + at["mode"] if at["antialias"] else at["mode"]
        return Reject("resize-mode", f"resize mode {mode} is not supported on this architecture")
    if len(src) != 4 or tuple(at["sizes"][:2]) != tuple(src[:2]):
        return Reject("resize-axes", "resize is only supported on the height and width axes")
    return None


def _texture(view: LayerView, graph: Graph, t: Target) -> Reject | None:
    if view.main == "resize":
        return _resize(view, graph, t)
    if (
        view.main == "pad"
        and view.main_attrs["mode"] != "constant"
        and not t.features.padding_modes
    ):
        return Reject(
            "padding-mode-unsupported",
            f"padding mode {view.main_attrs['mode']} is not supported on this architecture",
        )
    if (
        view.main == "slice"
        and any(s != 1 for s in (view.main_attrs["steps"] or (1,)))
        and not t.features.dynamic_slice
    ):
        return Reject(
            "strided-slice-unsupported", "strided slice is not supported on this architecture"
        )
    return None


VALIDATORS: Mapping[str, Callable[[LayerView, Graph, Target], Reject | None]] = MappingProxyType(
    {
        "conv": _conv,
        "deconv": _conv,
        "matmul": _matmul,
        "pool": _pool,
        "texture": _texture,
    }
)


def validate_layer(view: LayerView, graph: Graph, target: Target) -> Reject | None:
    """The first reason the target's validators give for refusing this layer (None: accepted)."""
    found = _common(view, graph, target)
    if found is None and view.layer_type in VALIDATORS:
        found = VALIDATORS[view.layer_type](view, graph, target)
    return found


def no_engine_form(node: Node, graph: Graph) -> Reject:
    """Why a plain (unfused) op runs on the CPU."""
    reason = get_op(node.op).no_engine_form
    if reason:
        return Reject("no-engine-form", f"{node.op} has no engine form: {reason}")
    for name in (*node.inputs, *node.outputs):
        if name and not graph.values[name].dtype.is_float:
            dt = graph.values[name].dtype
            return Reject(
                "no-engine-form",
                f"{node.op} on {dt} tensors has no engine form (the engine computes in fp16)",
            )
    return Reject("no-engine-form", f"{node.op} has no engine form")


def unlowerable(node: Node) -> Reject | None:
    """Why code generation cannot emit this node (its op record says it has no MIL lowering)."""
    ops = (node.op,)
    if node.op == "ane_layer":
        view = LayerView(node)
        ops = (view.main, *(s.op for s in view.epilogue))
    for op in ops:
        reason = get_op(op).no_lowering
        if reason:
            return Reject("no-mil-lowering", f"{op} cannot be written as MIL: {reason}")
    return None


def validate(graph: Graph, ctx: PassContext) -> tuple[Graph, dict[str, Any]]:
    """Record a verdict for every node: None (the engine accepts it) or the rejection. A node
    code generation cannot emit at all is an error: `check` must not place what `save` fails on.
    Provides ``verdicts``."""
    verdicts: dict[str, Verdict] = {}
    on_cpu = frozenset(ctx.options.cpu_nodes)
    for node in graph.nodes:
        missing = unlowerable(node)
        if missing is not None:
            verdicts[node.name] = (missing.code, missing.message)
            ctx.count(f"rejected: {missing.code}")
            hint = "the model cannot be saved as a bundle for any target until the op is lowered"
            ctx.diagnose(Diagnostic("error", missing.code, node.name, missing.message, hint))
            continue
        asked = sorted(on_cpu.intersection(node.origin))
        if asked:  # a layer fused from several nodes goes with them
            verdicts[node.name] = (CPU_REQUESTED, f"kept in fp32 on the CPU as asked ({', '.join(asked)})")
            ctx.count(f"rejected: {CPU_REQUESTED}")
            continue
        if node.op == "ane_layer":
            found = validate_layer(LayerView(node), graph, ctx.target)
            severity = "warning"
        else:
            found = no_engine_form(node, graph)
            severity = "info"
        verdicts[node.name] = None if found is None else (found.code, found.message)
        if found is not None:
            ctx.count(f"rejected: {found.code}")
            ctx.diagnose(
                Diagnostic(severity, found.code, node.name, found.message, "it runs on the CPU")
            )
    accepted = sum(1 for v in verdicts.values() if v is None)
    ctx.note(f"{accepted} layer(s) accepted by the {ctx.target.name} validators")
    return graph, {"verdicts": MappingProxyType(verdicts)}
