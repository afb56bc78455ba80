"""Task-descriptor partitions: the execution order cut where on-chip pressure would pass the budget.

ane-compiler phase 3: the scheduler tentatively adds the next layer, measures the peak L2
pressure over its live range, and closes the partition when that peak would exceed
margin x budget. Here the pressure at a step is the sum of the on-chip tensors live at
that step: every tensor produced or loaded in the current partition whose last reader
is at or after the step, the operands the layer loads from memory, and its output. A
layer that alone exceeds the limit cannot share a partition: it gets one of its own and
is flagged as streaming from memory (its operands and output go through DRAM).
Weights are not L2 pressure: they stream through kernel memory (counted as DMA).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from anekit.schedule.dag import LayerDag


@dataclass(frozen=True)
class Partition:
    """One task-descriptor partition: consecutive positions of the order."""

    index: int
    layers: tuple[str, ...]
    peak_bytes: int  # peak on-chip pressure over its steps
    streaming: bool = False  # a single layer too large for the budget, run from memory


@dataclass(frozen=True)
class PartitionPlan:
    """Partitions plus per-step facts the allocator and the DMA accounting read."""

    partitions: tuple[Partition, ...]
    partition_of: Mapping[str, int]  # layer -> partition index
    pressure: tuple[int, ...]  # on-chip bytes at each position of the order
    loads: tuple[tuple[str, ...], ...]  # tensors each step reads from memory
    streaming: frozenset[str]


def last_uses(dag: LayerDag, order: Sequence[int]) -> dict[str, int]:
    """Position of the last reader of every tensor (a tensor nobody reads: its producer's)."""
    last: dict[str, int] = {}
    for step, i in enumerate(order):
        lay = dag.layers[i]
        for op in lay.operands:
            last[op.tensor] = max(last.get(op.tensor, step), step)
        last.setdefault(lay.output, step)
    return last


def plan_partitions(
    dag: LayerDag,
    order: Sequence[int],
    onchip: Mapping[str, int],
    limit: float,
) -> PartitionPlan:
    """Cut ``order`` into partitions; ``onchip`` gives each tensor's on-chip size (ring windows)."""
    last = last_uses(dag, order)
    groups: list[tuple[list[int], bool]] = []
    pressure = [0] * len(order)
    loads: list[tuple[str, ...]] = [()] * len(order)
    streaming: set[str] = set()
    current: list[int] = []
    live: dict[str, int] = {}

    def close() -> None:
        nonlocal current, live
        if current:
            groups.append((current, False))
        current, live = [], {}

    for step, i in enumerate(order):
        lay = dag.layers[i]
        reads = {op.tensor: onchip.get(op.tensor, op.nbytes) for op in lay.operands}
        out = onchip.get(lay.output, lay.output_bytes)
        alone = sum(reads.values()) + out
        if alone > limit:
            close()
            groups.append(([i], True))
            streaming.add(lay.name)
            pressure[step] = alone
            loads[step] = tuple(reads)
            continue
        live = {t: b for t, b in live.items() if last[t] >= step}
        need = {t: b for t, b in reads.items() if t not in live}
        total = sum(live.values()) + sum(need.values()) + out
        if total > limit and current:
            close()
            need, total = reads, alone
        live.update(need)
        live[lay.output] = out
        current.append(i)
        pressure[step] = total
        loads[step] = tuple(need)
    close()

    partitions = []
    partition_of: dict[str, int] = {}
    step = 0
    for k, (members, is_streaming) in enumerate(groups):
        peak = max(pressure[step : step + len(members)])
        step += len(members)
        names = tuple(dag.layers[i].name for i in members)
        partitions.append(Partition(k, names, peak, is_streaming))
        partition_of.update((n, k) for n in names)
    return PartitionPlan(
        tuple(partitions), partition_of, tuple(pressure), tuple(loads), frozenset(streaming)
    )
