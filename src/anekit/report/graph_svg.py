"""The model's graph as an SVG: one box per original node, filled by where it runs, outlined
by the engine layer (fusion group) that implements it, an edge from each producer to each
reader (skip connections routed around the nodes they pass).

Layout: Graphviz's ``dot`` (Debian's ``graphviz``; `make test` installs it) lays the graph
out left to right and draws it as SVG, which the page embeds scaled to its width; a graph
deeper than ``MAX_WIDE_DEPTH`` is laid out top to bottom at its own size instead. Without
``dot``, a plain layered layout: each node on the row of its longest path from the inputs.
No JavaScript and nothing fetched: the page stays one self-contained file.
"""

from __future__ import annotations

import colorsys
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from anekit.report.text import escape

# placement -> fill colour; the report's legend and the browser test read these
PLACEMENT_COLOURS: Mapping[str, str] = {
    "ane": "#2e9e4f",
    "cpu": "#d64541",
    "folded": "#3b8fd9",
    "removed": "#9a9a9a",
}
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 170, 38, 16, 26, 12
MAX_PER_ROW = 8  # wider rows wrap, so a 300-node graph stays readable


BAND_RANKS = 8  # ranks laid out side by side in one band: about a 1400 px page's width
DOT_TIMEOUT_S = 120


