"""Values kept beside engine surfaces in the simulator's storage form: the bytes a read sees
are the ones an eager write would have stored, and a later write makes a held value stale."""

from __future__ import annotations

import numpy as np

from anekit.formats.bundle import SegmentIO
from anekit.runtime.binding import Surfaces
from anekit.simulator.fp16 import round_to_fp16

SHAPE = (4, 24)


def _port(name: str, dtype: str = "fp16") -> SegmentIO:
    return SegmentIO(value=name, mil_name=name, dtype="fp32", mil_dtype=dtype, shape=SHAPE,
                     mil_shape=SHAPE)  # fmt: skip


def _value(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 100
    x[0, :3] = [-0.0, np.inf, np.nan]
    return round_to_fp16(x)


def _eager(value: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return value.astype(np.float16)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_held_results_become_the_bytes_an_eager_write_stores() -> None:
    producer = Surfaces([_port("a")], [_port("y")], 49152)
    consumer = Surfaces([_port("x")], [_port("z")], 49152)
    value = _value(1)
    strided = np.ascontiguousarray(value.T).T  # a transposed result
    producer.write_output("y", strided)
    consumer.hand_over("x", producer, "y")
    held = consumer.stored_inputs()["x"]
    assert held.flags.c_contiguous and _same(held, value)  # no conversion, same bits
    assert _same(consumer.read_input("x"), _eager(value))
    assert _same(producer.read_output("y"), _eager(value))
    assert _same(np.asarray(consumer.read_inputs()["x"]), _eager(value))


def test_a_write_makes_held_values_stale() -> None:
    s = Surfaces([_port("h")], [_port("h_next")], 49152)
    s.alias("h", "h_next")
    first, second, third = _value(2), _value(3), _value(4)
    s.write_output("h_next", first)  # a step's result: what the next step reads
    assert _same(s.stored_inputs()["h"], first)
    s.write_input("h", second)  # a seed through the aliased input replaces it
    assert _same(s.read_output("h_next"), _eager(second))
    assert _same(s.stored_inputs()["h"], second)
    s.write_output("h_next", third)
    s.hold_input("h", first)  # held, then overwritten through the producer's port
    s.write_output("h_next", second)
    assert _same(s.read_input("h"), _eager(second))


def test_values_that_are_not_fp16_storage_are_written_at_once() -> None:
    s = Surfaces([_port("i", "int32")], [_port("o", "fp32")], 49152)
    ints = np.arange(96, dtype=np.int32).reshape(SHAPE)
    s.hold_input("i", ints)
    assert _same(s.read_input("i"), ints.astype("<i4"))
    assert _same(s.stored_inputs()["i"], ints)
    values = _value(5)
    s.write_output("o", values)
    assert _same(s.read_output("o"), values.astype("<f4"))
