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
# the C pass computes eligible chains in fp16 lanes here (AVX512-FP16)
HALF = BUILT and fp16._native.fused_half(True)
needs_half = pytest.mark.skipif(not HALF, reason="no fp16 lanes here (no AVX512-FP16)")


@pytest.fixture
def float32_lanes():
    """The C pass in float32 lanes only (where the CPU would take fp16 lanes)."""
    fp16._native.fused_half(False)
    yield
    fp16._native.fused_half(True)


# fp16 values that stress the rounding: NaN, infinities, signed zeros, subnormals, the
# largest finite values (65504 + 16 = 65520 rounds to infinity), ties, ordinary numbers
NASTY = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0**-24, -(2.0**-24), 3 * 2.0**-24, 2.0**-14,
     1023 * 2.0**-24, 65504.0, -65504.0, 32768.0, 0.5, -1.5, 1.0, 3.0, 255.875, 1e-3, -7.25,
     2049.0, 0.1],
    dtype=np.float16,
)  # fmt: skip

BINARY = ("add", "sub", "mul", "real_div", "maximum", "minimum")
UNARY = ("sqrt", "abs", "relu", "square", "clip", "sigmoid_hard")
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
        if kind == "sigmoid_hard":  # alpha * x + beta in float32, one rounding at the end
            alpha, beta = (draw(st.sampled_from([0.2, -1.5, 0.0, 1e-4, 300.0])) for _ in "ab")
            kind_type = np.float16 if dtype == "fp16" else np.float32
            args.update(alpha=kind_type(alpha), beta=kind_type(beta))
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


@needs_half
@settings(
    max_examples=25,  # 0.2 s each: the suite's budget (the property above runs 100)
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=programs())
def test_fused_groups_in_float32_lanes_give_the_unfused_bits(
    case, monkeypatch, float32_lanes
) -> None:
    """The float32 lanes, which the property above mostly leaves to fp16 lanes here, on
    their own (other CPUs take them, and blocks whose inputs are not fp16 values)."""
    program, feeds = case
    with np.errstate(all="ignore"), monkeypatch.context() as patch:
        want = _load(program, False, patch).run(feeds)
        got = _load(program, True, patch).run(feeds)
    for name in want:
        assert_same_bits(got[name], want[name])


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
    assert fp16._native.fused_run(code, (x, b), (parts,), 1, 1024, 2048) == int(HALF)  # 1 block
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
        blocks = -(-x.size // fusion.FUSED_BLOCK)
        assert fp16._native.fused_run(code, (operand, b), (out,), 1) == blocks * HALF
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


def test_a_lone_step_with_a_per_channel_operand_runs_as_a_fused_pass(monkeypatch) -> None:
    """A squeeze-excitation scale, x [N, C, H, W] * s [N, C, 1, 1], is a group of one step
    run by the C pass (numpy's broadcast loop and rounding pass cost twice as much); a lone
    step over operands of its own shape stays as it was; the bits are the unfused ones."""
    x = mil.MilTensorType("fp16", (2, 8, 16, 40))
    s = mil.MilTensorType("fp16", (2, 8, 1, 1))
    ops = (mil.operation("mul", ("y", x), {"x": "x", "y": "s"}),
           mil.operation("exp", ("e", x), {"x": "y"}),
           mil.operation("sub", ("z", x), {"x": "e", "y": "x"}))  # fmt: skip
    binds = (mil.Binding("x", x), mil.Binding("s", s))
    program = mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, ops, ("z",)),))
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 8, 16, 40)).astype(np.float16),
             "s": rng.standard_normal((2, 8, 1, 1)).astype(np.float16)}  # fmt: skip
    feeds["x"].reshape(-1)[:4] = [np.nan, np.inf, -0.0, 65504]
    on = _load(program, True, monkeypatch)
    assert [st.op for st in on._plan.steps] == (["fused", "exp", "sub"] if BUILT else
                                                 ["mul", "exp", "sub"])  # fmt: skip
    with np.errstate(all="ignore"):
        got = on.run(feeds)["z"]
        want = _load(program, False, monkeypatch).run(feeds)["z"]
    assert_same_bits(got, want)


def _run_both(code: np.ndarray, inputs: tuple, outputs: int, temps: int, shape) -> tuple:
    """fused_run's outputs in fp16 lanes where it takes them and in float32 lanes, and how
    many blocks took fp16 lanes."""
    results = []
    for half in (True, False):
        fp16._native.fused_half(half)
        try:
            out = tuple(np.empty(shape, np.float32) for _ in range(outputs))
            count = fp16._native.fused_run(code, inputs, out, temps)
        finally:
            fp16._native.fused_half(True)
        results.append((out, count))
    (lanes16, count), (lanes32, none) = results
    assert none == 0
    return lanes16, lanes32, count


