"""Transpose and reshape chains: axis algebra and the rules that cancel, merge and reorder them.

Reordering is what makes layout changes cancel: a transpose is moved past a reshape (or a
reshape past a transpose) only when that lets it meet another transpose and merge, so
every application removes a transpose and the rules terminate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.rewrite import Rewriter, rule

Shape = tuple[int, ...]


def reshape_groups(
    src: Sequence[int], dst: Sequence[int]
) -> list[tuple[list[int], list[int]]] | None:
    """Pair up the non-unit axes of ``src`` and ``dst`` into minimal groups of equal size.

    Each group (src axes, dst axes) holds consecutive non-unit axes of both shapes with the
    same element count, so a reshape only regroups within groups. None if the sizes differ.
    """
    if int(np.prod(src, dtype=np.int64)) != int(np.prod(dst, dtype=np.int64)):
        return None
    s_axes = [i for i, d in enumerate(src) if d != 1]
    d_axes = [i for i, d in enumerate(dst) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(s_axes) or j < len(d_axes):
        gs, gd = [s_axes[i]], [d_axes[j]]
        ps, pd = src[s_axes[i]], dst[d_axes[j]]
        i, j = i + 1, j + 1
        while ps != pd:
            if ps < pd:
                gs.append(s_axes[i])
                ps *= src[s_axes[i]]
                i += 1
            else:
                gd.append(d_axes[j])
                pd *= dst[d_axes[j]]
                j += 1
        groups.append((gs, gd))
    return groups


def invert(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def compose(first: Sequence[int], then: Sequence[int]) -> tuple[int, ...]:
    """The single perm equal to transposing by ``first`` and then by ``then``."""
    return tuple(first[t] for t in then)


def moves_only_units(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """True when a transpose keeps the order of the non-unit axes (it is then a reshape)."""
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def is_unit_reshape(src: Sequence[int], dst: Sequence[int]) -> bool:
    """True when a reshape only inserts or removes axes of size 1."""
    return [d for d in src if d != 1] == [d for d in dst if d != 1]


def transpose_then_reshape(x: Shape, perm: Sequence[int], z: Shape) -> tuple[Shape, Shape] | None:
    """Rewrite reshape(transpose(x, perm), z) as transpose(reshape(x, x2), perm2).

    Returns (x2, perm2), or None when a group of the reshape merges axes that are not
    consecutive and in order in ``x``.
    """
    y = tuple(x[p] for p in perm)
    groups = reshape_groups(y, z)
    if groups is None:
        return None
    keyed = []
    for ys, zs in groups:
        xs = [perm[a] for a in ys]
        if xs != list(range(xs[0], xs[0] + len(xs))):
            return None
        keyed.append((xs[0], zs))
    keyed.sort()
    order = [k for k, d in enumerate(z) if d == 1] + [k for _, zs in keyed for k in zs]
    pos = {k: i for i, k in enumerate(order)}
    return tuple(z[k] for k in order), tuple(pos[k] for k in range(len(z)))


def reshape_then_transpose(x: Shape, y: Shape, perm: Sequence[int]) -> tuple[Shape, Shape] | None:
    """Rewrite transpose(reshape(x, y), perm) as reshape(transpose(x, perm2), z).

    Returns (perm2, shape after the transpose), or None when the transpose splits a group.
    Derived from `transpose_then_reshape` on the inverse chain.
    """
    z = tuple(y[p] for p in perm)
    found = transpose_then_reshape(z, invert(perm), x)
    if found is None:
        return None
    z2, perm2 = found
    return invert(perm2), z2


# --- rules ---------------------------------------------------------------------------------


def _perm(node: Node) -> tuple[int, ...]:
    return tuple(node.attrs["perm"])


@rule("transpose")
def compose_transposes(rw: Rewriter, node: Node) -> bool:
    """transpose(transpose(x)) -> one transpose (inverse pairs cancel); identity perms vanish."""
    src = node.inputs[0]
    perm = _perm(node)
    prev = rw.producer(src)
    if prev is not None and prev.op == "transpose":
        src, perm = prev.inputs[0], compose(_perm(prev), perm)
    elif perm != tuple(range(len(perm))):
        return False
    if perm == tuple(range(len(perm))):
        rw.ctx.removing(node.origin, "cancels with an inverse transpose")
        if prev is not None:
            rw.ctx.removing(prev.origin, "cancels with an inverse transpose")
        rw.replace_uses(node.output, src)
        return True
    y = rw.add(
        "transpose", [src], {"perm": perm}, hint=node.name, origin=_origins(prev, node), before=node
    )
    rw.replace_uses(node.output, y)
    return True


@rule("transpose")
def transpose_as_reshape(rw: Rewriter, node: Node) -> bool:
    """A transpose that only moves size-1 axes is a reshape."""
    x = node.inputs[0]
    if not moves_only_units(rw.shape(x), _perm(node)):
        return False
    y = rw.add(
        "reshape",
        [x],
        {"shape": rw.shape(node.output)},
        hint=node.name,
        origin=node.origin,
        before=node,
    )
    rw.replace_uses(node.output, y)
    return True


@rule("reshape")
def merge_reshapes(rw: Rewriter, node: Node) -> bool:
    """reshape(reshape(x)) -> reshape(x); a reshape to the same shape vanishes."""
    src = node.inputs[0]
    prev = rw.producer(src)
    if prev is not None and prev.op == "reshape":
        src = prev.inputs[0]
    elif rw.shape(src) != rw.shape(node.output):
        return False
    if rw.shape(src) == rw.shape(node.output):
        if _pinned(rw, node, src):
            return False
        rw.ctx.removing(node.origin, "reshapes to the shape it already has")
        rw.replace_uses(node.output, src)
        return True
    y = rw.add(
        "reshape",
        [src],
        {"shape": rw.shape(node.output)},
        hint=node.name,
        origin=_origins(prev, node),
        before=node,
    )
    rw.replace_uses(node.output, y)
    return True


@rule("reshape")
def sink_transpose(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(x)) read by transposes -> transpose(reshape(x)), which then merges.

    The first transpose may have other readers: each rewritten branch loses one transpose.
    """
    prev = rw.producer(node.inputs[0])
    readers = rw.users(node.output)
    if prev is None or prev.op != "transpose" or rw.is_output(node.output) or not readers:
        return False
    if any(r.op != "transpose" for r in readers):
        return False
    found = transpose_then_reshape(rw.shape(prev.inputs[0]), _perm(prev), rw.shape(node.output))
    if found is None:
        return False
    x2, perm2 = found
    origin = _origins(prev, node)
    r = rw.add(
        "reshape", [prev.inputs[0]], {"shape": x2}, hint=node.name, origin=origin, before=node
    )
    t = rw.add("transpose", [r], {"perm": perm2}, hint=prev.name, origin=origin, before=node)
    rw.replace_uses(node.output, t)
    return True


