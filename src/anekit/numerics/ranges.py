"""fp16 hazards found without data: value ranges propagated from the weights and the inputs'
declared ranges.

Every tensor gets two descriptions: a hard interval ``[lo, hi]`` that holds for any input in
the declared ranges (interval arithmetic; a linear layer's bound is the sum of its weights'
worst cases), and a typical spread ``mean +- std`` that assumes independent elements (a
linear layer: mean * sum(w) + b, std * sqrt(sum(w^2)), per output channel). The typical
peak, mean + TYPICAL_SIGMAS std clipped to the hard interval, decides a finding: the hard
interval alone would flag nearly every deep network (worst cases compound layer after
layer), the typical one only what a realistic input of that range reaches.

Ops without their own rule are described by their reference kernel: an elementwise op runs
on a few thousand values drawn from its inputs' spread (its interval on a grid over the hard
interval), other ops on inputs of the full shape (up to SAMPLED_MAX_ELEMENTS); anything else
is unknown, and nothing downstream of an unknown value is reported (no false alarm).

The analysis runs on the graph as the engine sees it before fusion (canonicalized, written-out
norms recognised and decomposed), so it judges the fp16-safe forms, not the written-out ones;
only nodes the compiled model places on the engine are judged (the CPU computes in fp32).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import InputError
from anekit.ir.registry import get_op

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
FP16_NORMAL = float(np.finfo(np.float16).tiny)  # 6.1e-5: below it fp16 loses precision
FP16_EPS = 2.0**-11  # fp16's relative rounding step
TYPICAL_SIGMAS = 4.0
CANCELLATION_LIMIT = 0.02  # rounding of the operands over the result's typical magnitude
SAMPLES = 4096
SAMPLED_MAX_ELEMENTS = 1 << 22
SEED = 0

# input-name conventions -> (lo, hi, what the range means)
_AUDIO = re.compile(r"audio|wav|waveform|pcm|speech|samples|signal", re.IGNORECASE)
_IMAGE = re.compile(r"image|img|pixel|picture|frame", re.IGNORECASE)
INT16_RANGE = (-32768.0, 32767.0)
_INTEGER_RANGES = {"uint8": (0.0, 255.0), "int8": (-128.0, 127.0), "int16": INT16_RANGE}
# ops that move values without computing new ones (a max pool picks one)
_MOVES = frozenset({
    "reshape", "transpose", "slice", "concat", "split", "gather", "identity", "cast", "expand",
    "tile", "pad", "max_pool", "depth_to_space", "space_to_depth", "reverse_sequence", "trilu",
})  # fmt: skip
_ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "pow", "prelu"})


@dataclass(frozen=True)
class Spread:
    """What a tensor's values may be: hard bounds and a typical mean and std."""

    lo: float
    hi: float
    mean: float
    std: float

    @property
    def known(self) -> bool:
        return math.isfinite(self.mean) and not math.isnan(self.std)

    @property
    def peak(self) -> float:
        """The typical largest magnitude: mean +- TYPICAL_SIGMAS std within the hard bounds."""
        top = min(self.hi, self.mean + TYPICAL_SIGMAS * self.std)
        bottom = max(self.lo, self.mean - TYPICAL_SIGMAS * self.std)
        return max(abs(top), abs(bottom))

    @property
    def rms(self) -> float:
        return math.sqrt(self.mean**2 + self.std**2)

    def draw(self, rng: np.random.Generator, shape: Any = SAMPLES) -> np.ndarray:
        x = rng.normal(self.mean, self.std, shape)
        return np.clip(x, self.lo, self.hi).astype(np.float32)


UNKNOWN = Spread(-math.inf, math.inf, math.nan, math.nan)


def of_array(a: np.ndarray) -> Spread:
    a = np.asarray(a, np.float64)
    if a.size == 0:
        return Spread(0.0, 0.0, 0.0, 0.0)
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return UNKNOWN
    lo, hi = float(a.min()), float(a.max())
    return Spread(lo, hi, float(finite.mean()), float(finite.std()))