def group_colour(index: int) -> str:
    """A distinct outline hue per fusion group (golden-angle steps around the wheel)."""
    r, g, b = colorsys.hls_to_rgb((index * 137.508) % 360 / 360, 0.35, 0.70)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def graph_svg(nodes: Sequence[Any], ops: Mapping[str, Mapping[str, Any]]) -> str:
    """SVG for ``nodes`` (the source graph in order) with each node's row of `check`
    (``ops[name]``: placement, layer, reason): Graphviz's layout when ``dot`` is installed.

    The graph runs left to right in bands of ``BAND_RANKS`` ranks (its longest paths from the
    inputs), one band under the other, each scaled to the page's width in the same
    proportion; an edge into a later band ends in a stub naming its producer ("from ...")."""
    dot = shutil.which("dot")
    if dot is None or not nodes:
        return layered_svg(nodes, ops)
    depth = _rows(nodes)
    bands = [dot_source(nodes, ops, depth, b) for b in range(max(depth.values()) // BAND_RANKS + 1)]
    svgs = []
    for source in bands:
        result = subprocess.run([dot, "-Tsvg"], input=source.encode(), capture_output=True,
                                timeout=DOT_TIMEOUT_S, check=False)  # fmt: skip
        if result.returncode != 0:
            return layered_svg(nodes, ops)
        svgs.append(result.stdout.decode("utf-8"))
    widths = [_view_width(svg) for svg in svgs]
    widest = max(widths) or 1.0
    parts = [_embeddable(svg, k, w / widest) for k, (svg, w) in enumerate(zip(svgs, widths, strict=True))]
    return f'<div id="graph">{"".join(parts)}</div>'


def _node_style(n: Any, ops: Mapping[str, Mapping[str, Any]], groups: dict[str, int]) -> tuple:
    row = ops.get(n.name, {})
    placement = row.get("placement", "removed")
    layer = row.get("layer")
    outline = group_colour(groups.setdefault(layer, len(groups))) if layer else "#333333"
    tip = f"{n.name} ({n.op}): {placement}" + (f" in layer {layer}" if layer else "")
    if row.get("reason"):
        tip += f" - {row['reason']}"
    return placement, outline, tip


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _short(name: str, keep: int = 30) -> str:
    return name if len(name) <= keep else "…" + name[-(keep - 1) :]


def dot_source(
    nodes: Sequence[Any], ops: Mapping[str, Mapping[str, Any]], depth: Mapping[str, int], band: int
) -> str:
    """Band ``band`` of the graph in Graphviz's language: node ``n<k>`` is the k-th node,
    labelled with its op and name, filled by placement (also its ``class``), outlined by
    fusion group; ``from<k>`` stubs stand for producers in earlier bands."""
    index = {n.name: k for k, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    produced = {o: n.name for n in nodes for o in n.outputs}
    groups: dict[str, int] = {}
    lines = [
        "digraph model {",
        'graph [rankdir=LR, nodesep=0.12, ranksep=0.3, bgcolor="transparent", fontname="sans-serif"];',
        'node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=10, '
        'fontcolor="#ffffff", penwidth=3, margin="0.08,0.04"];',
        'edge [color="#888888", arrowsize=0.6];',
    ]
    stubs: set[str] = set()
    for n in nodes:  # every node styles its group, so outlines agree between bands
        placement, outline, tip = _node_style(n, ops, groups)
        if depth[n.name] // BAND_RANKS != band:
            continue
        lines.append(
            f'n{index[n.name]} [label="{_dot_text(n.op)}\\n{_dot_text(_short(n.name))}", '
            f'fillcolor="{PLACEMENT_COLOURS.get(placement, "#cccccc")}", color="{outline}", '
            f'class="{_dot_text(placement)}", tooltip="{_dot_text(tip)}"];'
        )
        for i in dict.fromkeys(n.inputs):
            if i not in produced:
                continue
            src = produced[i]
            if depth[src] // BAND_RANKS == band:
                lines.append(f"n{index[src]} -> n{index[n.name]};")
                continue
            if src not in stubs:
                stubs.add(src)
                label = f"from {by_name[src].op}\\n{_dot_text(_short(src))}"
                lines.append(f'from{index[src]} [label="{label}", shape=plain, style="", '
                             'fontcolor="#555555", class="stub"];')  # fmt: skip
            lines.append(f'from{index[src]} -> n{index[n.name]} [style=dashed];')
    lines.append("}")
    return "\n".join(lines)


def _view_width(svg: str) -> float:
    found = re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+) [\d.]+"', svg)
    return float(found.group(1)) if found else 0.0


def _embeddable(svg: str, band: int, share: float) -> str:
    """dot's SVG as an element of the page: no XML prologue nor comments, scaled to
    ``share`` of the page's width (its viewBox keeps the proportions)."""
    svg = re.sub(r"<!--.*?-->", "", svg[svg.index("<svg") :], flags=re.S)
    head_end = svg.index(">")
    head = re.sub(r'\sheight="[^"]*"', "", svg[:head_end], count=1)
    head = re.sub(r'\swidth="[^"]*"', f' width="{100 * share:.2f}%"', head, count=1)
    head += f' class="band" id="graph-band{band}" preserveAspectRatio="xMinYMin meet"'
    return head + svg[head_end:]


def _rows(nodes: Sequence[Any]) -> dict[str, int]:
    produced = {o: n.name for n in nodes for o in n.outputs}
    depth: dict[str, int] = {}
    for n in nodes:  # nodes come in execution (topological) order
        ins = [produced[i] for i in n.inputs if i in produced]
        depth[n.name] = 1 + max((depth[p] for p in ins), default=-1)
    return depth


def layered_svg(nodes: Sequence[Any], ops: Mapping[str, Mapping[str, Any]]) -> str:
    """The fallback without Graphviz: rows by longest path from the inputs, straight edges."""
    depth = _rows(nodes)
    by_row: dict[int, list[Any]] = {}
    for n in nodes:
        by_row.setdefault(depth[n.name], []).append(n)
    pos: dict[str, tuple[float, float]] = {}
    y = MARGIN
    width = 0.0
    for row in sorted(by_row):
        members = by_row[row]
        for start in range(0, len(members), MAX_PER_ROW):
            chunk = members[start : start + MAX_PER_ROW]
            for k, n in enumerate(chunk):
                pos[n.name] = (MARGIN + k * (BOX_W + GAP_X), y)
            width = max(width, MARGIN * 2 + len(chunk) * (BOX_W + GAP_X) - GAP_X)
            y += BOX_H + GAP_Y
    height = y - GAP_Y + MARGIN
    groups: dict[str, int] = {}
    produced = {o: n.name for n in nodes for o in n.outputs}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">'
    ]
    for n in nodes:  # edges first, boxes over them
        x2, y2 = pos[n.name]
        for i in dict.fromkeys(n.inputs):
            if i in produced:
                x1, y1 = pos[produced[i]]
                parts.append(
                    f'<line x1="{x1 + BOX_W / 2:.0f}" y1="{y1 + BOX_H:.0f}" x2="{x2 + BOX_W / 2:.0f}" '
                    f'y2="{y2:.0f}" stroke="#888" stroke-width="1"/>'
                )
    for n in nodes:
        x, y0 = pos[n.name]
        placement, outline, tip = _node_style(n, ops, groups)
        label = n.op if len(n.op) <= 22 else n.op[:21] + "…"
        name = n.name if len(n.name) <= 26 else "…" + n.name[-25:]
        parts.append(
            f'<g class="node {escape(placement)}"><title>{escape(tip)}</title>'
            f'<rect x="{x:.0f}" y="{y0:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5" '
            f'fill="{PLACEMENT_COLOURS.get(placement, "#ccc")}" stroke="{outline}" stroke-width="3"/>'
            f'<text x="{x + 7:.0f}" y="{y0 + 15:.0f}" fill="#fff" font-weight="bold">{escape(label)}</text>'
            f'<text x="{x + 7:.0f}" y="{y0 + 30:.0f}" fill="#fff">{escape(name)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