def _all_fp16_values(quiet: bool = False) -> np.ndarray:
    """Every fp16 bit pattern as float32 (NaN payloads kept; the signalling NaNs, which F16C
    would quiet, sit in blocks 31 and 63 of 1024 values), or with them quieted."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    if quiet:
        bits[(bits & 0x7E00) == 0x7C00] |= 0x0200  # quiet bit on (infinities become NaNs)
    return bits.view(np.float16).astype(np.float32)


_ARITHMETIC = {fusion.ADD: np.add, fusion.SUB: np.subtract, fusion.MUL: np.multiply,
               fusion.DIV: np.true_divide, fusion.MAX: np.maximum, fusion.MIN: np.minimum,
               fusion.EQ: np.equal, fusion.NE: np.not_equal, fusion.LT: np.less,
               fusion.LE: np.less_equal, fusion.GT: np.greater, fusion.GE: np.greater_equal}  # fmt: skip


@needs_half
def test_fp16_lanes_give_the_float32_bits_on_every_fp16_value() -> None:
    """Each op over every fp16 value against one value (NaN, infinities, zeros, subnormals,
    overflow to infinity, ties) and against every fp16 value shuffled: the fp16 lanes give
    the float32 lanes' bits, NaN payloads included, and numpy's rounded results."""
    x = _all_fp16_values()
    others = [np.float32(v) for v in NASTY.astype(np.float32)]
    others.append(_all_fp16_values(quiet=True)[np.random.default_rng(4).permutation(x.size)])
    for op, ufunc in _ARITHMETIC.items():
        for y in others:
            y = np.asarray(y, np.float32)
            # out0 = x (op) y, rounded; out1 = |x| (a second row: one op alone stays float32)
            code = np.array([[op, 1, 2, 0, 1, 0], [fusion.ABS, 0, 3, 0, 0, 0]], np.int32)
            lanes16, lanes32, count = _run_both(code, (x, y), 2, 0, x.shape)
            assert count == 62, (op, y)  # the signalling NaNs' blocks in float32 lanes
            for a, b in zip(lanes16, lanes32, strict=True):
                np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
            with np.errstate(all="ignore"):
                want = fp16.round_to_fp16(ufunc(x, y).astype(np.float32))
            assert_same_bits(lanes16[0], want)
    code = np.array([[fusion.SQRT, 1, 1, 0, 0, 0], [fusion.ABS, 0, 2, 0, 0, 0]], np.int32)
    lanes16, lanes32, count = _run_both(code, (x,), 2, 0, x.shape)
    assert count == 62
    np.testing.assert_array_equal(lanes16[0].view(np.uint32), lanes32[0].view(np.uint32))
    with np.errstate(all="ignore"):
        assert_same_bits(lanes16[0], fp16.round_to_fp16(np.sqrt(x)))


@needs_half
def test_select_and_logical_ops_in_fp16_lanes_with_bool_inputs_and_outputs() -> None:
    """A bool input (converted to 0 or 1) selects between fp16 values; a comparison and a
    logical op make a bool output: the same as the float32 lanes and numpy."""
    rng = np.random.default_rng(6)
    x = _all_fp16_values(quiet=True)
    y = x[rng.permutation(x.size)]
    m = rng.random(x.size) < 0.5
    # registers: x 0, y 1, m 2; outputs: sel 3 (float), both 4 (bool); temporary 5
    code = np.array([[fusion.SELECT, 0, 3, 0, 1, 2], [fusion.LT, 0, 5, 0, 1, 0],
                     [fusion.AND, 0, 4, 5, 2, 5]], np.int32)  # fmt: skip
    results = []
    for half in (True, False):
        fp16._native.fused_half(half)
        try:
            sel, both = np.empty(x.shape, np.float32), np.empty(x.shape, np.bool_)
            count = fp16._native.fused_run(code, (x, y, m), (sel, both), 1)
        finally:
            fp16._native.fused_half(True)
        results.append((sel, both, count))
    assert results[0][2] == 64 and results[1][2] == 0
    np.testing.assert_array_equal(results[0][0].view(np.uint32), results[1][0].view(np.uint32))
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert_same_bits(results[0][0], np.where(m, x, y))
    np.testing.assert_array_equal(results[0][1], (x < y) & m)


@needs_half
def test_a_block_with_a_value_off_the_fp16_grid_runs_in_float32_lanes() -> None:
    """Blocks whose inputs hold a value that is no fp16 value (an unrounded float32, a
    signalling NaN) run in float32 lanes, the other blocks in fp16 lanes; a per-channel
    operand off the grid sends its blocks there too; one value off the grid, all blocks."""
    rng = np.random.default_rng(7)
    x = fp16.round_to_fp16(rng.standard_normal((3, 3000)).astype(np.float32) * 30)
    x[0, 5] = 0.1  # block 0
    x.reshape(-1)[4100] = np.uint32(0x7FA00000).view(np.float32)  # a signalling NaN, block 4
    b = fp16.round_to_fp16(rng.standard_normal((3, 1)).astype(np.float32))
    # registers: x 0, b 1, out 2, temporary 3: t = x * b; out = t + x (both rounded)
    code = np.array([[fusion.MUL, 1, 3, 0, 1, 0], [fusion.ADD, 1, 2, 3, 0, 3]], np.int32)
    with np.errstate(all="ignore"):
        want = fp16.round_to_fp16(fp16.round_to_fp16(x * b) + x)
    lanes16, lanes32, count = _run_both(code, (x, b), 1, 1, x.shape)
    assert count == 9 - 2  # 9000 values: 9 blocks
    np.testing.assert_array_equal(lanes16[0].view(np.uint32), lanes32[0].view(np.uint32))
    assert_same_bits(lanes16[0], want)
    b[2, 0] = 0.1  # the third row's values: blocks 5 to 8
    with np.errstate(all="ignore"):
        want = fp16.round_to_fp16(fp16.round_to_fp16(x * b) + x)
    lanes16, lanes32, count = _run_both(code, (x, b), 1, 1, x.shape)
    assert count == 9 - 2 - 4
    np.testing.assert_array_equal(lanes16[0].view(np.uint32), lanes32[0].view(np.uint32))
    assert_same_bits(lanes16[0], want)
    one = np.full((1, 1), 0.1, np.float32)
    assert _run_both(code, (x, one), 1, 1, x.shape)[2] == 0


@needs_half
@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (2, 5, 7, 5), (1, 3, 31, 33), (2, 3, 1041, 1),
                                   (3, 4, 1, 300), (5, 600)])  # fmt: skip
def test_per_channel_operands_are_filled_in_fp16_runs(shape) -> None:
    """[1, C, 1, 1] and [N, C, 1, 1] operands over [N, C, H, W] (runs of one value, shorter
    than a vector, crossing blocks, of one value each) in fp16 lanes: numpy's bits."""
    rng = np.random.default_rng(sum(shape))
    x = fp16.round_to_fp16(rng.standard_normal(shape).astype(np.float32) * 10)
    x.reshape(-1)[:5] = [np.nan, -np.inf, -0.0, 2.0**-24, 65504.0]
    channel = tuple(d if k < 2 else 1 for k, d in enumerate(shape))
    for b_shape in ((1, *channel[1:]), channel):
        b = fp16.round_to_fp16(rng.standard_normal(b_shape).astype(np.float32))
        s = fp16.round_to_fp16(rng.standard_normal(channel).astype(np.float32))
        zero = np.zeros((), np.float32)
        inputs = (x, b, s, zero)
        # registers: x 0, b 1, s 2, zero 3, out 4, temporary 5: max(x + b, 0) * s (rounded)
        code = np.array([[fusion.ADD, 1, 5, 0, 1, 0], [fusion.MAX, 0, 5, 5, 3, 5],
                         [fusion.MUL, 1, 4, 5, 2, 5]], np.int32)  # fmt: skip
        with np.errstate(all="ignore"):
            want = fp16.round_to_fp16(np.maximum(fp16.round_to_fp16(x + b), zero) * s)
        lanes16, lanes32, count = _run_both(code, inputs, 1, 1, shape)
        assert count == -(-x.size // 1024)
        np.testing.assert_array_equal(lanes16[0].view(np.uint32), lanes32[0].view(np.uint32))
        assert_same_bits(lanes16[0], want)


def test_a_hard_sigmoid_joins_the_group_of_its_input(monkeypatch) -> None:
    """A squeeze-excitation gate, conv bias add then sigmoid_hard, is one fused step with
    the unfused bits (alpha * x + beta in float32, rounded once after the clamp)."""
    x = mil.MilTensorType("fp16", (3, 200, 1, 1))
    b = mil.MilTensorType("fp16", (1, 200, 1, 1))
    ops = (mil.operation("add", ("a", x), {"x": "x", "y": "b"}),
           mil.operation("sigmoid_hard", ("g", x), {"x": "a", "alpha": np.float16(0.2),
                                                    "beta": np.float16(0.5)}))  # fmt: skip
    binds = (mil.Binding("x", x), mil.Binding("b", b))
    program = mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, ops, ("g",)),))
    rng = np.random.default_rng(9)
    feeds = {"x": rng.choice(NASTY, (3, 200, 1, 1)), "b": (rng.standard_normal((1, 200, 1, 1))
                                                             * 3).astype(np.float16)}  # fmt: skip
    on = _load(program, True, monkeypatch)
    assert [st.op for st in on._plan.steps] == (["fused"] if BUILT else ["add", "sigmoid_hard"])
    with np.errstate(all="ignore"):
        got = on.run(feeds)["g"]
        want = _load(program, False, monkeypatch).run(feeds)["g"]
    assert_same_bits(got, want)
    assert np.isnan(got).any() and (got == 0).any() and (got == 1).any()