def of_range(lo: float, hi: float) -> Spread:
    """A declared range: values anywhere in it, typically about its middle (a quarter of the
    half-width as std, so that TYPICAL_SIGMAS std reach its ends); an unbounded one is
    standard normal."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Spread(lo, hi, 0.0, 1.0)
    return Spread(lo, hi, (lo + hi) / 2, (hi - lo) / 2 / TYPICAL_SIGMAS)


# --- input ranges -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRange:
    lo: float
    hi: float
    why: str


def parse_input_ranges(specs: list[str] | None) -> dict[str, tuple[float, float]]:
    """``NAME=LO:HI`` options as {name: (lo, hi)}."""
    ranges: dict[str, tuple[float, float]] = {}
    for spec in specs or ():
        name, eq, span = spec.partition("=")
        lo, colon, hi = span.partition(":")
        try:
            bounds = (float(lo), float(hi))
        except ValueError:
            bounds = None
        if not (eq and colon and name) or bounds is None or not bounds[0] <= bounds[1]:
            raise InputError(
                f"--input-range '{spec}' is not NAME=LO:HI with LO <= HI",
                hint="e.g. --input-range audio=-32768:32767",
            )
        ranges[name] = bounds
    return ranges


def _image_scale(graph: Any, name: str) -> tuple[float, float, str]:
    """0..255 when the model's own preprocessing divides by 255 (or subtracts means above 1),
    else 0..1."""
    for reader in graph.consumers(name):
        if reader.op not in ("div", "mul", "sub"):
            continue
        const = next((graph.constants[i] for i in reader.inputs if i in graph.constants), None)
        if const is None or const.size == 0:
            continue
        c = np.abs(np.asarray(const, np.float64))
        if (reader.op == "div" and np.all(c > 100)) or (reader.op == "mul" and np.all(c < 0.01)):
            return 0.0, 255.0, "an image the model divides by 255"
        if reader.op == "sub" and np.all(c > 1):
            return 0.0, 255.0, "an image the model centres on 0..255 means"
    return 0.0, 1.0, "an image (the model does not rescale 0..255)"


def default_range(graph: Any, value: Any) -> InputRange | None:
    """The range assumed for an input nobody declared: from its dtype, then its name."""
    dt = value.dtype.name.lower()
    if dt in _INTEGER_RANGES:
        lo, hi = _INTEGER_RANGES[dt]
        return InputRange(lo, hi, f"the range of {dt}")
    if not value.dtype.is_float:
        return None  # token ids, masks: not values fp16 holds
    if _AUDIO.search(value.name):
        return InputRange(*INT16_RANGE, "audio samples at int16 scale (its name)")
    if _IMAGE.search(value.name) and value.rank == 4 and value.shape[1] in (1, 3, 4):
        return InputRange(*_image_scale(graph, value.name))
    return InputRange(-math.inf, math.inf, "no convention known: standard normal values")


def input_ranges(graph: Any, declared: Mapping[str, tuple[float, float]]) -> dict[str, InputRange]:
    unknown = sorted(set(declared) - set(graph.input_names))
    if unknown:
        raise InputError(
            f"--input-range names {unknown}, which the model has no input called",
            hint=f"the model's inputs: {', '.join(graph.input_names)}",
        )
    found = {}
    for v in graph.inputs:
        if v.name in declared:
            found[v.name] = InputRange(*declared[v.name], "declared")
        else:
            r = default_range(graph, v)
            if r is not None:
                found[v.name] = r
    return found


# --- propagation ------------------------------------------------------------------------------


def _linear(x: Spread, w: np.ndarray, b: np.ndarray | None, axis: int) -> Spread:
    """x times constant weights summed over every axis but ``axis`` (the output channel):
    per channel, mean * sum(w) + b and std * sqrt(sum(w^2)); bounds from each weight's sign."""
    w = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    bias = np.zeros(w.shape[0]) if b is None else np.asarray(b, np.float64).reshape(-1)
    lo, hi = min(x.lo, 0.0), max(x.hi, 0.0)  # zero padding may enter the window
    pos, neg = np.clip(w, 0, None).sum(1), np.clip(w, None, 0).sum(1)
    means = x.mean * w.sum(1) + bias
    var = x.std**2 * (w * w).sum(1)
    mean = float(means.mean())
    with np.errstate(invalid="ignore", over="ignore"):
        top = hi * pos + lo * neg + bias
        bottom = lo * pos + hi * neg + bias
    return Spread(float(np.min(bottom)), float(np.max(top)), mean,
                  float(np.sqrt(np.mean(var + (means - mean) ** 2))))  # fmt: skip


