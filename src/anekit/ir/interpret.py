"""Runs a Graph with each op's fp32 numpy kernel (the reference backend's engine)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from anekit import budget
from anekit.errors import (
    AnekitError,
    InputError,
    InternalError,
    MemoryBudgetError,
    check_input_names,
)
from anekit.ir.dtypes import DType
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.registry import KernelError

# (node, input arrays, output arrays) -> None; lets tools observe every intermediate.
Observer = Callable[[Node, list[np.ndarray | None], list[np.ndarray]], None]


def coerce_feed(value: Value, array: Any) -> np.ndarray:
    """Check a user feed against a graph input; convert dtype within the same kind, refusing
    values the graph's dtype cannot hold (a float64 beyond fp32's range, an int64 beyond
    int32's) rather than letting them become inf or wrap around."""
    want = value.dtype
    try:
        arr = np.asarray(array)
    except (ValueError, TypeError) as exc:  # a ragged nested list, an unconvertible object
        convert = f"numpy.asarray(array, dtype=numpy.{want.numpy.name})"
        raise InputError(
            f"input '{value.name}' is not an array ({exc})",
            hint=f"pass a numpy array of shape {list(value.shape)}, e.g. {convert}",
        ) from None
    if tuple(arr.shape) != value.shape:
        raise InputError(
            f"input '{value.name}' has shape {list(arr.shape)}, but the model expects {list(value.shape)}"
        )
    kind = arr.dtype.kind
    ok = (
        (want.is_float and kind in "fiu")
        or (want.is_int and kind in "iub")
        or (want is DType.BOOL and kind == "b")
    )
    if not ok:
        raise InputError(
            f"input '{value.name}' has dtype {arr.dtype}, but the model expects {want}",
            hint=f"convert the array, e.g. array.astype(numpy.{want.numpy.name})",
        )
    _check_range(value.name, arr, want)
    return np.asarray(arr, dtype=want.numpy, order="C")


def _check_range(name: str, arr: np.ndarray, want: DType) -> None:
    """Every value of ``arr`` is representable in ``want`` (nan and inf stay what they are)."""
    if arr.size == 0 or want is DType.BOOL or arr.dtype == want.numpy:
        return
    info = np.finfo(want.numpy) if want.is_float else np.iinfo(want.numpy)
    if arr.dtype.kind == "f":
        finite = arr[np.isfinite(arr)]
        low, high = (finite.min(), finite.max()) if finite.size else (0, 0)
    else:
        low, high = arr.min(), arr.max()
    if low < info.min or high > info.max:
        bad = (low if low < info.min else high).item()
        raise InputError(
            f"input '{name}' holds {bad}, outside the range of {want} "
            f"[{info.min}, {info.max}] that the graph expects",
            hint="scale or clip the values, or feed them in the graph's dtype",
        )


def check_feeds(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    sig = ", ".join(f"{v.name}: {v.type}" for v in graph.inputs)
    check_input_names(graph.input_names, feeds, f"the graph takes ({sig})")
    return {v.name: coerce_feed(v, feeds[v.name]) for v in graph.inputs}


def _last_uses(graph: Graph) -> dict[int, list[str]]:
    """node index -> values that are dead after that node (for freeing memory early)."""
    last: dict[str, int] = {}
    for idx, n in enumerate(graph.nodes):
        for i in n.inputs:
            if i and i not in graph.constants:
                last[i] = idx
    keep = set(graph.output_names)
    out: dict[int, list[str]] = {}
    for name, idx in last.items():
        if name not in keep:
            out.setdefault(idx, []).append(name)
    return out


def run_node(
    node: Node, args: list[np.ndarray | None], out_values: list[Value]
) -> list[np.ndarray]:
    """Apply one node's kernel: fp16 widened to fp32, results cast to the declared types.

    The results' size, known from the declared shapes, is checked against the memory budget
    first: a model cannot make import-time folding or the reference backend allocate more.
    """
    budget.check(sum(_nbytes(v) for v in out_values), f"node '{node.name}' ({node.op})")
    opdef = node.opdef
    wide = [a.astype(np.float32) if a is not None and a.dtype == np.float16 else a for a in args]
    result = opdef.call(wide, node.attrs)
    results = list(result) if isinstance(result, tuple | list) else [result]
    if len(results) != len(out_values):
        raise InternalError(
            f"kernel of '{node.op}' returned {len(results)} outputs for node '{node.name}', "
            f"expected {len(out_values)}"
        )
    outs = []
    for r, v in zip(results, out_values, strict=True):
        arr = np.asarray(r)
        if arr.shape != v.shape:
            raise InternalError(
                f"node '{node.name}' ({node.op}): kernel produced shape {list(arr.shape)}, "
                f"inference declared {list(v.shape)}"
            )
        if arr.dtype != v.dtype.numpy:
            arr = arr.astype(v.dtype.numpy)
        outs.append(arr)
    return outs


def _nbytes(value: Value) -> int:
    count = 1
    for d in value.shape:
        count *= max(int(d), 0)
    return count * value.dtype.numpy.itemsize


def _peak(graph: Graph, dead: Mapping[int, list[str]]) -> tuple[int, str]:
    """The most bytes of non-constant values alive at once, and the node where it happens."""
    live = peak = sum(_nbytes(graph.values[n]) for n in graph.input_names)
    at = ""
    for idx, node in enumerate(graph.nodes):
        live += sum(_nbytes(graph.values[o]) for o in node.outputs)
        if live > peak:
            peak, at = live, node.name
        live -= sum(_nbytes(graph.values[n]) for n in dead.get(idx, ()))
    return peak, at


def run_graph(
    graph: Graph,
    feeds: Mapping[str, Any],
    *,
    observer: Observer | None = None,
    keep_all: bool = False,
) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` on ``feeds``; outputs in graph order keyed by output name.

    ``keep_all`` returns every intermediate value as well (for pass-by-pass debugging).
    """
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(check_feeds(graph, feeds))
    dead = {} if keep_all else _last_uses(graph)
    peak, at = _peak(graph, dead)
    budget.check(peak, f"running graph '{graph.name}' (its live values at node '{at}')")
    with np.errstate(all="ignore"):  # inf/nan are data here, as in onnxruntime
        for idx, node in enumerate(graph.nodes):
            args = [env[i] if i else None for i in node.inputs]
            try:
                outs = run_node(node, args, [graph.values[o] for o in node.outputs])
            except InternalError:
                raise
            except AnekitError as exc:
                exc.where = exc.where or f"node '{node.name}' ({node.op})"
                raise
            except KernelError as exc:  # the values break the op's rules (as in onnxruntime)
                raise InputError(
                    f"node '{node.name}' ({node.op}) cannot compute on these values: {exc}"
                ) from None
            except MemoryError:
                raise MemoryBudgetError(
                    f"node '{node.name}' ({node.op}) ran out of memory",
                    requested=0,
                    limit=budget.limit(),
                    hint=f"lower {budget.ENV} below the free memory",
                ) from None
            except Exception as exc:  # noqa: BLE001 - name the node for the user
                raise InternalError(
                    f"node '{node.name}' ({node.op}) failed in the reference kernel: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if observer is not None:
                observer(node, args, outs)
            env.update(zip(node.outputs, outs, strict=True))
            for name in dead.get(idx, ()):
                env.pop(name, None)
    if keep_all:
        return env
    return {name: env[name] for name in graph.output_names}
