"""``com.microsoft.RelativePositionBias``: T5's bucketed relative position bias, which
onnxruntime's transformer optimizer fuses from T5's bucket arithmetic (``model_type="t5"``).

With the query and key lengths fixed, the bucket of every (query, key) pair is known at
import: a constant index gathered from the bias table, so only the table lookup remains.
"""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.contrib import MS


def t5_buckets(
    queries: int, keys: int, buckets: int, max_distance: int, bidirectional: bool
) -> np.ndarray:
    """[queries, keys] bucket indices of the key-minus-query distances: half the buckets
    exact for small distances, the rest logarithmic up to ``max_distance`` (in float32, as
    T5 computes them); bidirectional tables give positive distances their own half."""
    distance = np.arange(keys)[None, :] - np.arange(queries)[:, None]
    index = np.zeros_like(distance)
    if bidirectional:
        buckets //= 2
        index += (distance > 0) * buckets
        n = np.abs(distance)
    else:
        n = -np.minimum(distance, 0)
    exact = buckets // 2
    ratio = np.log(np.maximum(n, 1).astype(np.float32) / np.float32(exact))  # n < exact: unused
    scaled = ratio / np.float32(np.log(max_distance / exact)) * np.float32(buckets - exact)
    large = np.minimum(exact + scaled.astype(np.int64), buckets - 1)
    return index + np.where(n < exact, n, large)


@converter(f"{MS}.RelativePositionBias")
def relative_position_bias(cx: NodeContext):
    """bias_table [num_buckets, num_heads] (column-major: the optimizer stores the table's
    transpose under these dims), query_length, key_length -> [1, heads, query, key]."""
    queries = int(cx.require_const(1, "query_length"))
    keys = int(cx.require_const(2, "key_length"))
    if len(cx.shape(0)) != 2:
        raise ModelError(f"bias_table must be [num_buckets, num_heads], not {list(cx.shape(0))}")
    buckets, heads = cx.shape(0)
    max_distance = cx.attr("max_distance")
    bidirectional = bool(cx.attr("is_bidirectional", 0))
    if buckets < (4 if bidirectional else 2) or max_distance <= buckets // (4 if bidirectional else 2):
        raise ModelError(f"{buckets} buckets and max_distance {max_distance} define no T5 buckets")
    cx.reserve((queries, keys), np.int64, "the bucket index")
    index = t5_buckets(queries, keys, buckets, max_distance, bidirectional)
    table = cx.emit("reshape", [cx.input(0)], {"shape": (heads, buckets)})  # [head, bucket]
    bias = cx.emit("gather", [table, cx.constant(index, "buckets")], {"axis": 1})
    return cx.emit("reshape", [bias], {"shape": (1, heads, queries, keys)}, final=True)