def _product_sum(a: Spread, b: Spread, k: int) -> Spread:
    """The sum of k products of independent a and b elements (a matmul of two live values)."""
    corners = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    corners = [c for c in corners if not math.isnan(c)] or [-math.inf, math.inf]
    var = (a.std**2 + a.mean**2) * (b.std**2 + b.mean**2) - (a.mean * b.mean) ** 2
    return Spread(
        k * min(corners), k * max(corners), k * a.mean * b.mean, math.sqrt(k * max(var, 0))
    )


def _elementwise(node: Any, spreads: list[Spread], same: bool, rng: np.random.Generator) -> Spread:
    """An elementwise op on independent draws of its inputs (one draw when an op reads the
    same value twice); bounds from the op on a grid over the inputs' hard intervals."""
    op = get_op(node.op)
    draws = [s.draw(rng) for s in spreads]
    if same:
        draws = [draws[0]] * len(draws)
    with np.errstate(all="ignore"):
        typical = np.asarray(op.call(draws, node.attrs), np.float64)
        grids = [np.linspace(s.lo, s.hi, 65) if math.isfinite(s.lo) and math.isfinite(s.hi)
                 else None for s in spreads]  # fmt: skip
        if any(g is None for g in grids):
            lo, hi = -math.inf, math.inf
        else:
            mesh = np.meshgrid(*grids, indexing="ij") if not same else [grids[0]] * len(grids)
            edge = np.asarray(op.call([m.astype(np.float32) for m in mesh], node.attrs))
            lo, hi = float(np.nanmin(edge)), float(np.nanmax(edge))
            if np.isnan(edge).any() or not np.isfinite(edge).all():
                lo, hi = -math.inf, math.inf
    finite = typical[np.isfinite(typical)]
    if finite.size < typical.size / 2:
        return UNKNOWN
    return Spread(lo, hi, float(finite.mean()), float(finite.std()))


def _sampled(
    node: Any, graph: Any, spreads: list[Spread | None], rng: np.random.Generator
) -> Spread:
    """Any other op on full-shape draws of its inputs (constants as they are)."""
    from anekit.ir.interpret import run_node

    args = []
    for name, s in zip(node.inputs, spreads, strict=True):
        if not name:
            args.append(None)
        elif name in graph.constants:
            args.append(graph.constants[name])
        elif s is None or not s.known or graph.values[name].numel > SAMPLED_MAX_ELEMENTS:
            return UNKNOWN
        elif graph.values[name].dtype.is_float:
            args.append(s.draw(rng, graph.values[name].shape))
        else:
            return UNKNOWN  # integer operands (indices) cannot be drawn
    try:
        with np.errstate(all="ignore"):
            out = run_node(node, args, [graph.values[o] for o in node.outputs])[0]
    except Exception:  # noqa: BLE001 - a kernel refusing drawn values: say nothing about it
        return UNKNOWN
    out = np.asarray(out)
    return of_array(out) if out.dtype.kind == "f" else UNKNOWN


def _union(spreads: list[Spread]) -> Spread:
    known = [s for s in spreads if s.known]
    if len(known) < len(spreads) or not known:
        return UNKNOWN
    mean = float(np.mean([s.mean for s in known]))
    var = float(np.mean([s.std**2 + (s.mean - mean) ** 2 for s in known]))
    return Spread(min(s.lo for s in known), max(s.hi for s in known), mean, math.sqrt(var))


def _reduced(node: Any, x: Spread, n: int) -> Spread:
    if node.op == "reduce_sum":
        return Spread(x.lo * n, x.hi * n, x.mean * n, x.std * math.sqrt(n))
    if node.op == "reduce_mean":
        return Spread(x.lo, x.hi, x.mean, x.std)  # means of rows that differ: keep the spread
    shift = x.std * math.sqrt(2 * math.log(max(n, 2)))
    mean = x.mean + shift if node.op == "reduce_max" else x.mean - shift
    return Spread(x.lo, x.hi, float(np.clip(mean, x.lo, x.hi)), x.std / 2)


