"""`anekit report`: one self-contained HTML page answering "will it run, how fast, will fp16
break it": the graph coloured by placement and fusion group, each CPU fallback's reason,
per-layer estimates, a timeline per chip and the numerics findings. Inline CSS and SVG only:
no script, no font, nothing fetched, so the file opens offline and can be mailed around."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anekit import targets
from anekit.report.graph_svg import PLACEMENT_COLOURS, graph_svg
from anekit.report.text import escape
from anekit.targets import DEFAULT_TARGET

GENERATOR = "anekit report"  # the page's <meta name="generator">: marks a file anekit wrote
DEFAULT_CHIPS = ("m1", "m2", "m3", "m4", "m5")
TIMELINE_COLOURS: Mapping[str, str] = {
    "dispatch": "#b0b0b0",
    "transition": "#dd8452",
    "cpu": PLACEMENT_COLOURS["cpu"],
    "ane0": "#4c72b0",
    "ane1": "#6f94cf",
}
_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;color:#fff;border-radius:4px}
.scroll{overflow:auto;max-height:900px;border:1px solid #eee}
#graph{width:100%}#graph svg.band{display:block;height:auto;margin-bottom:10px}
tr.total td{font-weight:bold;border-top:2px solid #999}.note{color:#444;font-size:13px;max-width:1100px}
@media print{body{margin:0;max-width:none}.scroll{overflow:visible;max-height:none;border:none}
h2{break-after:avoid}tr{break-inside:avoid}}
.finding-overflow{background:#fde2e2}.finding-underflow{background:#f3e1f7}.finding-precision{background:#fff5d6}
"""


def _table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], numeric: set[int] = frozenset(), cls=None
) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for k, row in enumerate(rows):
        cells = "".join(
            f'<td class="num">{escape(str(v))}</td>'
            if i in numeric
            else f"<td>{escape(str(v))}</td>"
            for i, v in enumerate(row)
        )
        attr = f' class="{escape(cls[k])}"' if cls and cls[k] else ""
        body.append(f"<tr{attr}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def timeline_svg(estimates: Sequence[Any]) -> str:
    """One row of bars per chip on a shared time axis (dispatch, conversions, partitions, CPU)."""
    from anekit.cost.plot import timeline

    rows = [(e.target, e.total_ms, timeline(e)) for e in estimates]
    longest = max((t for _, t, _ in rows), default=0.0) or 1.0
    left, width, row_h = 90, 900, 26
    height = row_h * len(rows) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" width="{left + width + 120}" '
        f'height="{height}" font-family="sans-serif" font-size="11">'
    ]
    for k, (chip, total, bars) in enumerate(rows):
        y = 10 + k * row_h
        parts.append(f'<text x="4" y="{y + 15}">{escape(chip)}</text>')
        for start, length, kind, label in bars:
            x = left + start / longest * width
            w = max(length / longest * width, 0.5)
            colour = TIMELINE_COLOURS.get(kind, "#888")
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 6}" fill="{colour}">'
                f"<title>{escape(label)}: {length:.4f} ms</title></rect>"
            )
        parts.append(
            f'<text x="{left + total / longest * width + 6:.0f}" y="{y + 15}">{total:.3f} ms</text>'
        )
    parts.append(
        f'<text x="{left}" y="{height - 4}" fill="#666">0 ms</text>'
        f'<text x="{left + width - 60}" y="{height - 4}" fill="#666">{longest:.3f} ms</text></svg>'
    )
    return "".join(parts)


def _fallbacks(ops: Sequence[Mapping[str, Any]]) -> str:
    rows = [(r["node"], r["op"], r["reason"] or "") for r in ops if r["placement"] == "cpu"]
    if not rows:
        return "<p>Nothing falls back: every node runs on the engine (or is folded away).</p>"
    return _table(("node", "op", "why it runs on the CPU"), rows)


def _placements(ops: Sequence[Mapping[str, Any]]) -> str:
    """Every node's placement and reason as text: what the graph's hover shows, in print too."""
    rows = [(r["node"], r["op"], r["placement"], r["layer"] or "", r["reason"] or "") for r in ops]
    return _table(("node", "op", "placement", "engine layer", "reason"), rows,
                  cls=[f"placement-{r['placement']}" for r in ops])  # fmt: skip


def _layer_rows(estimate: Any) -> str:
    """The per-layer estimate, slowest first, with the totals in the last row."""
    rows: list[tuple[float, tuple]] = []
    for seg in estimate.segments:
        if seg.device != "ane":
            rows.append((seg.time_s, (f"CPU segment {seg.index}", "cpu", "", 0, seg.time_s, "cpu")))
            continue
        for c in seg.layers:
            rows.append((c.time_s, (c.name, c.unit, f"s{seg.index}p{c.partition}", c.flops,
                                    c.time_s, c.bound)))  # fmt: skip
    rows.sort(key=lambda item: -item[0])
    total_flops = sum(r[3] for _, r in rows)
    total_s = sum(r[4] for _, r in rows)
    shown = [(n, u, p, f"{f:,}", f"{t * 1e6:.2f}", f"{t / total_s:.1%}" if total_s else "", b)
             for _, (n, u, p, f, t, b) in rows]  # fmt: skip
    shown.append((f"total ({len(rows)} rows)", "", "", f"{total_flops:,}", f"{total_s * 1e6:.2f}",
                  "100%" if total_s else "", ""))  # fmt: skip
    classes = [""] * len(rows) + ["total"]
    return _table(("layer", "unit", "partition", "flops", "time (us)", "share", "bound"), shown,
                  {3, 4, 5}, cls=classes)  # fmt: skip


