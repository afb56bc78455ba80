"""Will fp16 break it? Per-layer overflow, underflow to zero and precision loss, with remedies.

First, without data (`anekit.numerics.ranges`): value ranges propagated from the weights and
the inputs' declared (or conventional) ranges find overflow, cancellation and underflow
before anything runs. Then two runs on the same inputs (given, or synthetic: drawn from
those ranges; standard-normal floats for inputs with none):
- end to end, the compiled programs on the fp16 simulator (``backend="sim"``) against the
  engine graph in fp32 (``backend="reference"``): what the user will see at the outputs;
- per layer, the engine graph once in fp32 and once as the engine stores it: every engine
  layer's inputs, weights, main op and each epilogue step rounded to fp16 (overflow to
  infinity, values below the smallest subnormal to zero), CPU segments in fp32. Comparing
  the two at every layer says where a problem starts, and which original nodes it is.

A finding is reported at the first layer showing it: an overflow where the layer's inputs
were finite, an underflow where most of a layer's nonzero fp32 values become zeros, a
precision loss where the layer's relative error exceeds PRECISION_LIMIT and is several
times that of its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.engine import LayerView
from anekit.ir.interpret import check_feeds, run_node
from anekit.ir.registry import get_op

FP16_TINY = float(np.finfo(np.float16).smallest_subnormal)  # 5.96e-8
PRECISION_LIMIT = 0.02  # relative error (of the tensor's largest magnitude) worth a finding
PRECISION_GROWTH = 4.0  # ... and this many times the error of the layer's inputs
UNDERFLOW_SHARE = 0.5  # share of nonzero values flushed to zero worth a finding
SYNTHETIC_SEED = 0


@dataclass(frozen=True)
class Finding:
    """One problem at one engine layer: what, how bad, which original nodes, what to do."""

    kind: str  # "overflow" | "underflow" | "precision" | "cancellation"
    layer: str
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    detail: str
    remedy: str
    value: float  # overflowed elements / share flushed to zero / relative error
    # "ranges" (value ranges, no data), "layers" (the per-layer run) or "sim" (its outputs)
    seen_in: str = "layers"
    # "hazard" (the answer is at risk: `check --numerics` exits 4) or "info"
    severity: str = "hazard"
    option: str = ""  # the compile option that carries out the remedy, if one does

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"], d["ops"] = list(self.nodes), list(self.ops)
        return d


@dataclass
class NumericsReport:
    """`anekit check --numerics`: the findings, per-layer figures and the sim's outputs."""

    target: str
    inputs: str  # "given" | "synthetic"
    findings: list[Finding] = field(default_factory=list)
    # each input's assumed range: {"lo", "hi", "why"} (declared or from conventions)
    input_ranges: dict[str, dict[str, Any]] = field(default_factory=dict)
    layers: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    sim_error: str | None = None

    @property
    def hazards(self) -> int:
        """Findings that put the answer at risk (information excluded)."""
        return sum(f.severity == "hazard" for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "inputs": self.inputs,
            "input_ranges": self.input_ranges,
            "hazards": self.hazards,
            "findings": [f.as_dict() for f in self.findings],
            "layers": self.layers,
            "outputs": self.outputs,
            "sim_error": self.sim_error,
        }


# --- inputs -------------------------------------------------------------------------------