def _reduced_count(node: Any, graph: Any) -> int:
    shape = graph.values[node.inputs[0]].shape
    axes = node.attrs.get("axes") or tuple(range(len(shape)))
    return int(np.prod([shape[a % len(shape)] for a in axes], dtype=np.int64))


def propagate(graph: Any, inputs: Mapping[str, Spread]) -> dict[str, Spread]:
    """The spread of every float value of ``graph``, from ``inputs`` and the constants."""
    rng = np.random.default_rng(SEED)
    spread: dict[str, Spread] = {n: of_array(c) for n, c in graph.constants.items()
                                 if np.asarray(c).dtype.kind == "f"}  # fmt: skip
    spread.update(inputs)
    for node in graph.nodes:
        ins = [spread.get(i) if i else None for i in node.inputs]
        live = [s for i, s in zip(node.inputs, ins, strict=True) if i and i not in graph.constants]
        out = graph.values[node.outputs[0]]
        if not out.dtype.is_float:
            continue
        if any(s is not None and not s.known for s in live):
            result = UNKNOWN
        else:
            result = _transfer(node, graph, ins, rng)
        for o in node.outputs:
            spread[o] = result
    return spread


def _transfer(node: Any, graph: Any, ins: list[Spread | None], rng: np.random.Generator) -> Spread:
    op, consts = node.op, graph.constants
    if op in ("conv", "matmul") and len(node.inputs) > 1 and node.inputs[1] in consts:
        w = consts[node.inputs[1]]
        bias = consts.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if ins[0] is None:
            return UNKNOWN
        return _linear(ins[0], w, bias, 0 if op == "conv" else w.ndim - 1)
    if op == "matmul" and ins[0] is not None and ins[1] is not None:
        k = graph.values[node.inputs[0]].shape[-1]
        return _product_sum(ins[0], ins[1], k)
    if op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min") and ins[0] is not None:
        return _reduced(node, ins[0], _reduced_count(node, graph))
    if op == "softmax":
        n = graph.values[node.inputs[0]].shape[node.attrs["axis"]]
        return Spread(0.0, 1.0, 1.0 / n, 1.0 / n)
    if op in _MOVES:
        # the data input (every input of a concat; a constant one too); pad adds its value
        data = [s for i, s in zip(node.inputs, ins, strict=True)
                if s is not None and (op == "concat" or i not in consts)]  # fmt: skip
        if data:
            joined = _union(data if op == "concat" else data[:1])
            if op == "pad":
                value = float(node.attrs.get("value", 0.0))
                return Spread(min(joined.lo, value), max(joined.hi, value), joined.mean, joined.std)
            return joined
    if get_op(op).activation or op in _ELEMENTWISE:
        present = [s for i, s in zip(node.inputs, ins, strict=True) if i]
        if all(s is not None for s in present):
            same = len({i for i in node.inputs if i}) == 1 and len(present) > 1
            return _elementwise(node, present, same, rng)
    return _sampled(node, graph, ins, rng)


# --- hazards ------------------------------------------------------------------------------------


def engine_view(cm: Any) -> Any:
    """The compiled model's graph before layout and fusion: plain IR ops, the written-out
    norms recognised and decomposed as the engine will compute them."""
    from anekit.passes.context import PassContext
    from anekit.passes.pipeline import DEFAULT_PIPELINE, run_pipeline, stamp_origins

    prefix = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index("layout")]
    ctx = PassContext(cm.target, cm.options)
    return run_pipeline(stamp_origins(cm.source), ctx, prefix).graph


@dataclass
class _Chain:
    """An overflow and every engine node after it that still reads or makes values beyond
    fp16: the nodes the remedy keeps in fp32."""

    node: Any
    peak: float
    origins: dict[str, None]


