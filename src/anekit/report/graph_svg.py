"""The model's graph as an SVG: one box per original node, filled by where it runs, outlined
by the engine layer (fusion group) that implements it, edges between producers and readers.

Layout: each node sits on the row of its longest path from the inputs; nodes of one row
are side by side. No JavaScript and nothing fetched: the page stays one self-contained file.
"""

from __future__ import annotations

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


def group_colour(index: int) -> str:
    """A distinct outline hue per fusion group (golden-angle steps around the wheel)."""
    return f"hsl({(index * 137.508) % 360:.0f}, 70%, 35%)"


def _rows(nodes: Sequence[Any]) -> dict[str, int]:
    produced = {o: n.name for n in nodes for o in n.outputs}
    depth: dict[str, int] = {}
    for n in nodes:  # nodes come in execution (topological) order
        ins = [produced[i] for i in n.inputs if i in produced]
        depth[n.name] = 1 + max((depth[p] for p in ins), default=-1)
    return depth


def graph_svg(nodes: Sequence[Any], ops: Mapping[str, Mapping[str, Any]]) -> str:
    """SVG for ``nodes`` (the source graph in order) with each node's row of `check`
    (``ops[name]``: placement, layer, reason)."""
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
        row = ops.get(n.name, {})
        placement = row.get("placement", "removed")
        layer = row.get("layer")
        outline = "#333"
        if layer:
            outline = group_colour(groups.setdefault(layer, len(groups)))
        tip = f"{n.name} ({n.op}): {placement}" + (f" in layer {layer}" if layer else "")
        if row.get("reason"):
            tip += f" - {row['reason']}"
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