def synthetic_feeds(
    graph: Any, seed: int = SYNTHETIC_SEED, ranges: Mapping[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """Values drawn from each input's range (`anekit.numerics.ranges.of_range`; integers
    rounded); without one, standard-normal floats and integer ones (token ids, masks)."""
    from anekit.numerics.ranges import of_range

    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        r = (ranges or {}).get(v.name)
        if r is not None:
            drawn = of_range(r.lo, r.hi).draw(rng, v.shape)
            feeds[v.name] = (drawn if v.dtype.is_float else np.rint(drawn)).astype(v.dtype.numpy)
        elif v.dtype.is_float:
            feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype.numpy)
        else:
            feeds[v.name] = np.ones(v.shape, v.dtype.numpy)
    return feeds


def load_feeds(path: str, graph: Any) -> dict[str, np.ndarray]:
    """Inputs from an .npz file, read as untrusted (`anekit.formats.npy.read_arrays`: no
    pickles, headers checked before data, within the memory budget), checked against the
    model's inputs."""
    from anekit.formats.npy import read_arrays

    feeds = read_arrays(path, "numerics inputs")
    return dict(check_feeds(graph, feeds))


# --- the two runs -------------------------------------------------------------------------


def _fp16(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind != "f":
        return a
    with np.errstate(over="ignore"):
        return a.astype(np.float16).astype(np.float32)


def _run_layer_fp16(node: Any, args: list[np.ndarray | None]) -> np.ndarray:
    """An engine layer as the engine computes it: fp16 after the main op and every step."""
    view = LayerView(node)
    n = view.node.attrs["n_main"]
    y = _fp16(np.asarray(get_op(view.main).call(args[:n], view.main_attrs), np.float32))
    for step in view.epilogue:
        operands = [args[i] if i >= 0 else None for i in step.operands]
        y = _fp16(np.asarray(get_op(step.op).call([y, *operands], step.attrs), np.float32))
    return y


def _trace(cm: Any, feeds: Mapping[str, np.ndarray], emulate: bool) -> dict[str, np.ndarray]:
    graph = cm.graph
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(feeds)
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            on_engine = emulate and cm.placement[node.name].device == "ane"
            args = [env[i] if i else None for i in node.inputs]
            if on_engine:
                args = [None if a is None else _fp16(np.asarray(a)) for a in args]
            if on_engine and node.op == "ane_layer":
                outs = [_run_layer_fp16(node, args)]
            else:
                outs = run_node(node, args, [graph.values[o] for o in node.outputs])
                if on_engine:
                    outs = [_fp16(np.asarray(o)) for o in outs]
            env.update(zip(node.outputs, outs, strict=True))
    return env


# --- measures -----------------------------------------------------------------------------


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| over max |want|, on the elements finite in both."""
    ok = np.isfinite(got) & np.isfinite(want)
    if not ok.any():
        return 0.0
    scale = float(np.abs(want[ok]).max())
    err = float(np.abs(got[ok].astype(np.float64) - want[ok]).max())
    return err / scale if scale else err


def _layer_stats(node: Any, ref: np.ndarray, emu: np.ndarray) -> dict[str, Any]:
    finite = np.isfinite(ref)
    nonzero = finite & (ref != 0)
    flushed = nonzero & (emu == 0)
    return {
        "layer": node.name,
        "max_abs": float(np.abs(ref[finite]).max(initial=0.0)),
        "overflow": int((finite & ~np.isfinite(emu)).sum()),
        "nonzero": int(nonzero.sum()),
        "flushed_to_zero": int(flushed.sum()),
        "rel_error": _rel_error(emu, ref),
    }


# --- remedies -----------------------------------------------------------------------------

_NORM_HINTS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "reduce", "softmax")


def _remedy(kind: str, ops: Sequence[str], stats: Mapping[str, Any]) -> str:
    if kind == "overflow":
        if any(h in op for op in ops for h in _NORM_HINTS):
            return (
                "rescale: divide the input by a constant (e.g. its typical magnitude) before the "
                "normalisation, which is scale-invariant, so its squares stay below 65504; or "
                "keep it in fp32 on the CPU"
            )
        return (
            f"rescale: values reach {stats['max_abs']:.3g} > 65504; fold a down-scale into the "
            "weights before this layer and the inverse after, or keep it in fp32 on the CPU"
        )
    if kind == "underflow":
        power = int(np.ceil(np.log2(FP16_TINY * 2**10 / max(stats["max_abs"], 1e-30))))
        return (
            f"rescale: the values (at most {stats['max_abs']:.3g}) are below fp16's normal range "
            f"(6.1e-5); multiply them by 2^{power} upstream (fold it into the producing "
            "layer's weights) and divide after, or keep this layer in fp32 on the CPU"
        )
    if any(op in ("sin", "cos") for op in ops):
        return (
            "keep in fp32 on the CPU (or reduce the argument modulo 2*pi in fp32 before it): "
            "fp16 spaces large arguments too far apart for sin/cos"
        )
    return (
        "reorder so that large and small terms are not summed in fp16 (scale before summing), "
        "or keep this layer in fp32 on the CPU"
    )


def _describe(kind: str, stats: Mapping[str, Any]) -> str:
    if kind == "overflow":
        return f"{stats['overflow']} value(s) overflow fp16 to infinity (fp32 reaches {stats['max_abs']:.3g})"
    if kind == "underflow":
        share = stats["flushed_to_zero"] / max(stats["nonzero"], 1)
        return (
            f"{stats['flushed_to_zero']} of {stats['nonzero']} nonzero values ({share:.0%}) "
            f"underflow to zero in fp16 (largest {stats['max_abs']:.3g})"
        )
    return f"relative error {stats['rel_error']:.2%} against fp32"


# --- the analysis -------------------------------------------------------------------------


def _origins(node: Any, cm: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The original nodes a layer implements (a layout conversion: those of its producer)."""
    while not node.origin and node.inputs and cm.graph.producer(node.inputs[0]) is not None:
        node = cm.graph.producer(node.inputs[0])
    names = tuple(dict.fromkeys(node.origin))
    src = {n.name: n.op for n in cm.source.nodes}
    return names, tuple(dict.fromkeys(src.get(n, "?") for n in names))


def analyse(
    cm: Any,
    feeds: Mapping[str, Any] | None = None,
    input_ranges: Mapping[str, tuple[float, float]] | None = None,
) -> NumericsReport:
    """The numerics report of compiled model ``cm``: findings from value ranges (the inputs'
    ``input_ranges`` {name: (lo, hi)}, else conventions), then from runs on ``feeds``
    (synthetic, drawn from those ranges, when None)."""
    from anekit.numerics.ranges import find_hazards

    given = feeds is not None
    range_findings, ranges = find_hazards(cm, input_ranges)
    if given:
        feeds = dict(check_feeds(cm.graph, feeds))
    else:
        feeds = synthetic_feeds(cm.graph, ranges=ranges)
    report = NumericsReport(cm.target.name, "given" if given else "synthetic")
    report.input_ranges = {n: {"lo": r.lo, "hi": r.hi, "why": r.why} for n, r in ranges.items()}
    report.findings.extend(range_findings)
    flagged = {n for f in range_findings if f.severity == "hazard" for n in f.nodes}
    ref, emu = _trace(cm, feeds, False), _trace(cm, feeds, True)
    err_of: dict[str, float] = {v: 0.0 for v in feeds}
    # the kinds of problem already reported upstream of a value: reported once, where it starts
    seen: dict[str, frozenset[str]] = {v: frozenset() for v in feeds}
    for node in cm.graph.nodes:
        out = node.outputs[0]
        r, e = np.asarray(ref[out]), np.asarray(emu[out])
        live = [i for i in node.inputs if i and i not in cm.graph.constants]
        in_err = max((err_of.get(i, 0.0) for i in live), default=0.0)
        upstream = frozenset().union(*(seen.get(i, frozenset()) for i in live))
        seen[out] = upstream
        if r.dtype.kind != "f" or cm.placement[node.name].device != "ane":
            err_of[out] = _rel_error(e, r) if r.dtype.kind == "f" else in_err
            continue
        stats = _layer_stats(node, r, e)
        err_of[out] = stats["rel_error"]
        report.layers.append(stats)
        kind = _kind(stats, in_err, upstream)
        if kind == "underflow" and not _felt_downstream(cm, out, ref, emu):
            kind = None  # zeros nobody notices (an epsilon beside a larger term)
        if kind is not None:
            seen[out] = upstream | {kind}
            names, ops = _origins(node, cm)
            if flagged.intersection(names):
                continue  # the range analysis reported it already, with its remedy
            report.findings.append(
                Finding(kind, node.name, names, ops, _describe(kind, stats),
                        _remedy(kind, ops, stats), _value(kind, stats), option=_cpu(names))
            )  # fmt: skip
    _end_to_end(cm, feeds, ref, report, seen)
    _unfelt_as_info(report)
    return report


def _unfelt_as_info(report: NumericsReport) -> None:
    """Per-layer findings are information when the simulator's outputs on the same inputs
    match fp32 (no non-finite value, error within PRECISION_LIMIT): the answer is unaffected."""
    rows = [r for r in report.outputs if "rel_error" in r]
    if report.sim_error or not rows:
        return
    if any(r["nonfinite"] or r["rel_error"] > PRECISION_LIMIT for r in rows):
        return
    note = " (the simulator's outputs match fp32 on these inputs: not felt at the outputs)"
    report.findings = [
        replace(f, severity="info", detail=f.detail + note, option="")
        if f.seen_in == "layers" and f.severity == "hazard"
        else f
        for f in report.findings
    ]


def _cpu(names: Sequence[str]) -> str:
    from anekit.numerics.ranges import cpu_option

    return cpu_option(names) if names else ""


def _felt_downstream(cm: Any, value: str, ref: Mapping[str, Any], emu: Mapping[str, Any]) -> bool:
    """Whether a graph output that depends on ``value`` is off by more than PRECISION_LIMIT."""
    reached, frontier = {value}, [value]
    while frontier:
        for reader in cm.graph.consumers(frontier.pop()):
            for o in reader.outputs:
                if o not in reached:
                    reached.add(o)
                    frontier.append(o)
    return any(
        _rel_error(np.asarray(emu[o]), np.asarray(ref[o])) > PRECISION_LIMIT
        for o in cm.graph.output_names
        if o in reached and np.asarray(ref[o]).dtype.kind == "f"
    )


def _kind(stats: Mapping[str, Any], in_err: float, upstream: frozenset[str]) -> str | None:
    """The problem this layer starts, if any (one already reported upstream is not new;
    after an overflow, everything downstream is its consequence)."""
    if "overflow" in upstream:
        return None
    if stats["overflow"] and "overflow" not in upstream:
        return "overflow"
    share = stats["flushed_to_zero"] / max(stats["nonzero"], 1)
    if share > UNDERFLOW_SHARE and "underflow" not in upstream:
        return "underflow"
    if (
        stats["rel_error"] > PRECISION_LIMIT
        and stats["rel_error"] > PRECISION_GROWTH * in_err
        and not upstream
    ):
        return "precision"
    return None


def _value(kind: str, stats: Mapping[str, Any]) -> float:
    if kind == "overflow":
        return float(stats["overflow"])
    if kind == "underflow":
        return stats["flushed_to_zero"] / max(stats["nonzero"], 1)
    return float(stats["rel_error"])


def _end_to_end(
    cm: Any,
    feeds: Mapping[str, Any],
    ref: Mapping[str, Any],
    report: NumericsReport,
    seen: Mapping[str, frozenset[str]],
) -> None:
    try:
        sim = cm.run(feeds, "sim")
    except AnekitError as exc:
        report.sim_error = str(exc)
        return
    for name in cm.graph.output_names:
        want = np.asarray(ref[name])
        got = (
            np.asarray(sim[name]).astype(np.float32)
            if want.dtype.kind == "f"
            else np.asarray(sim[name])
        )
        row: dict[str, Any] = {"output": name, "shape": list(want.shape)}
        if want.dtype.kind == "f":
            nonzero = np.isfinite(want) & (want != 0)
            row |= {
                "max_abs_fp32": float(np.abs(want[np.isfinite(want)]).max(initial=0.0)),
                "rel_error": _rel_error(got, want),
                "nonfinite": int((~np.isfinite(got) & np.isfinite(want)).sum()),
                "flushed_to_zero": int((nonzero & (got == 0)).sum()),
                "nonzero": int(nonzero.sum()),
            }
        report.outputs.append(row)
        if want.dtype.kind == "f":
            same = bool(want.ndim and np.array_equal(want.argmax(-1), got.argmax(-1)))
            _output_finding(cm, name, row, report, seen.get(name, frozenset()), same)


def _output_finding(
    cm: Any, name: str, row: Mapping[str, Any], report: NumericsReport, upstream: frozenset[str],
    decision: bool | None = None,
) -> None:  # fmt: skip
    """What the simulator's output shows, at the layer that produces it."""
    stats = {
        "overflow": row["nonfinite"], "max_abs": row["max_abs_fp32"], "rel_error": row["rel_error"],
        "flushed_to_zero": row["flushed_to_zero"], "nonzero": row["nonzero"],
    }  # fmt: skip
    kind = _kind(stats, 0.0, frozenset())
    producer = cm.graph.producer(name)
    if kind is None or producer is None:
        return
    names, ops = _origins(producer, cm)
    detail = f"output '{name}' on the fp16 simulator: {_describe(kind, stats)}"
    remedy, severity, option = _remedy(kind, ops, stats), "hazard", _cpu(names)
    if kind == "underflow" and decision is not None and decision:
        severity = "info"
        detail += " (the largest value along the last axis, the decision, is the same as in fp32)"
    if upstream:
        detail += f" (follows from the {' and '.join(sorted(upstream))} found above)"
        remedy, option = "fix the finding(s) above first", ""
    report.findings.append(
        Finding(kind, producer.name, names, ops, detail, remedy, _value(kind, stats), "sim",
                severity, option)
    )  # fmt: skip