def find_hazards(
    cm: Any,
    declared: Mapping[str, tuple[float, float]] | None = None,
    *,
    remedies: bool = True,
    strict: frozenset[str] = frozenset(),
) -> tuple[list[Any], dict[str, InputRange]]:
    """Findings from value ranges alone (no data), ranked by their effect: overflows first
    (the larger the excess, the earlier), then cancellations, then underflows; and the input
    ranges assumed. Nodes from the original nodes ``strict`` are judged by their hard bounds
    (any input in range, however coherent with the weights), as a rescaling must be.
    ``remedies``: an overflow read from an input also gets the --scale-input that removes
    it, when one does (verified by compiling with it)."""
    from anekit.numerics import Finding

    graph = engine_view(cm)
    ranges = input_ranges(cm.source, declared or {})  # the model's preprocessing as written
    spread = propagate(graph, {n: of_range(r.lo, r.hi) for n, r in ranges.items()})
    if strict:
        for node in graph.nodes:
            if strict.intersection(node.origin):
                for o in node.outputs:
                    if o in spread and spread[o].known:
                        spread[o] = _hard(spread[o])
    placed = {r.node: r.placement for r in cm.ops}
    src_ops = {n.name: n.op for n in cm.source.nodes}
    chains: list[_Chain] = []
    chain_of: dict[str, _Chain] = {}  # value beyond fp16 -> the chain it belongs to
    others: list[Finding] = []
    tiny: set[str] = set()  # values underflowing: reported where they start
    for node in graph.nodes:
        out = spread.get(node.outputs[0])
        if out is None or not any(placed.get(o) == "ane" for o in node.origin):
            continue
        live = [i for i in node.inputs if i and i not in graph.constants and i in spread]
        if not out.known or any(not spread[i].known for i in live):
            continue
        upstream = next((chain_of[i] for i in live if i in chain_of), None)
        for i in live:  # a graph input beyond fp16 read on the engine
            if upstream is None and graph.producer(i) is None and spread[i].peak > FP16_MAX:
                upstream = _Chain(node, spread[i].peak, {})
                chains.append(upstream)
        if upstream is not None:
            upstream.origins.update(dict.fromkeys(node.origin))
            if out.peak > FP16_MAX:
                chain_of[node.outputs[0]] = upstream
            continue
        if out.peak > FP16_MAX:
            chain = _Chain(node, out.peak, dict.fromkeys(node.origin))
            chains.append(chain)
            chain_of[node.outputs[0]] = chain
            continue
        operands = [spread[i] for i in node.inputs if i in spread]
        found = _cancellation(node, out, operands)
        if found is None and not any(i in tiny for i in live) and not _swamped(graph, spread, node):
            found = _underflow(node, out)
            if found is not None:
                tiny.add(node.outputs[0])
        if found is not None:
            kind, value, detail, severity = found
            names = tuple(dict.fromkeys(node.origin))
            others.append(Finding(
                kind, node.name, names, tuple(src_ops.get(n, "?") for n in names), detail,
                f"keep it in fp32 on the CPU: {cpu_option(names)}", value, "ranges",
                severity, cpu_option(names),
            ))  # fmt: skip
    findings = []
    for chain in _merged(chains):
        scale = _input_scale(cm, graph, chain, declared) if remedies else None
        findings.append(_overflow_finding(chain, src_ops, scale))
    findings.sort(key=lambda f: -f.value)
    others.sort(key=lambda f: (f.severity != "hazard", f.kind != "cancellation", -f.value))
    return findings + others, ranges


def _merged(chains: list[_Chain]) -> list[_Chain]:
    """Chains that share an original node (two slices of one convolution) as one."""
    merged: list[_Chain] = []
    for chain in chains:
        into = next((m for m in merged if set(m.origins) & set(chain.origins)), None)
        if into is None:
            merged.append(chain)
        else:
            into.origins.update(chain.origins)
            into.peak = max(into.peak, chain.peak)
    return merged


def cpu_option(names: Any) -> str:
    return f"--cpu {','.join(names)}"


def _hard(s: Spread) -> Spread:
    """A spread whose typical peak is its hard bound."""
    return Spread(s.lo, s.hi, s.mean, math.inf)


MAX_SCALE_TRIES = 8


def _read_input(graph: Any, node: Any) -> str | None:
    """The graph input ``node`` reads, directly or through data movement."""
    for _ in range(16):
        live = [i for i in node.inputs if i and i not in graph.constants]
        if len(live) != 1:
            return None
        producer = graph.producer(live[0])
        if producer is None:
            return live[0]
        if producer.op not in _MOVES:
            return None
        node = producer
    return None


