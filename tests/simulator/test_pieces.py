"""sim/pieces.py: a kernel's pieces shared between the caller and one helper thread."""

from __future__ import annotations

import os
import threading

import pytest

from anekit.simulator import pieces


def test_pieces_cover_the_range_in_order() -> None:
    seen: list[tuple[int, int]] = []
    results = pieces.run(lambda lo, hi: seen.append((lo, hi)) or (lo, hi), 10, 4)
    assert results == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert sorted(seen) == results
    assert pieces.run(lambda lo, hi: (lo, hi), 1, 4) == [(0, 1)]


def test_the_caller_takes_every_piece_when_the_helper_is_held_up() -> None:
    release = threading.Event()
    pieces._helper().submit(release.wait, 30)  # the helper thread is busy elsewhere
    try:
        ran_on = pieces.run(lambda lo, hi: threading.get_ident(), 8, 4)
    finally:
        release.set()
    assert ran_on == [threading.get_ident()] * 4


def test_an_error_in_any_piece_reaches_the_caller() -> None:
    def fail_third(lo: int, hi: int) -> int:
        if lo == 4:
            raise ValueError("piece 3")
        return lo

    with pytest.raises(ValueError, match="piece 3"):
        pieces.run(fail_third, 8, 4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_gets_its_own_helper() -> None:
    pieces._helper()  # started in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's helper thread is not here
        try:
            done = pieces.run(lambda lo, hi: (lo, hi), 8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
            own = pieces._pool_pid == os.getpid()
            os.write(write, b"ok" if done and own else b"no")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"ok"


def test_a_second_thread_only_with_an_idle_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "own_load", lambda: 0.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert pieces.spare_cpu(2) and not pieces.spare_cpu(1)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.1, 1.0, 1.0))  # another busy process
    assert not pieces.spare_cpu(2) and pieces.spare_cpu(4)
    # the same load average made by this process's own threads leaves a CPU idle
    monkeypatch.setattr(pieces, "own_load", lambda: 1.0)
    assert pieces.spare_cpu(2)


def test_own_load_follows_this_process_cpu_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two busy threads' CPU time over wall time, averaged over the load average's minute."""
    clock = {"wall": 100.0, "cpu": 5.0}
    monkeypatch.setattr(pieces.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(pieces.time, "process_time", lambda: clock["cpu"])
    own = pieces._OwnLoad()
    assert own() == 0.0  # nothing measured yet
    for _ in range(180):  # three minutes of both threads busy
        clock["wall"] += 1.0
        clock["cpu"] += 2.0
        last = own()
    assert 1.85 < last < 2.0  # 2 * (1 - e^-3)
    for _ in range(300):  # then idle for five minutes
        clock["wall"] += 1.0
        last = own()
    assert last < 0.02
