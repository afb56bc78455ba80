"""What a pass sees besides the graph: target, options, diagnostics and the per-node event log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from anekit.ir.dtypes import MASK_VALUE
from anekit.passes.results import Diagnostic, PassRecord
from anekit.targets import Target

DEAD_CODE = "dead code: nothing reads its result"


@dataclass(frozen=True)
class PassOptions:
    """Knobs of the pipeline; every default is documented where it is used."""

    # ReplaceMatmulWithConv (ane-compiler): a constant weight becomes a resident 1x1 conv when
    # its fp16 bytes fit this fraction of the target's on-chip budget; else a tiled matmul.
    onchip_margin: float = 1.0
    # Constant folding never creates a constant larger than both this many elements and
    # the node's inputs (an expand or gather must not blow a small constant up).
    fold_limit: int = 1 << 20
    # Attention decomposition: the additive value of a masked position (fp16-safe; never -inf).
    mask_value: float = MASK_VALUE
    # Replace exact (erf) GELU by its tanh form when the target lacks the MIL gelu op.
    approximate_gelu: bool = True
    # Decompose a softmax the target gates off (else it runs on the CPU, as Apple's own
    # validator would send it).
    decompose_gated_softmax: bool = True
    # Canonicalization stops after this many sweeps even if rules still fire.
    max_sweeps: int = 32
    # Original (ONNX) node names whose computation stays in fp32 on the CPU, whatever the
    # engine could run: the remedy for a node fp16 cannot hold (`anekit check --numerics`).
    cpu_nodes: tuple[str, ...] = ()
    # (input name, factor): the program multiplies the input by the factor and the graph
    # absorbs it exactly (`anekit.passes.scaling`), so large inputs fit fp16.
    input_scales: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class NodeEvent:
    """Something a pass did to an original node: its kind, a readable detail, the layer."""

    pass_name: str
    kind: str  # "removed", "folded", "decomposed", "rewritten", "split", "placed"
    detail: str
    layer: str | None = None


@dataclass
class PassContext:
    """Mutable state threaded through one compile (one context per compile, never shared).

    ``events`` maps each original node name to what happened to it. What a pass decides
    about the graph (verdicts, placement, segments) is not kept here: the pipeline hands it
    from the pass that provides it to the passes that need it, and returns it.
    """

    target: Target
    options: PassOptions = field(default_factory=PassOptions)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    events: dict[str, list[NodeEvent]] = field(default_factory=dict)
    records: list[PassRecord] = field(default_factory=list)
    # original nodes merged into another node's weights or constants (never a main op)
    absorbed: set[str] = field(default_factory=set)
    current: str = ""
    _counts: Counter = field(default_factory=Counter)
    _notes: list[str] = field(default_factory=list)
    _reasons: dict[str, str] = field(default_factory=dict)

    # --- bookkeeping of the running pass ---------------------------------------------------

    def begin(self, name: str) -> None:
        self.current = name
        self._counts = Counter()
        self._notes = []
        self._reasons = {}

    def count(self, what: str, n: int = 1) -> None:
        """Record ``n`` rewrites of kind ``what`` in the running pass."""
        self._counts[what] += n

    def note(self, text: str) -> None:
        """A remark for the pass log (e.g. a constant not folded because of the limit)."""
        if text not in self._notes:
            self._notes.append(text)

    def end(self, seconds: float) -> PassRecord:
        notes = [f"{k} x{v}" for k, v in sorted(self._counts.items())] + self._notes
        record = PassRecord(self.current, sum(self._counts.values()), tuple(notes), seconds)
        self.records.append(record)
        return record

    # --- the per-original-node event log ------------------------------------------------------

    def event(
        self, origins: Iterable[str], kind: str, detail: str, layer: str | None = None
    ) -> None:
        ev = NodeEvent(self.current, kind, detail, layer)
        for o in origins:
            log = self.events.setdefault(o, [])
            if not log or log[-1] != ev:
                log.append(ev)

    def removing(self, origins: Iterable[str], reason: str) -> None:
        """Say why these origins may vanish in this pass (used if they do vanish)."""
        for o in origins:
            self._reasons.setdefault(o, reason)

    def vanished(self, origins: Iterable[str]) -> None:
        """Log origins that no node carries any more, with the reason given, if any."""
        for o in origins:
            reason = self._reasons.get(o, DEAD_CODE)
            self.event([o], "removed", reason)

    def diagnose(self, diagnostic: Diagnostic) -> None:
        self.diagnostics.append(diagnostic)

    def last_event(self, origin: str, kinds: Iterable[str] | None = None) -> NodeEvent | None:
        wanted = set(kinds) if kinds is not None else None
        for ev in reversed(self.events.get(origin, ())):
            if wanted is None or ev.kind in wanted:
                return ev
        return None
