"""Scheduling ANE segments: order, partitions under the on-chip budget, allocation states, DMA."""

from anekit.schedule.allocation import AllocState, ChainCheck, tile_rows
from anekit.schedule.dag import LayerDag
from anekit.schedule.layers import LayerInfo, Operand, layers_of, link_layers, node_flops
from anekit.schedule.partition import Partition
from anekit.schedule.plan import (
    DEFAULT_MARGIN,
    DEFAULT_TILE_BYTES,
    LayerDma,
    ScheduleOptions,
    SegmentSchedule,
    schedule_layers,
)
from anekit.schedule.scheduler import Priority, list_schedule

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_TILE_BYTES",
    "AllocState",
    "ChainCheck",
    "LayerDag",
    "LayerDma",
    "LayerInfo",
    "Operand",
    "Partition",
    "Priority",
    "ScheduleOptions",
    "SegmentSchedule",
    "layers_of",
    "link_layers",
    "list_schedule",
    "node_flops",
    "schedule_layers",
    "tile_rows",
]
