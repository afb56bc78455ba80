"""The Target value objects: typed chip facts (limits, feature gates, MIL dialect, performance) with provenance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

# The kinds of evidence a figure can rest on; chips.json "kinds" explains each.
KINDS = ("spec", "documented", "measured", "derived", "assumption", "choice", "unknown")


@dataclass(frozen=True)
class Alternative:
    """A value another source gives for the same figure, and that source."""

    value: Any
    source: str


@dataclass(frozen=True)
class Provenance:
    """Where a figure comes from: its kind of evidence, the source note, the entry that set it."""

    kind: str
    source: str
    defined_in: str  # the chip entry (or "defaults") that set the figure
    alternatives: tuple[Alternative, ...] = ()


@dataclass(frozen=True)
class Limits:
    """Shape and size limits that legalization must respect."""

    max_rank: int
    max_dim: int  # spatial / contraction axis extent (H, W, matmul K)
    max_channel_extent: int  # channel extent of one tensor
    max_channels: int  # output channels of one convolution before it is split
    max_spatial_register: int
    max_channels_register: int
    max_groups: int
    max_dma_stride: int
    min_kernel: int
    max_kernel: int
    min_io_bytes: int
    max_program_weight_bytes: int  # weights of one compiled program (models are cut under it)


@dataclass(frozen=True)
class Features:
    """Per-chip feature gates: True when the engine runs the op (or the MIL form may be emitted)."""

    softmax: bool
    instance_norm: bool
    resize: bool
    affine: bool
    resample: bool
    padding_modes: bool
    dropout: bool
    random: bool
    sin_cos: bool
    topk: bool
    sort: bool
    dynamic_slice: bool
    dynamic_goc: bool
    concat: bool
    sdpa: bool
    sdpa_mask: bool
    gelu: bool
    conv3d: bool
    l2_chaining: bool


@dataclass(frozen=True)
class Mil:
    """The MIL dialect the chip's compiler accepts."""

    program_version: str
    opset: str
    io_dtype: str
    io_dtypes: tuple[str, ...]

    @property
    def opset_number(self) -> int:
        """``ios18`` -> 18 (0 for an opset not named iosNN)."""
        number = self.opset[3:] if self.opset.startswith("ios") else ""
        return int(number) if number.isdigit() else 0

    @property
    def int8_tensors(self) -> bool:
        """Whether plain ops take int8/uint8 tensors: from iOS 17 (in iOS 15/16 only constexpr
        ops do, so int8 values travel as int32 there)."""
        return self.opset_number >= 17


@dataclass(frozen=True)
class Perf:
    """Performance figures for the cost model (TFLOP/s, GB/s, us, ms, GFLOP/s)."""

    marketing_tops: float | None
    marketing_fp16_tflops: float | None
    peak_fp16_tflops: float  # conv-like work (deep convolution stacks)
    gemm_fp16_tflops: float  # GEMM-like work
    bandwidth_gbps: float  # unified memory, Apple's figure
    ane_bandwidth_gbps: float  # what the engine effectively streams at
    dispatch_overhead_us: float
    compile_ms: float
    spill_throughput_factor: float
    util_single_op: float
    util_deep_graph: float
    cpu_gflops: float


@dataclass(frozen=True)
class Process:
    """Per-process limits of the macOS ANE software stack."""

    max_compiles: int
    max_loaded_programs: int
    max_inflight: int


# Field groups of a Target, in display order; each group's fields are addressed "group.field".
GROUPS: dict[str, type] = {
    "limits": Limits,
    "features": Features,
    "mil": Mil,
    "perf": Perf,
    "process": Process,
}
TOP_FIELDS = ("engine", "a_class", "ane_cores", "onchip_budget_bytes", "kmem_cap_bytes")
FEATURE_NAMES = tuple(f.name for f in fields(Features))


def figure_paths() -> tuple[str, ...]:
    """Every sourced figure of a Target as a dotted path ("engine", "perf.bandwidth_gbps", ...)."""
    grouped = tuple(f"{g}.{f.name}" for g, cls in GROUPS.items() for f in fields(cls))
    return TOP_FIELDS + grouped


@dataclass(frozen=True)
class Target:
    """One Apple Neural Engine target: chip identity, limits, gates, dialect, performance, sources."""

    name: str
    aliases: tuple[str, ...]
    family: str  # the base chip of this chip's generation ("m1" for m1-max)
    engine: str
    a_class: str
    ane_cores: int
    onchip_budget_bytes: int
    kmem_cap_bytes: int
    limits: Limits
    features: Features
    mil: Mil
    perf: Perf
    process: Process
    notes: str = ""
    provenance: Mapping[str, Provenance] = field(
        default_factory=lambda: MappingProxyType({}), repr=False, compare=False, hash=False
    )

    @property
    def generation(self) -> int:
        """The engine generation number, comparable across chips (13 for H13 ... 17 for H17)."""
        return int(self.engine[1:])

    def supports(self, feature: str) -> bool:
        """The gate for one feature; an unknown feature name is a programming error (KeyError)."""
        if feature not in FEATURE_NAMES:
            raise KeyError(f"unknown feature {feature!r}; known: {', '.join(FEATURE_NAMES)}")
        return bool(getattr(self.features, feature))

    def figure(self, path: str) -> Any:
        """The value of one figure by dotted path ("perf.bandwidth_gbps")."""
        self._check_path(path)
        group, _, name = path.rpartition(".")
        return getattr(getattr(self, group) if group else self, name)

    def provenance_of(self, path: str) -> Provenance:
        """The full provenance of one figure ("generation" resolves to "engine")."""
        path = "engine" if path == "generation" else path
        self._check_path(path)
        return self.provenance[path]

    def source(self, path: str) -> str:
        """The source note of one figure by dotted path ("perf.bandwidth_gbps")."""
        return self.provenance_of(path).source

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON-ready data, with a "sources" map of every figure's provenance."""
        out: dict[str, Any] = {
            "name": self.name,
            "aliases": list(self.aliases),
            "family": self.family,
            "generation": self.generation,
        }
        out.update({name: getattr(self, name) for name in TOP_FIELDS})
        for group in GROUPS:
            values = asdict(getattr(self, group))
            out[group] = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        out["notes"] = self.notes
        out["sources"] = {
            path: {
                "kind": p.kind,
                "source": p.source,
                "from": p.defined_in,
                "alternatives": [{"value": a.value, "source": a.source} for a in p.alternatives],
            }
            for path, p in self.provenance.items()
        }
        return out

    @staticmethod
    def _check_path(path: str) -> None:
        if path not in _PATHS:
            raise KeyError(f"unknown figure {path!r}; known: {', '.join(_PATHS)}")


_PATHS = figure_paths()