@rule("transpose")
def hoist_transpose(rw: Rewriter, node: Node) -> bool:
    """transpose(reshape(transpose(x))) -> reshape(transpose(x)) when the transposes merge."""
    r = rw.producer(node.inputs[0])
    if r is None or r.op != "reshape" or not rw.single_use(r.output):
        return False
    first = rw.producer(r.inputs[0])
    if first is None or first.op != "transpose":
        return False
    found = reshape_then_transpose(rw.shape(r.inputs[0]), rw.shape(r.output), _perm(node))
    if found is None:
        return False
    perm2, _ = found
    origin = _origins(r, node)
    t = rw.add(
        "transpose", [r.inputs[0]], {"perm": perm2}, hint=node.name, origin=origin, before=node
    )
    y = rw.add(
        "reshape", [t], {"shape": rw.shape(node.output)}, hint=r.name, origin=origin, before=node
    )
    rw.replace_uses(node.output, y)
    return True


def merged_axes(shape: Sequence[int], perm: Sequence[int]) -> tuple[Shape, Shape]:
    """The smallest equivalent transpose: unit axes dropped, axes that stay neighbours in
    the same order merged. Returns (input shape for it, its perm)."""
    order = [p for p in perm if shape[p] != 1]
    runs: list[list[int]] = []
    for a in order:
        if (
            runs
            and runs[-1][-1] + 1 == a
            and all(shape[b] == 1 for b in range(runs[-1][-1] + 1, a))
        ):
            runs[-1].append(a)
        else:
            runs.append([a])
    by_start = sorted(runs, key=lambda r: r[0])
    merged = tuple(int(np.prod([shape[a] for a in r])) for r in by_start)
    index = {r[0]: i for i, r in enumerate(by_start)}
    return merged, tuple(index[r[0]] for r in runs)


@rule("transpose")
def reduce_transpose_rank(rw: Rewriter, node: Node) -> bool:
    """A transpose above the engine's rank limit, rewritten at the smallest rank it needs
    (a pixel shuffle's rank-6 transpose is a rank-4 one between reshapes)."""
    x = node.inputs[0]
    shape, perm = rw.shape(x), _perm(node)
    if len(shape) <= rw.ctx.target.limits.max_rank:
        return False
    small, small_perm = merged_axes(shape, perm)
    if len(small) >= len(shape):
        return False
    o = node.origin
    r = rw.add("reshape", [x], {"shape": small}, hint=f"{node.name}/in", origin=o, before=node)
    t = rw.add("transpose", [r], {"perm": small_perm}, hint=node.name, origin=o, before=node)
    y = rw.add(
        "reshape",
        [t],
        {"shape": rw.shape(node.output)},
        hint=f"{node.name}/out",
        origin=o,
        before=node,
    )
    rw.replace_uses(node.output, y)
    return True


def _origins(*nodes: Node | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(o for n in nodes if n is not None for o in n.origin))


def _pinned(rw: Rewriter, node: Node, src: str) -> bool:
    """A graph output that would become a graph input or constant keeps its node."""
    return rw.is_output(node.output) and rw.producer(src) is None


CHAIN_RULES = (
    compose_transposes,
    transpose_as_reshape,
    merge_reshapes,
    sink_transpose,
    hoist_transpose,
    reduce_transpose_rank,
)
