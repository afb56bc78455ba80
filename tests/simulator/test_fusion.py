"""Fused elementwise groups (sim/fusion.py, _native.fused_run): random chains and DAGs of the
fused ops give the unfused steps' bits (NaN, infinities, signed zeros, subnormals, overflow
to infinity, broadcasts, strided inputs); groups form on a real training step and every
value read outside a group is still produced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit.formats import mil
from anekit.simulator import SimProgram, fp16, fusion, gemm, pieces
from anekit.simulator.fusion import FusedKernel
from anekit.train import Adam, Trainer
from tests.train.models import digits, mlp, mlp_weights

BUILT = fusion.available()
needs_c = pytest.mark.skipif(
    not BUILT, reason="no C pass here (extension not built, or no AVX2/F16C)"
)

# fp16 values that stress the rounding: NaN, infinities, signed zeros, subnormals, the
# largest finite values (65504 + 16 = 65520 rounds to infinity), ties, ordinary numbers
NASTY = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0**-24, -(2.0**-24), 3 * 2.0**-24, 2.0**-14,
     1023 * 2.0**-24, 65504.0, -65504.0, 32768.0, 0.5, -1.5, 1.0, 3.0, 255.875, 1e-3, -7.25,
     2049.0, 0.1],
    dtype=np.float16,
)  # fmt: skip

BINARY = ("add", "sub", "mul", "real_div", "maximum", "minimum")
UNARY = ("sqrt", "abs", "relu", "square", "clip")
COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = ("logical_and", "logical_or", "logical_xor")
OTHER = ("exp", "tanh")  # elementwise but never fused: they split groups


def _values(draw, shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = rng.choice([1e-4, 1.0, 300.0, 40000.0], size)
    with np.errstate(over="ignore"):  # beyond 65504: infinity, as wanted
        normal = (rng.standard_normal(size) * scale).astype(np.float16)
    nasty = rng.choice(NASTY, size)
    picks = rng.random(size) < draw(st.sampled_from([0.0, 0.2, 0.6]))
    return np.where(picks, nasty, normal).astype(np.float16).reshape(shape)


def _broadcast_shape(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with some axes 1 and maybe fewer leading axes: broadcasts to ``shape``."""
    kept = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - kept :]
    return tuple(d if draw(st.booleans()) else 1 for d in tail)


@st.composite
def programs(draw):
    """A random MIL function of fused (and a few unfused) elementwise ops over one output
    shape with broadcast operands (float, and bools from comparisons), and its feeds."""
    dtype = draw(st.sampled_from(["fp16", "fp16", "fp32"]))
    big = draw(st.booleans())
    rank = draw(st.integers(1, 4))
    dims = st.integers(1, 40 if big else 6)
    shape = tuple(draw(st.lists(dims, min_size=rank, max_size=rank)))
    if big:
        shape = (*shape[:-1], shape[-1] * 53)  # over one block of the C pass, odd lengths
    ops: list[mil.Operation] = []
    shapes: dict[str, tuple[int, ...]] = {}
    bools: set[str] = set()  # the names of bool values
    feeds: dict[str, np.ndarray] = {}
    inputs = []

    def mil_type(s: tuple[int, ...], is_bool: bool = False):
        kind = "bool" if is_bool else dtype
        return mil.MilTensorType(kind, s) if s else mil.ScalarType(kind)

    for k in range(draw(st.integers(1, 3))):
        s = shape if k == 0 else _broadcast_shape(draw, shape)
        name = f"x{k}"
        feeds[name] = _values(draw, s)
        inputs.append((name, mil_type(s)))
        shapes[name] = s
    if len(shape) > 1 and draw(st.booleans()):  # a transposed view: a strided operand
        # all axes reversed (runs of one value) or the first two swapped (long runs)
        order = (
            list(range(len(shape)))[::-1] if draw(st.booleans()) else [1, 0, *range(2, len(shape))]
        )
        perm = np.array(order, np.int32)  # its own inverse
        t_shape = tuple(shape[p] for p in order)
        feeds["t"] = _values(draw, t_shape)
        inputs.append(("t", mil_type(t_shape)))
        ops.append(mil.operation("transpose", ("xt", mil_type(shape)), {"x": "t", "perm": perm}))
        shapes["xt"] = shape
    if draw(st.booleans()):  # a bool input
        s = _broadcast_shape(draw, shape)
        feeds["m"] = np.isnan(_values(draw, s)) | (_values(draw, s) > 0)
        inputs.append(("m", mil_type(s, True)))
        shapes["m"] = s
        bools.add("m")

    def operand(is_bool: bool = False) -> str:
        names = sorted(n for n in shapes if (n in bools) == is_bool)
        if not names or draw(st.integers(0, 4)) == 0:  # a constant, often a scalar
            s = () if draw(st.booleans()) else _broadcast_shape(draw, shape)
            name = f"c{len(ops)}"
            value = _values(draw, s)
            if is_bool:
                value = value > 0
                bools.add(name)
            elif dtype == "fp32":
                value = value.astype(np.float32)
            ops.append(mil.const(name, value))
            shapes[name] = s
            return name
        return draw(st.sampled_from(names))

    results = []
    for n in range(draw(st.integers(2, 14))):
        kind = draw(st.sampled_from(BINARY * 2 + UNARY + OTHER + COMPARE + LOGICAL
                                    + ("logical_not", "select", "select")))  # fmt: skip
        name = f"v{n}"
        is_bool = kind in COMPARE or kind in LOGICAL or kind == "logical_not"
        if kind in BINARY or kind in COMPARE:
            args = {"x": operand(), "y": operand()}
        elif kind in LOGICAL:
            args = {"x": operand(True), "y": operand(True)}
        elif kind == "logical_not":
            args = {"x": operand(True)}
        elif kind == "select":
            is_bool = draw(st.integers(0, 3)) == 0
            args = {"cond": operand(True), "a": operand(is_bool), "b": operand(is_bool)}
        else:
            args = {"x": operand()}
        if kind == "clip":
            low, high = sorted(draw(st.lists(st.sampled_from([-2.0, -0.0, 0.0, 1.0, 300.0]),
                                             min_size=2, max_size=2, unique=True)))  # fmt: skip
            args.update(alpha=np.float16(low) if dtype == "fp16" else np.float32(low),
                        beta=np.float16(high) if dtype == "fp16" else np.float32(high))  # fmt: skip
            if not low < high:
                continue
        read = ("x", "y", "cond", "a", "b")
        out = np.broadcast_shapes(*(shapes[a] for k, a in args.items() if k in read))
        ops.append(mil.operation(kind, (name, mil_type(out, is_bool)), args))
        shapes[name] = out
        if is_bool:
            bools.add(name)
        results.append(name)
    if not results:
        results.append("x0")
    outputs = sorted({results[-1], *draw(st.lists(st.sampled_from(results), max_size=3))})
    binds = tuple(mil.Binding(n, t) for n, t in inputs)
    function = mil.Function("main", "ios18", binds, tuple(ops), tuple(outputs))
    return mil.MilProgram("1.3", (), (function,)), feeds


