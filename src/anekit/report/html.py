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
        attr = f' class="{escape(cls[k])}"' if cls else ""
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


def _layer_rows(estimate: Any) -> str:
    rows = []
    for seg in estimate.segments:
        if seg.device != "ane":
            rows.append(
                (f"CPU segment {seg.index}", "cpu", "", "", f"{seg.time_s * 1e6:.1f}", "cpu")
            )
            continue
        for c in seg.layers:
            rows.append(
                (c.name, c.unit, f"s{seg.index}p{c.partition}", f"{c.flops:,}",
                 f"{c.time_s * 1e6:.2f}", c.bound)
            )  # fmt: skip
    return _table(("layer", "unit", "partition", "flops", "time (us)", "bound"), rows, {3, 4})


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
        "(nodes fused into one layer share a colour); hover a node for its layer and reason.</p>",
        f'<div class="scroll">{graph_svg(cm.source.nodes, {r["node"]: r for r in ops})}</div>',
        "<h2>CPU fallbacks</h2>",
        _fallbacks(ops),
        f"<h2>Per-layer estimates on {escape(chip.name)}</h2>",
        _layer_rows(estimate),
        "<h2>Timeline per chip</h2>",
        '<p class="legend">'
        + "".join(
            f'<span style="background:{c}">{escape(k)}</span>' for k, c in TIMELINE_COLOURS.items()
        )
        + "</p>",
        timeline_svg(per_chip),
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
