"""Random engine-layer DAGs for the property tests (hypothesis strategies)."""

from __future__ import annotations

from hypothesis import strategies as st

from anekit.schedule import LayerInfo, Operand, link_layers

UNITS = ("mac", "planar", "dma")
MAINS = {"mac": ("conv", "matmul"), "planar": ("add", "softmax", "relu"), "dma": ("transpose",)}
LAYER_TYPES = {
    "conv": "conv",
    "matmul": "matmul",
    "add": "elementwise",
    "softmax": "softmax",
    "relu": "neuron",
    "transpose": "transpose",
}


@st.composite
def layer_dags(draw: st.DrawFn, max_layers: int = 14) -> tuple[LayerInfo, ...]:
    """A segment of 1..max_layers layers listed producers first, sized around a 2 MB budget.

    Tensors range from bytes to ~2 MB, so some layers stream and partitions close; operand
    geometry sometimes matches the producer's rows (chainable), sometimes not.
    """
    n = draw(st.integers(1, max_layers))
    layers: list[LayerInfo] = []
    for i in range(n):
        unit = draw(st.sampled_from(UNITS))
        main = draw(st.sampled_from(MAINS[unit]))
        c = draw(st.sampled_from((1, 4, 16, 64)))
        h = draw(st.sampled_from((1, 2, 8, 32)))
        w = draw(st.sampled_from((1, 16, 128, 512)))
        producers = (
            draw(st.lists(st.integers(0, i - 1), max_size=min(2, i), unique=True)) if i else []
        )
        if i and i - 1 not in producers and draw(st.sampled_from((True, True, False))):
            producers.append(i - 1)  # mostly chains, as real networks are
        operands = []
        for k, p in enumerate(sorted(producers)):
            src = layers[p]
            geometry = draw(st.sampled_from((src.row_geometry,) * 3 + (None, (3, 3))))
            operands.append(
                Operand(
                    tensor=src.output,
                    nbytes=src.output_bytes,
                    producer=src.name,
                    row_geometry=geometry,
                    first_rows=draw(st.integers(1, 3)),
                    weight_operand=main == "matmul" and k == 1,
                )
            )
        if not operands or draw(st.booleans()):
            operands.append(
                Operand(
                    tensor=f"in{i}",
                    nbytes=draw(st.sampled_from((64, 4096, 262144, 1048576))),
                    producer=None,
                    row_geometry=draw(st.sampled_from(((c, w), None))),
                )
            )
        weights = (
            ((f"w{i}", draw(st.sampled_from((128, 65536, 4194304)))),) if unit == "mac" else ()
        )
        out_bytes = c * h * w * 2
        layers.append(
            LayerInfo(
                name=f"L{i}",
                unit=unit,
                layer_type=LAYER_TYPES[main],
                main=main,
                flops=draw(st.integers(0, 10**9)),
                operands=tuple(operands),
                output=f"t{i}",
                output_bytes=out_bytes,
                out_shape=(1, c, h, w),
                weights=weights,
                segment_output=draw(st.sampled_from((False,) * 5 + (True,))) if i < n - 1 else True,
                in_place=unit == "planar" and bool(operands) and operands[0].nbytes == out_bytes,
            )
        )
    return link_layers(layers)