def _load(program: mil.MilProgram, fused: bool, monkeypatch) -> SimProgram:
    monkeypatch.setattr(fusion, "ENABLED", fused)
    return SimProgram(program)


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, NaNs equal as NaNs (their payloads aside)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = np.uint16 if got.dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(got.view(bits)[~nan], want.view(bits)[~nan])


@needs_c
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=programs())
def test_fused_groups_give_the_unfused_bits(case, monkeypatch) -> None:
    program, feeds = case
    with np.errstate(all="ignore"), monkeypatch.context() as patch:
        want = _load(program, False, patch).run(feeds)
        fused = _load(program, True, patch)
        got = fused.run(feeds)
        stored = fused.run_stored({k: fp16.widen_fp16(v) if v.dtype == np.float16 else v
                                   for k, v in feeds.items()})  # fmt: skip
        patch.setattr(fp16, "_native", None)  # the numpy path of a fused step
        numpy_only = fused.run(feeds)
    assert set(got) == set(want)
    for name in want:
        assert_same_bits(got[name], want[name])
        assert_same_bits(numpy_only[name], want[name])
        wide = want[name].astype(np.float32) if want[name].dtype == np.float16 else want[name]
        assert_same_bits(stored[name], wide)


@needs_c
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=programs())
def test_fused_groups_in_pieces_on_two_threads_give_the_unfused_bits(case, monkeypatch) -> None:
    """Every fused pass split into pieces of whole blocks on two threads (whatever the size
    and the load): each block is computed as in one pass."""
    program, feeds = case
    with np.errstate(all="ignore"), monkeypatch.context() as patch:
        want = _load(program, False, patch).run(feeds)
        patch.setattr(fusion, "SPLIT_WORK", 0)
        patch.setattr(gemm, "THREADS", 2)
        patch.setattr(pieces, "spare_cpu", lambda threads: True)
        got = _load(program, True, patch).run(feeds)
    for name in want:
        assert_same_bits(got[name], want[name])


@needs_c
def test_a_range_of_blocks_computes_those_values_only() -> None:
    """fused_run's [start, stop): ranges on block edges together give the whole pass's bits;
    values outside a range are not written; a range past the size is refused."""
    rng = np.random.default_rng(8)
    x = fp16.round_to_fp16(rng.standard_normal((3, 1000)).astype(np.float32) * 50)
    b = fp16.round_to_fp16(rng.standard_normal((1, 1000)).astype(np.float32))
    code = np.array([[fusion.MUL, 1, 3, 0, 1, 0], [fusion.SQRT, 1, 2, 3, 3, 3]], np.int32)
    whole = np.empty(x.shape, np.float32)
    fp16._native.fused_run(code, (x, b), (whole,), 1)
    parts = np.full(x.shape, 7.0, np.float32)
    assert fp16._native.fused_run(code, (x, b), (parts,), 1, 1024, 2048) == 0
    flat = parts.reshape(-1)
    assert np.all(flat[:1024] == 7) and np.all(flat[2048:] == 7)
    fp16._native.fused_run(code, (x, b), (parts,), 1, 0, 1024)
    fp16._native.fused_run(code, (x, b), (parts,), 1, 2048)  # to the end
    assert_same_bits(parts, whole)
    for start, stop in ((0, 3001), (2048, 1024), (-1, 5)):
        with pytest.raises(ValueError, match="start and stop"):
            fp16._native.fused_run(code, (x, b), (parts,), 1, start, stop)