def _input_scale(cm: Any, graph: Any, chain: _Chain, declared: Any) -> str | None:
    """``--scale-input NAME=2^-K`` with the smallest K whose rescaled model has no overflow
    left in the chain's nodes even at their hard bounds; None when the chain does not start
    at an input or no K up to MAX_SCALE_TRIES steps helps."""
    from anekit.compiler import compile as compile_model

    name = _read_input(graph, chain.node)
    if name is None or cm.options.input_scales:
        return None
    k = max(1, math.ceil(math.log2(chain.peak / FP16_MAX)))
    options = dataclasses.asdict(cm.options)
    for _ in range(MAX_SCALE_TRIES):
        options["input_scales"] = {name: 2.0**-k}
        rescaled = compile_model(cm.source, cm.target, **options)
        found, _ = find_hazards(rescaled, declared, remedies=False, strict=frozenset(chain.origins))
        if not any(f.kind == "overflow" and f.severity == "hazard" for f in found):
            return f"--scale-input {name}=2^-{k}"
        k += 2
    return None


def _overflow_finding(chain: _Chain, src_ops: Mapping[str, str], scale: str | None) -> Any:
    from anekit.numerics import Finding

    names = tuple(chain.origins)
    first = tuple(dict.fromkeys(chain.node.origin))
    detail = (
        f"values typically reach {chain.peak:.3g} > 65504 for inputs in the assumed ranges"
        + (f"; they stay beyond fp16 through {len(names) - len(first)} more node(s)"
           if len(names) > len(first) else "")
    )  # fmt: skip
    option = cpu_option(names)
    remedy = f"keep these nodes in fp32 on the CPU: {option}"
    if scale is not None:  # exact and keeps the engine: preferred
        remedy = f"rescale the input exactly (the layers absorb it): {scale}; or {remedy}"
        option = scale
    return Finding(
        "overflow", chain.node.name, first, tuple(src_ops.get(n, "?") for n in first), detail,
        remedy, math.log2(chain.peak / FP16_MAX), "ranges", "hazard", option,
    )  # fmt: skip


def _cancellation(node: Any, out: Spread, ins: list[Spread]) -> tuple | None:
    """A sum or difference whose operands are so much larger than its result that their
    fp16 rounding is a sizeable part of it."""
    if node.op not in ("add", "sub") or len(ins) != 2 or out.rms == 0:
        return None
    ratio = max(s.rms for s in ins) * FP16_EPS / out.rms
    if ratio <= CANCELLATION_LIMIT:
        return None
    detail = (f"operands of typical size {max(s.rms for s in ins):.3g} cancel to {out.rms:.3g}: "
              f"fp16 rounding is {ratio:.0%} of the result")  # fmt: skip
    return "cancellation", ratio, detail, "hazard"


def _swamped(graph: Any, spread: Mapping[str, Spread], node: Any) -> bool:
    """Whether ``node``'s value, through multiplies, is only ever added to terms 2^11 times
    larger (an epsilon beside a variance): its underflow cannot show."""
    value, size = node.outputs[0], spread[node.outputs[0]].rms
    for _ in range(8):
        readers = graph.consumers(value)
        if not readers or value in graph.output_names:
            return False
        if all(r.op in ("add", "sub") for r in readers):
            others = [spread.get(i) for r in readers for i in r.inputs if i != value]
            return all(o is not None and o.known and o.rms > size * 2**11 for o in others)
        if len(readers) != 1 or readers[0].op not in ("mul", "div"):
            return False
        value = readers[0].outputs[0]
    return False


def _underflow(node: Any, out: Spread) -> tuple | None:
    """Values typically below fp16's normal range: information, since whether it matters
    depends on what reads them (the simulated run judges that; tiny probabilities rounding
    to zero leave the decision alone)."""
    if out.rms == 0 or out.rms >= FP16_NORMAL or (out.lo == out.hi == 0):
        return None
    probability = node.op == "softmax" or (out.lo >= 0 and out.hi <= 1)
    flushed = out.rms < float(np.finfo(np.float16).smallest_subnormal)
    severity = "info"
    what = "flush to zero" if flushed else "lose precision (subnormal)"
    detail = f"values of typical size {out.rms:.3g} {what} in fp16"
    if probability:
        detail += " (probabilities: the largest, which decide, are unaffected)"
    return "underflow", out.rms, detail, severity