def _numerics(report: Mapping[str, Any] | None, error: str | None) -> str:
    if report is None:
        return f"<p>Not run{': ' + escape(error) if error else ' (--no-numerics)'}.</p>"
    head = f"<p>fp16 against fp32 on {escape(report['inputs'])} inputs.</p>"
    if report.get("sim_error"):
        head += f"<p>The simulator could not run the model: {escape(report['sim_error'])}</p>"
    found = report["findings"]
    if not found:
        return head + "<p>No overflow, underflow or precision loss found.</p>"
    rows = [
        (f["kind"], f["layer"], ", ".join(f["nodes"]), f["detail"], f["remedy"], f["seen_in"])
        for f in found
    ]
    cls = [f"finding-{f['kind']}" for f in found]
    return head + _table(("kind", "layer", "nodes", "finding", "remedy", "seen in"), rows, cls=cls)


def build_report(
    model: Any,
    target: str = DEFAULT_TARGET,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    chips: Sequence[str] = DEFAULT_CHIPS,
    feeds: Mapping[str, Any] | None = None,
    numerics: bool = True,
    title: str | None = None,
) -> str:
    """The report page for ``model`` (a Graph, ONNX path or ModelProto) compiled for ``target``."""
    from anekit.compiler import compile as compile_model
    from anekit.compiler import estimate_model, load_graph
    from anekit.cost import estimate_compiled

    chip = targets.get(target)
    graph = load_graph(model, input_shapes)
    cm = compile_model(graph, chip)
    per_chip = estimate_model(graph, [targets.get(c) for c in chips])
    estimate = estimate_compiled(cm)
    ops = cm.report["ops"]
    numerics_report, numerics_error = None, None
    if numerics:
        from anekit import numerics as fp16

        numerics_report = fp16.analyse(cm, feeds).as_dict()
    legend = "".join(
        f'<span style="background:{c}">{escape(k)}</span>' for k, c in PLACEMENT_COLOURS.items()
    )
    name = title or graph.name or "model"
    body = [
        f"<h1>{escape(name)} on {escape(chip.name)}</h1>",
        f"<p>{escape(cm.summary_line())}</p><p>{escape(estimate.summary())}</p>",
        "<h2>Graph</h2>",
        f'<p class="legend">fill: where a node runs {legend} outline: its engine layer '
        "(nodes fused into one layer share a colour). The graph reads left to right, band "
        "after band; a dashed edge from a grey \u201cfrom\u201d label comes from a node in an "
        "earlier band. Every node's layer and reason are in the table below.</p>",
        graph_svg(cm.source.nodes, {r["node"]: r for r in ops}),
        "<h2>CPU fallbacks</h2>",
        _fallbacks(ops),
        "<h2>Every node: placement and reason</h2>",
        _placements(ops),
        f"<h2>Per-layer estimates on {escape(chip.name)}</h2>",
        '<p class="note">Slowest first; the last row sums the column. <b>bound</b> names what '
        "limits a layer: <i>compute</i> (its multiply-adds at the engine's peak take longest), "
        "<i>memory</i> (moving its tensors and weights) or <i>dispatch</i>.</p>",
        _layer_rows(estimate),
        "<h2>Timeline per chip</h2>",
        '<p class="legend">'
        + "".join(
            f'<span style="background:{c}">{escape(k)}</span>' for k, c in TIMELINE_COLOURS.items()
        )
        + "</p>",
        '<p class="note"><b>dispatch</b>: handing a program to the engine; <b>transition</b>: '
        "converting its inputs and outputs between fp32 and fp16; <b>ane0</b> and <b>ane1</b>: "
        "the engine's partitions (runs of layers whose tensors fit in its on-chip memory), "
        "shaded alternately so that neighbours can be told apart; <b>cpu</b>: a CPU segment.</p>",
        timeline_svg(per_chip),
        '<p class="note"><b>bound</b> is what limits the whole model on that chip (the largest '
        "of its compute, memory and dispatch times). A small model can be compute-bound and "
        "still use little of the engine: <code>anekit estimate</code>'s <b>ANE util</b> is the "
        "share of the engine's peak its layers achieve over the whole run, dispatch included.</p>",
        _table(
            ("chip", "estimate (ms)", "bound", "dispatches", "partitions"),
            [
                (e.target, f"{e.total_ms:.3f}", e.bottleneck, e.dispatches, e.partitions)
                for e in per_chip
            ],
            {1, 3, 4},
        ),
        "<h2>fp16 numerics</h2>",
        _numerics(numerics_report, numerics_error),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="generator" content="{GENERATOR}">'
        f"<title>anekit report: {escape(name)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
