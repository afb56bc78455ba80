"""The optimizer's update joined over groups of parameters (train/flat.py): the same state
bit for bit as one update per parameter, on sim and on reference, through skipped steps;
the same segments and CPU ops; and the grouping rules."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from anekit.train import SGD, Adam, AdamW, Trainer, flat
from anekit.train.models import cnn, cnn_weights
from anekit.train.step import _update_view, update_ops
from tests.train.models import mlp, mlp_weights


def _models():
    rng = np.random.default_rng(5)
    yield (
        "mlp",
        mlp(16, mlp_weights()),
        {
            "x": rng.standard_normal((16, 64)).astype(np.float32),
            "target": rng.integers(0, 10, 16),
        },
    )
    yield (
        "cnn",
        cnn(4, cnn_weights((1, 4, 8), side=8), side=8),
        {
            "x": rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
            "target": rng.integers(0, 10, 4),
        },
    )


OPTIMIZERS = {
    "adam_l2": lambda: Adam(lr=1e-2, weight_decay=1e-2),
    "adamw": lambda: AdamW(lr=1e-2),
    "sgd_nesterov": lambda: SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
}


def _same_runs(graph, batch, optimizer, backend, steps, max_grad_norm=None) -> Trainer:
    """Train a joined and a per-parameter trainer through ``steps`` (a batch per step, or
    a loss scale to step the plain batch at), assert every state value bit-identical
    and return the joined one."""
    runs = [Trainer(graph, "cross_entropy", optimizer(), backend=backend,
                    max_grad_norm=max_grad_norm, flat_update=f) for f in (True, False)]  # fmt: skip
    start = runs[0].state_values()
    for step in steps:
        for t in runs:
            if isinstance(step, float):
                scale, t.loss_scale = t.loss_scale, step
                t.step(batch)
                t.loss_scale = scale
            else:
                t.step(step)
    joined, alone = (t.state_values() for t in runs)
    assert runs[0].skipped == runs[1].skipped and runs[0].step_count == runs[1].step_count
    assert joined.keys() == alone.keys() == start.keys()
    for k in joined:  # every parameter and optimizer slot, bit for bit
        assert joined[k].tobytes() == alone[k].tobytes(), k
    assert all(joined[p].tobytes() != start[p].tobytes() for p in runs[0].params)
    np.testing.assert_array_equal(runs[0].history, runs[1].history)  # NaN losses too
    return runs[0]


def _steps(batch: dict) -> list:
    bad = {**batch, "x": batch["x"].copy()}
    bad["x"].reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    # a NaN/Inf input, then a loss scale whose scaled backward overflows fp16 on sim
    return [batch, batch, bad, batch, 2.0**40, batch, batch]


@pytest.mark.parametrize("backend", ["sim", "reference"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_joined_update_is_bit_identical_through_skipped_steps(backend, opt):
    for _, graph, batch in _models():
        t = _same_runs(graph, batch, OPTIMIZERS[opt], backend, _steps(batch))
        assert t.skipped == (2 if backend == "sim" else 1) and t.step_count == 7 - t.skipped


@pytest.mark.parametrize("backend", ["sim", "reference"])
def test_joined_update_is_bit_identical_with_clipping(backend):
    for _, graph, batch in _models():
        t = _same_runs(graph, batch, OPTIMIZERS["adam_l2"], backend, _steps(batch), 0.05)
        assert t.skipped == (2 if backend == "sim" else 1)
        assert all(np.isfinite(v).all() for v in t.state_values().values())


def test_joined_update_keeps_the_segments_and_cpu_ops():
    for name, graph, batch in _models():
        runs = {f: Trainer(graph, "cross_entropy", Adam(), backend="sim", flat_update=f)
                for f in (True, False)}  # fmt: skip
        compiled = {f: t.compiled(batch) for f, t in runs.items()}
        devices = {f: [s.device for s in c.segments] for f, c in compiled.items()}
        assert devices[True] == devices[False], name
        cpu = {f: Counter(r["op"] for r in t.check(batch)) for f, t in runs.items()}
        assert cpu[True] == cpu[False], name
        ops = {f: Counter(update_ops(c.graph, runs[f]._programs[runs[f]._active][0].state))
               for f, c in compiled.items()}  # fmt: skip
        assert ops[True]["concat"] > 0 and "transpose" not in ops[True]
        assert ops[True].total() < ops[False].total(), name


def test_groups_by_row_width_and_size():
    shapes = {"w": (64, 32), "b": (32,), "odd": (10,), "k": (4, 1, 3, 3), "big": (512, 256),
              "odd_big": (16385,)}  # fmt: skip
    got = flat.groups(shapes, _update_view)
    assert [g.params for g in got] == [("w", "b"), ("odd", "k"), ("big",), ("odd_big",)]
    wide, narrow, big, odd_big = got
    assert wide.axis == 1 and wide.views == ((1, 64, 1, 32), (1, 1, 1, 32))
    assert narrow.axis == 3 and narrow.views == ((1, 1, 1, 10), (1, 1, 1, 36))
    assert narrow.sizes == (10, 36)
    # larger than a group: alone, in the view of the per-parameter update
    assert not big.joined and big.views == (_update_view((512, 256)),)
    assert not odd_big.joined and odd_big.views == ((16385,),)
    # a group never passes its size: 65536 elements = 4 members of 16384
    many = {f"p{i}": (512, 32) for i in range(9)}
    assert [len(g.params) for g in flat.groups(many, _update_view)] == [4, 4, 1]
    rows = {f"r{i}": (4097,) for i in range(5)}  # a row of at most 16384
    assert [g.sizes for g in flat.groups(rows, _update_view)] == [(4097,) * 3, (4097,) * 2]
    assert all(not g.joined for g in flat.groups(shapes, _update_view, flat=False))
