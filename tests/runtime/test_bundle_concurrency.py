"""One bundle, many processes: loads during updates, two updaters, an update from a program
whose bundle was recompiled in place. Real processes, each with its own lock and file
descriptors (the locking is per open folder, as between separate programs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.errors import AnekitError
from anekit.runtime import load
from anekit.runtime.weight_update import StaleProgramError

N = 256
FEEDS = {"x": np.random.default_rng(9).standard_normal((1, N)).astype(np.float32)}


def _graph(w1: np.ndarray, w2: np.ndarray):  # noqa: ANN202
    x = anekit.input("x", (1, N))
    h = anekit.ops.matmul(x, anekit.constant(w1, name="w1"), name="h")
    return anekit.graph([anekit.ops.matmul(h, anekit.constant(w2, name="w2"), name="y")])


def _value(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((N, N)) * 0.05).astype(np.float32)


def _expected(w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return anekit.compile(_graph(w1, w2), "m4").program.run(FEEDS)["y"]


# an updater process: loads the bundle once, then writes one weight with alternating
# values until told how many updates to do; every error is printed, not hidden
_UPDATER = """
import sys, numpy as np
from anekit.runtime import load
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
values = [np.load(a) for a in sys.argv[4:]]
program = load(path)
print("ready", flush=True)
for i in range(count):
    program.update_weights({name: values[i % len(values)]}, verify=False)
print("done", flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OPENBLAS_NUM_THREADS": "1"}


def _updater(path: Path, name: str, count: int, *arrays: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _UPDATER, str(path), name, str(count), *map(str, arrays)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_loads_during_updates_never_see_or_leave_a_broken_bundle(tmp_path: Path) -> None:
    a, b, w2 = _value(1), _value(2), _value(3)
    path = anekit.compile(_graph(a, w2), "m4").save(tmp_path / "m.anekit")
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    expect = [_expected(a, w2), _expected(b, w2)]
    proc = _updater(path, "w1", 60, tmp_path / "b.npy", tmp_path / "a.npy")
    loads = 0
    while proc.poll() is None:
        got = load(path).run(FEEDS)["y"]  # digests verified: a torn state would be refused
        assert any(np.array_equal(got, e) for e in expect), "a mixture of old and new weights"
        loads += 1
    out, err = proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert loads >= 3
    final = load(path).run(FEEDS)["y"]
    assert np.array_equal(final, expect[0])  # the last of 60 updates (index 59) wrote a
    assert not [p for p in path.rglob(".*") if p.name.endswith(".anekit-new")]


def test_two_updaters_serialise_and_both_updates_land(tmp_path: Path) -> None:
    """Two processes, each holding the bundle loaded before the other wrote, update
    different weights in loops: no error, and the bundle ends with each one's last value
    (the later writer builds on the other's update instead of undoing it)."""
    w1, w2 = _value(4), _value(5)
    path = anekit.compile(_graph(w1, w2), "m4").save(tmp_path / "m.anekit")
    for i, v in enumerate((_value(6), _value(7), _value(8), _value(9))):
        np.save(tmp_path / f"v{i}.npy", v)
    one = _updater(path, "w1", 25, tmp_path / "v0.npy", tmp_path / "v1.npy")
    two = _updater(path, "w2", 25, tmp_path / "v2.npy", tmp_path / "v3.npy")
    for proc in (one, two):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
        assert b"Error" not in err, err.decode()
    got = load(path).run(FEEDS)["y"]
    assert np.array_equal(got, _expected(_value(6), _value(8)))  # each one's update 24 (even)


def test_an_update_from_before_a_recompile_in_place_is_refused(tmp_path: Path) -> None:
    w1, w2 = _value(10), _value(11)
    path = anekit.compile(_graph(w1, w2), "m4").save(tmp_path / "m.anekit")
    old = load(path)
    # recompiled in place by another process: the same architecture, new weights
    code = (
        "import sys, numpy as np, anekit\n"
        "from tests.runtime.test_bundle_concurrency import _graph, _value\n"
        "anekit.compile(_graph(_value(12), _value(13)), 'm4').save(sys.argv[1])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=_env(), timeout=300)
    recompiled = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    with pytest.raises(StaleProgramError, match="replaced .recompiled."):
        old.update_weights({"w1": _value(14)})
    assert {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()} == recompiled
    assert np.array_equal(load(path).run(FEEDS)["y"], _expected(_value(12), _value(13)))
    # and through another architecture: the old program's weight map no longer applies
    x = anekit.input("x", (1, N))
    other = anekit.graph([anekit.ops.matmul(x, anekit.constant(_value(15), name="w1"), name="y")])
    anekit.compile(other, "m4").save(path)
    fresh = load(path)
    with pytest.raises(StaleProgramError):
        old.update_weights({"w1": _value(16)})
    fresh.update_weights({"w1": _value(16)})  # the new program's own update is fine
    assert load(path).run(FEEDS)["y"].shape == (1, N)


def test_update_weights_on_a_full_or_read_only_disk_is_a_user_error(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import errno

    from anekit.runtime import weight_update

    w1, w2 = _value(17), _value(18)
    path = anekit.compile(_graph(w1, w2), "m4").save(tmp_path / "m.anekit")
    before = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    program = load(path)
    real = weight_update.write_synced
    for code in (errno.ENOSPC, errno.EROFS, errno.EACCES):

        def failing(target, chunks, *, exclusive=False, code=code, calls=[]):  # noqa: ANN001, ANN202, B006
            calls.append(target)
            if len(calls) > 1:  # the weight file was written: the journal fails
                raise OSError(code, os.strerror(code), str(target))
            return real(target, chunks, exclusive=exclusive)

        monkeypatch.setattr(weight_update, "write_synced", failing)
        with pytest.raises(AnekitError, match="the bundle is unchanged"):
            program.update_weights({"w1": _value(19)})
        monkeypatch.undo()
        after = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
        assert after == before  # nothing half-written, nothing left behind
    assert np.array_equal(load(path).run(FEEDS)["y"], _expected(w1, w2))


@pytest.mark.parametrize("bad", [[("w1", 0)], "w1", 5, None])
def test_update_weights_takes_a_mapping(tmp_path: Path, bad) -> None:  # noqa: ANN001
    program = anekit.compile(_graph(_value(20), _value(21)), "m4").program
    with pytest.raises(AnekitError, match="takes a mapping"):
        program.update_weights(bad)


def test_a_dead_updaters_files_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    path = anekit.compile(_graph(_value(22), _value(23)), "m4").save(tmp_path / "m.anekit")
    weights = next(path.glob("segments/*/weights"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = weights / f".weight.bin.{dead}-0123456789ab.anekit-new"
        live = weights / f".weight.bin.{sleeper.pid}-0123456789ab.anekit-new"
        for p in (stale, live):
            p.write_bytes(b"partial")
        start = time.monotonic()
        load(path).run(FEEDS)
        assert time.monotonic() - start < 60
        assert not stale.exists() and live.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