@needs_c
def test_strided_and_broadcast_inputs_are_read_in_place() -> None:
    """A transposed input and a [1, C, 1, 1] bias into [N, C, H, W] (gathered per block),
    against numpy op by op."""
    rng = np.random.default_rng(5)
    x = fp16.round_to_fp16(rng.standard_normal((6, 5, 7, 40)).astype(np.float32) * 100)
    b = fp16.round_to_fp16(rng.standard_normal((1, 5, 1, 1)).astype(np.float32))
    xt = np.ascontiguousarray(x.transpose(3, 1, 2, 0)).transpose(3, 1, 2, 0)  # same values
    # registers: x 0, b 1, out 2, temporary 3: t = x * b (rounded); out = max(t + x, b)
    code = np.array([[fusion.MUL, 1, 3, 0, 1, 0], [fusion.ADD, 1, 3, 3, 0, 3],
                     [fusion.MAX, 0, 2, 3, 1, 3]], np.int32)  # fmt: skip
    want = np.maximum(fp16.round_to_fp16(fp16.round_to_fp16(x * b) + x), b)
    for operand in (x, xt):
        out = np.empty(x.shape, np.float32)
        assert fp16._native.fused_run(code, (operand, b), (out,), 1) == 0
        assert_same_bits(out, want)
    with pytest.raises(ValueError, match="does not broadcast"):
        fp16._native.fused_run(code, (x, np.zeros((2, 1, 1, 1), np.float32)), (out,), 1)
    for bad in ([99, 0, 2, 0, 1, 0], [fusion.ADD, 0, 0, 0, 1, 0], [fusion.ADD, 0, 2, 0, 1, 4]):
        with pytest.raises(ValueError, match="bad code"):  # op, result, operand out of range
            fp16._native.fused_run(np.array([bad], np.int32), (x, b), (out,), 1)


def _trainer(fused: bool, monkeypatch) -> Trainer:
    monkeypatch.setattr(fusion, "ENABLED", fused)
    return Trainer(mlp(32, mlp_weights()), "cross_entropy", Adam(lr=1e-2), backend="sim")


@needs_c
def test_a_training_step_runs_in_far_fewer_steps_with_the_same_bits(monkeypatch) -> None:
    train, _ = digits(96)
    batches = [{k: v[i * 32 : (i + 1) * 32] for k, v in train.items()} for i in range(3)]
    runs = {}
    for fused in (False, True):
        t = _trainer(fused, monkeypatch)
        losses = [t.step(b) for b in batches]
        runs[fused] = (losses, t.state_values(), t.compiled(batches[0]).program.runners("sim"))
    assert runs[True][0] == runs[False][0]
    for k, v in runs[False][1].items():
        assert np.array_equal(runs[True][1][k].view(np.uint16), v.view(np.uint16)), k
    before = sum(len(r.program._plan.steps) for r in runs[False][2])
    after = sum(len(r.program._plan.steps) for r in runs[True][2])
    assert after < 0.7 * before, (before, after)
    groups = [s for r in runs[True][2] for s in r.program._plan.steps if s.op == "fused"]
    assert max(len(s.kernel.members) for s in groups) >= 10  # an optimizer update's chain
    for runner in runs[True][2]:
        _assert_outside_readers_are_served(runner.program._plan)


def _assert_outside_readers_are_served(plan) -> None:
    """Every value of a group read by another step or returned is an output of its step;
    every other member value is not (it never reaches memory)."""
    outside = {slot for s in plan.steps for _, slot in s.dynamic}
    outside |= {slot for s in plan.steps for _, items in s.variadic for slot, _ in items}
    outside |= {slot for _, slot, _ in plan.outputs}
    for step in plan.steps:
        if not isinstance(step.kernel, FusedKernel):
            continue
        written = {e.slot for e in step.outputs}
        inside = {slot for m in step.kernel.members for _, slot in m.dynamic}
        for member in step.kernel.members:
            slot = member.outputs[0].slot
            if slot in outside:
                assert slot in written, member.name
            elif slot in inside:
                assert slot not in written, member.name


def test_fusion_off_leaves_the_steps_as_they_are(monkeypatch) -> None:
    x = mil.MilTensorType("fp16", (2, 3))
    ops = (mil.operation("mul", ("a", x), {"x": "x", "y": "x"}),
           mil.operation("add", ("y", x), {"x": "a", "y": "x"}))  # fmt: skip
    program = mil.MilProgram("1.3", (), (mil.Function("main", "ios18", (mil.Binding("x", x),),
                                                      ops, ("y",)),))  # fmt: skip
    off = _load(program, False, monkeypatch)
    assert [s.op for s in off._plan.steps] == ["mul", "add"]
    on = _load(program, True, monkeypatch)
    assert [s.op for s in on._plan.steps] == (["fused"] if BUILT else ["mul", "add"])
